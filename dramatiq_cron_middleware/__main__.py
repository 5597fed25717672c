"""``python -m dramatiq_cron_middleware``: the ``dramatiq-cron`` command."""

from .cli import run

run()
