"""``python -m dramatiq_cron_middleware``: the ``dramatiq-cron`` command."""

from .ops.cli import run

run()
