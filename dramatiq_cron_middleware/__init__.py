"""Cron-scheduled dramatiq actors, fired from inside the workers, exactly
once per tick.

    broker.add_middleware(CronMiddleware(redis="redis://localhost:6379/0"))

    @dramatiq.actor(cron="*/5 * * * *")
    def cleanup(): ...
"""

from .dedup import CronDeduplication
from .errors import CronConfigurationError, CronError, CronScheduleError
from .middleware import CronMiddleware
from .schedule import Schedule

__all__ = [
    "CronConfigurationError",
    "CronDeduplication",
    "CronError",
    "CronMiddleware",
    "CronScheduleError",
    "Schedule",
    "__version__",
]

__version__ = "0.1.0"
