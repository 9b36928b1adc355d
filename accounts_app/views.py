"""Sign in, sign up and sign out: Django's own auth, in the site's pages.

Sign-in and sign-out are Django's views as they are (they already check `next`
and rotate the session); only sign-up is ours, because Django ships no view for it.
"""

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model, login
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from ticketing import redis as r
from ticketing.ratelimit import client_ip, client_net


class SignInForm(AuthenticationForm):
    """Django's form with the site's wording: Django's Korean for the field name
    ("사용자 이름") reads awkwardly inside its error message."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": _("Wrong username or password. Both are case-sensitive."),
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].label = _("Username")

    def clean(self) -> dict:
        """Count the attempt first: password guessing is limited per client (an IPv4
        address or an IPv6 /64) and minute, right passwords included, so a script
        learns nothing from which attempts were refused."""
        per_minute = settings.RATE_LIMIT_SIGN_IN
        if per_minute > 0 and self.request is not None:
            counter = r.ratelimit_key("sign-in", client_net(client_ip(self.request.META)))
            allowed, _reset_ms = r.run("ratelimit", [counter], [per_minute, 60_000])
            if not allowed:
                raise forms.ValidationError(
                    _("Too many sign-in attempts from your network. Try again in a minute."),
                    code="rate_limit",
                )
        return super().clean()


class SignUpForm(UserCreationForm):
    """A username, a password twice and, if the person likes, an email address."""

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")
        labels = {"username": _("Username"), "email": _("Email (optional)")}
        widgets = {"email": forms.EmailInput(attrs={"autocomplete": "email"})}


sign_in = LoginView.as_view(authentication_form=SignInForm)
# POST only (Django's default since 5.0): a link or a prefetch must not sign anyone out.
sign_out = LogoutView.as_view()


def _safe_next(request: HttpRequest) -> str:
    """The `next` the request carries when it points into this site, else ""."""
    url = request.POST.get("next", request.GET.get("next", ""))
    allowed = url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return url if allowed else ""


@sensitive_post_parameters("password1", "password2")
@never_cache
def sign_up(request: HttpRequest) -> HttpResponse:
    """Create the account, sign the new user in and send them where they were going."""
    next_url = _safe_next(request)
    form = SignUpForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            # Its own savepoint, so a refused insert leaves the request usable.
            with transaction.atomic():
                user = form.save()
        except IntegrityError:
            # Two sign-ups raced for one name: both passed the form's check, the
            # unique index let only the first in.
            model = get_user_model()
            form.add_error("username", model._meta.get_field("username").error_messages["unique"])
        else:
            login(request, user)
            return redirect(next_url or settings.LOGIN_REDIRECT_URL)
    return render(request, "registration/signup.html", {"form": form, "next": next_url})
