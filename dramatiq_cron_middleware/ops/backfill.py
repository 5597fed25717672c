"""Backfill, for the CLI's older imports: see ``dramatiq_cron_middleware.backfill``."""

from ..backfill import DEFAULT_MAX_TICKS, LISTED, Backfill, BackfillPlan, BackfillReport, Ticks, instant_ms

__all__ = ["DEFAULT_MAX_TICKS", "LISTED", "Backfill", "BackfillPlan", "BackfillReport", "Ticks", "instant_ms"]
