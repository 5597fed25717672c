"""Run by tests/test_django.py: the cron dashboard inside this project,
through Django's test client (an in-memory database, migrated here)."""

import os
import re
import sys
from urllib.parse import urlencode

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cronsite.settings")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

call_command("migrate", verbosity=0)
client = Client()


def post(path, form):
    """As a browser sends the dashboard's forms: URL-encoded."""
    return client.post(path, urlencode(form), content_type="application/x-www-form-urlencoded")


anonymous = client.get("/cron/")
assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"], anonymous
User.objects.create_user("clerk", password="pw")
client.login(username="clerk", password="pw")
assert client.get("/cron/schedules").status_code == 302, "a non-staff user must be sent to the login"

User.objects.create_user("ops", password="pw", is_staff=True)
client.login(username="ops", password="pw")
overview = client.get("/cron/")
assert overview.status_code == 200 and b"<h1>Overview</h1>" in overview.content, overview.content[:500]
schedules = client.get("/cron/schedules")
text = schedules.content.decode()
assert 'data-schedule="heartbeat"' in text, text[:2000]
assert 'href="/cron/schedule?id=' in text, "links stay under the include's prefix"
token = re.search(r'name="csrf" value="([^"]+)"', text).group(1)
paused = post("/cron/pause", {"csrf": token, "schedule": "heartbeat", "next": "/schedules"})
assert paused.status_code == 303 and paused["Location"] == "/cron/schedules", paused
forged = post("/cron/resume", {"csrf": "forged-token-value", "schedule": "heartbeat"})
assert forged.status_code == 403
assert post("/cron/resume", {"csrf": token, "schedule": "heartbeat"}).status_code == 303
history = client.get("/cron/schedule?id=heartbeat").content.decode()
assert history.count('by <span class="who">ops</span>') == 2, "the audit names the staff user: " + history[-3000:]
print("dashboard ok")
