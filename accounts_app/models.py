"""What the accounts keep beyond Django's users."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class ConfirmedEmail(models.Model):
    """An account's email address, confirmed by the link sent to it
    (accounts_app/confirm.py). One mailbox confirms one account: `mailbox` is the
    address as the seat cap per buyer spells it (booking_app/buyers.py: case,
    +tags and Gmail's dots do not make another mailbox), and unique, so of two
    accounts confirming one mailbox at once the index lets one in."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        on_delete=models.CASCADE,
        related_name="confirmed_email",
    )
    email = models.EmailField(_("email"), help_text=_("The address as the person typed it."))
    mailbox = models.CharField(_("mailbox"), max_length=254, unique=True)
    confirmed_at = models.DateTimeField(_("confirmed at"), auto_now=True)

    class Meta:
        verbose_name = _("confirmed email")
        verbose_name_plural = _("confirmed emails")

    def __str__(self) -> str:
        return self.email
