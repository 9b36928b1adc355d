"""Settings the crowd's requests read, each read once.

`settings.X` runs Django's LazyObject.__getattribute__ in Python, a few hundred ns
on every read: a join read four. Here a setting is read once, and again after any
setting changes (a test's override_settings, pytest-django's `settings`).
"""

from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver


@cache
def setting(name: str) -> Any:
    return getattr(settings, name)


@receiver(setting_changed)
def _forget(**kwargs: Any) -> None:
    setting.cache_clear()
