"""The dashboard inside a Django project, behind the admin's staff login.

    # urls.py
    from django.urls import include, path

    urlpatterns = [
        path("admin/", admin.site.urls),
        path("cron/", include("dramatiq_cron_middleware.web.django")),
    ]

The broker is django_dramatiq's (``dramatiq.get_broker()`` once Django has
set it up), or the one named by the setting ``DRAMATIQ_CRON_DASHBOARD =
{"broker": "myapp.tasks:broker", "read_only": False}``.  The apps' task
modules (``DRAMATIQ_AUTODISCOVER_MODULES``, ``tasks`` by default) are
imported on the first request, as ``rundramatiq`` does, so their cron
actors are known.  Every request
must come from a logged-in staff user (others are sent to the admin's
login page), and its ``Host`` must be one of ``ALLOWED_HOSTS``.  The
dashboard checks its own CSRF token, so its view is exempt from Django's
(which it would otherwise refuse, not knowing it).
"""

from __future__ import annotations

import importlib
import io
import threading
from typing import Any

__all__ = ["dashboard_view", "urlpatterns"]

#: The Django setting with the dashboard's options (all optional):
#: ``broker`` (``"module:attribute"``), ``read_only``, ``refresh_ms``.
SETTING = "DRAMATIQ_CRON_DASHBOARD"

_lock = threading.Lock()
_dashboard: Any = None


def _get_dashboard() -> Any:
    global _dashboard
    with _lock:
        if _dashboard is None:
            import dramatiq
            from django.conf import settings
            from django.utils.module_loading import autodiscover_modules

            from .app import CronDashboard

            # The web process does not run rundramatiq, which imports the
            # apps' task modules: import them as it does, so the actors
            # (and their schedules) are declared here too.
            autodiscover_modules(*getattr(settings, "DRAMATIQ_AUTODISCOVER_MODULES", ["tasks"]))

            options = dict(getattr(settings, SETTING, None) or {})
            spec = options.pop("broker", None)
            if spec:
                module, _, attribute = str(spec).partition(":")
                broker = getattr(importlib.import_module(module), attribute or "broker")
            else:
                broker = dramatiq.get_broker()
            # Django strips the include's prefix into SCRIPT_NAME itself,
            # guards every request with the staff login (so the dashboard
            # checks no credential of its own) and checks the Host against
            # ALLOWED_HOSTS (see _view).
            _dashboard = CronDashboard(
                broker, prefix="", **{"unauthenticated": True, "allowed_hosts": ["*"], **options}
            )
        return _dashboard


def _view(request: Any, path: str = "") -> Any:
    from django.http import HttpResponse

    request.get_host()  # Django's ALLOWED_HOSTS check: a 400 for any other host
    environ = dict(request.META)
    mount = request.path[: len(request.path) - len(path)] if path else request.path
    environ["SCRIPT_NAME"] = mount.rstrip("/")
    environ["PATH_INFO"] = "/" + path
    # Read the body through Django (it may have looked at it already).
    environ["wsgi.input"] = io.BytesIO(request.body)
    environ["CONTENT_LENGTH"] = str(len(request.body))
    # The staff user the login let in, for the audit of actions.
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        environ["REMOTE_USER"] = user.get_username()
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        captured["status"], captured["headers"] = status, headers

    body = b"".join(_get_dashboard()(environ, start_response))
    code, _, reason = captured["status"].partition(" ")
    response = HttpResponse(body, status=int(code), reason=reason)
    for name, value in captured["headers"]:
        if name.lower() == "content-length":
            continue
        if name.lower() == "set-cookie":
            # Through Django's own cookie API, so its middleware's cookies
            # (session, CSRF) and the dashboard's coexist.
            cookie_name, _, rest = value.partition("=")
            cookie_value, _, attributes = rest.partition(";")
            where = environ["SCRIPT_NAME"] or "/"
            if "Max-Age=0" in attributes:
                response.delete_cookie(cookie_name, path=where, samesite="Strict")
            else:
                response.set_cookie(cookie_name, cookie_value, path=where, samesite="Strict", httponly=True)
        else:
            response[name] = value
    return response


def _build() -> tuple[Any, list[Any]]:
    from django.contrib.admin.views.decorators import staff_member_required
    from django.urls import path, re_path
    from django.views.decorators.csrf import csrf_exempt

    view = staff_member_required(csrf_exempt(_view))
    return view, [path("", view, name="dramatiq-cron"), re_path(r"^(?P<path>.+)$", view)]


dashboard_view, urlpatterns = _build()
