from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QueueAppConfig(AppConfig):
    name = "queue_app"
    verbose_name = _("Waiting room")
