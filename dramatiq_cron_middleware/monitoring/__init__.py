"""Run monitoring: what became of every cron message (run records, written
by the workers), each schedule's health (decided by the leader under its
fenced lease), and the alerts sent when a health changes."""

from .records import HEALTH_STATES, RUN_OUTCOMES, Alert, RunRecord, ScheduleHealth

__all__ = ["HEALTH_STATES", "RUN_OUTCOMES", "Alert", "RunRecord", "ScheduleHealth"]
