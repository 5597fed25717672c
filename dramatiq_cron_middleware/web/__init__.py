"""The web dashboard: see and steer the cron scheduler in a browser.

    from dramatiq_cron_middleware.web import CronDashboard

    dashboard = CronDashboard(broker, prefix="/cron")   # a WSGI application

Needs the ``web`` extra (``pip install 'dramatiq-cron-middleware[web]'``).
See docs/operations.md, "Web dashboard", for Flask, Django and
``dramatiq-cron web``.
"""

from .app import CronDashboard

__all__ = ["CronDashboard"]
