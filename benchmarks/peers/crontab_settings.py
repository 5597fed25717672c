"""Minimal Django settings for the dramatiq-crontab peer: its own app, the
peer app whose ``tasks`` module declares the actors, and the lock Redis."""

import os

SECRET_KEY = "benchmark-only"
INSTALLED_APPS = ["dramatiq_crontab", "peerapp"]
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
TIME_ZONE = "UTC"
DRAMATIQ_CRONTAB = {"REDIS_URL": os.environ["PEER_LOCK_URL"]}
