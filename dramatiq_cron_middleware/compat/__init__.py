"""Drop-in replacements for the schedulers our users come from, so that the
first step of a migration is an import change (docs/migration.md):

- :mod:`.crontab`: dramatiq-crontab's ``@cron("...")`` and ``@interval(seconds=...)``;
- :mod:`.periodiq`: periodiq's ``PeriodiqMiddleware`` and ``periodic=cron("...")``.

Both schedule through :class:`~dramatiq_cron_middleware.CronMiddleware`:
no scheduler process, one fenced leader.
"""
