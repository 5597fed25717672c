"""The project's cron actor, discovered by ``rundramatiq`` as a tasks module."""

import dramatiq


@dramatiq.actor(cron="* * * * * *", max_retries=0)
def heartbeat() -> None:
    """Fires every second."""
