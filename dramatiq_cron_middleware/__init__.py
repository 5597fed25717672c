"""Cron-scheduled dramatiq actors, fired from inside the workers, exactly
once per tick.

    broker.add_middleware(CronMiddleware(redis="redis://localhost:6379/0"))

    @dramatiq.actor(cron="*/5 * * * *")
    def cleanup(): ...
"""

from .dedup import CronDeduplication
from .errors import CronConfigurationError, CronError, CronScheduleError, CronUnavailableError
from .middleware import CronMiddleware, find_middleware
from .schedules.schedule import Schedule
from .store.runtime import RuntimeSchedule

__all__ = [
    "CronConfigurationError",
    "CronDeduplication",
    "CronError",
    "CronMiddleware",
    "CronScheduleError",
    "CronUnavailableError",
    "RuntimeSchedule",
    "Schedule",
    "__version__",
    "find_middleware",
]

__version__ = "0.1.0"
