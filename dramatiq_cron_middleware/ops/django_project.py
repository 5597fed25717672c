"""The operator's commands in a Django project: ``django.setup()`` and the
project's tasks modules before the app is imported, as django_dramatiq's
``rundramatiq`` does, so ``dramatiq-cron`` needs no hand-written module."""

from __future__ import annotations

import importlib
import os

from ..errors import CronConfigurationError

__all__ = ["SETTINGS_ENV", "setup_from_environment"]


#: The environment variable naming a Django project's settings module.
SETTINGS_ENV = "DJANGO_SETTINGS_MODULE"


def setup_from_environment() -> list[str]:
    """For ``dramatiq-cron`` in a Django project: with
    ``DJANGO_SETTINGS_MODULE`` set, call ``django.setup()`` (which builds
    django_dramatiq's broker with its middleware) and import the tasks
    modules of the installed apps as django_dramatiq's ``rundramatiq``
    finds them (``DRAMATIQ_AUTODISCOVER_MODULES``, by default ``tasks``,
    without ``DRAMATIQ_IGNORED_MODULES``), so every app's actors are
    declared.  Returns the modules imported; nothing is done (an empty
    list) without the variable.

    Raises:
      CronConfigurationError: Django is missing, or its set-up failed (one
        line naming the settings module and the error).
    """
    settings_module = os.environ.get(SETTINGS_ENV)
    if not settings_module:
        return []
    try:
        import django
        from django.apps import apps
        from django.conf import settings
        from django.utils.module_loading import module_has_submodule
    except ImportError:
        raise CronConfigurationError(
            f"{SETTINGS_ENV}={settings_module!r} is set, but Django is not installed"
        ) from None
    try:
        django.setup()
        names = tuple(getattr(settings, "DRAMATIQ_AUTODISCOVER_MODULES", ("tasks",)))
        ignored = set(getattr(settings, "DRAMATIQ_IGNORED_MODULES", ()))
        found = []
        for config in apps.get_app_configs():
            for name in names:
                if module_has_submodule(config.module, name):
                    module = f"{config.name}.{name}"
                    if not _ignored(module, ignored):
                        importlib.import_module(module)
                        found.append(module)
    except Exception as exc:  # the project's own error: one line, as every CLI error
        raise CronConfigurationError(
            f"cannot set up Django ({SETTINGS_ENV}={settings_module!r}): {type(exc).__name__}: {exc}"
        ) from None
    return found


def _ignored(module: str, ignored: set[str]) -> bool:
    """django_dramatiq's rule: a name, or a ``package.*`` prefix, in ``DRAMATIQ_IGNORED_MODULES``."""
    parts = module.split(".")
    return module in ignored or any(".".join(parts[:n]) + ".*" in ignored for n in range(1, len(parts)))
