"""Settings of the minimal Django project: django_dramatiq with the cron
middleware given as a dotted path and configured by ``DRAMATIQ_CRON``.

The test passes the Redis URL and the record directory in the environment.
"""

import os

SECRET_KEY = "not-a-secret: tests only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_dramatiq", "cronjobs"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}

DRAMATIQ_CRON = {
    "redis": os.environ["CRON_DJANGO_REDIS_URL"],
    "lock_ttl": 2000,
    "prefix": "django-cron",
}

DRAMATIQ_BROKER = {
    "BROKER": "dramatiq.brokers.stub.StubBroker",
    "OPTIONS": {},
    # The list replaces django_dramatiq's defaults, so dramatiq's usual
    # middleware is named here too.  The cron middleware comes before any
    # actor is declared because django_dramatiq builds the broker first.
    "MIDDLEWARE": [
        "dramatiq.middleware.AgeLimit",
        "dramatiq.middleware.TimeLimit",
        "dramatiq.middleware.Callbacks",
        "dramatiq.middleware.Retries",
        "dramatiq.middleware.CurrentMessage",
        "dramatiq_cron_middleware.django.DjangoCronMiddleware",
        "cronjobs.recording.Recorder",
    ],
}
