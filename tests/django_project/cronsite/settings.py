"""Settings of the minimal Django project: django_dramatiq with the cron
middleware given as a dotted path and configured by ``DRAMATIQ_CRON``.

The test passes the Redis URL and the record directory in the environment.
"""

import os

SECRET_KEY = "not-a-secret: tests only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
# The admin's apps and middleware guard the cron dashboard's URL include
# (cronsite/urls.py) with the staff login.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_dramatiq",
    "cronjobs",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "cronsite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
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
