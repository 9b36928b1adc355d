from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QueueAppConfig(AppConfig):
    name = "queue_app"
    verbose_name = _("Waiting room")

    def ready(self) -> None:
        # Each module that calls a Lua script checks its calls against the script's
        # header when it is imported: importing them here makes a mismatch stop the
        # process while Django starts (`manage.py check`, every server), not in a request.
        from queue_app import admission, draw, events, line, services  # noqa: F401
