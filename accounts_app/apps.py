from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AccountsAppConfig(AppConfig):
    name = "accounts_app"
    verbose_name = _("Accounts")
