from django.contrib import admin
from django.http import HttpRequest

from accounts_app.models import ConfirmedEmail
from accounts_app.views import AdminSignInForm

# The admin's sign-in page says when an attempt was refused by the limits
# (accounts_app/limits.py); its route is accounts_app/urls.py's, which answers 429.
admin.site.login_form = AdminSignInForm


@admin.register(ConfirmedEmail)
class ConfirmedEmailAdmin(admin.ModelAdmin):
    """Who confirmed which mailbox. Deleting a row frees the mailbox (a person whose
    address a script confirmed first) and asks that account to confirm again."""

    list_display = ("email", "user", "confirmed_at")
    search_fields = ("email", "mailbox", "user__username")
    readonly_fields = ("user", "email", "mailbox", "confirmed_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by following a link only
