"""Sign in, sign up and sign out: Django's own auth, in the site's pages.

Sign-in and sign-out are Django's views (they already check `next` and rotate the
session), with the limits of accounts_app/limits.py; sign-up is ours, because Django
ships no view for it, and so is the confirmation of an email address
(accounts_app/confirm.py).
"""

from urllib.parse import quote

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import login
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from accounts_app import confirm, limits, proof
from queue_app import proof as queue_proof
from ticketing.errors import DomainError

PROOF_MISSING = _("Wait a moment while the page checks that you are a person, then send the form again.")
PROOF_FAILED = _("The check that you are a person did not pass. Send the form again.")

# The backend that checks passwords, named when sign-up signs the new account in
# (limits.SignInLimits, listed before it, signs no one in).
PASSWORD_BACKEND = "django.contrib.auth.backends.ModelBackend"


class LimitedSignIn(AuthenticationForm):
    """A sign-in form that says why an attempt past a limit was refused: the limits
    stop `authenticate()`, which the form would otherwise report as a wrong password."""

    def get_invalid_login_error(self) -> forms.ValidationError:
        refusal = getattr(self.request, "sign_in_refusal", None)
        if refusal is None:
            return super().get_invalid_login_error()
        return forms.ValidationError(refusal.message, code="rate_limit")


class SignInForm(LimitedSignIn):
    """Django's form with the site's wording: Django's Korean for the field name
    ("사용자 이름") reads awkwardly inside its error message."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": _("Wrong username or password. Both are case-sensitive."),
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].label = _("Username")


class AdminSignInForm(LimitedSignIn, AdminAuthenticationForm):
    """The admin's sign-in form (accounts_app/admin.py), saying so when refused."""


class SignUpForm(UserCreationForm):
    """A username, a password twice and, if the person likes, an email address; and,
    while sign-up asks for one (accounts_app/proof.py), a solved proof of work, which
    the page solves in the background (static/js/proof-form.js)."""

    altcha = forms.CharField(required=False, widget=forms.HiddenInput)

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")
        labels = {"username": _("Username"), "email": _("Email (optional)")}
        widgets = {"email": forms.EmailInput(attrs={"autocomplete": "email"})}

    def __init__(self, *args, difficulty: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.difficulty = difficulty
        if settings.ACCOUNTS_REQUIRE_CONFIRMED_EMAIL:
            # The address the confirmation link goes to.
            self.fields["email"].required = True
            self.fields["email"].label = _("Email")
        self.solved: queue_proof.Proof | None = None

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.difficulty > 0:
            payload = cleaned.get("altcha") or ""
            if not payload:
                raise forms.ValidationError(PROOF_MISSING, code="proof_of_work")
            try:
                self.solved = proof.verify(payload)
            except DomainError:
                raise forms.ValidationError(PROOF_FAILED, code="proof_of_work") from None
        return cleaned

    def spend_proof(self) -> None:
        """Use the solution up, once the form is otherwise valid (a typing mistake
        keeps it good for the next try); refused when it was used before."""
        if self.solved is not None and not proof.spend(self.solved):
            self.add_error(None, forms.ValidationError(PROOF_FAILED, code="proof_of_work"))


sign_in = limits.sign_in_view(LoginView.as_view(authentication_form=SignInForm))
# POST only (Django's default since 5.0): a link or a prefetch must not sign anyone out.
sign_out = LogoutView.as_view()


def _safe_next(request: HttpRequest) -> str:
    """The `next` the request carries when it points into this site, else ""."""
    url = request.POST.get("next", request.GET.get("next", ""))
    allowed = url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return url if allowed else ""


def _create(form: SignUpForm) -> AbstractBaseUser | None:
    """The new account; None, with the form told why, when another took its name."""
    try:
        # Its own savepoint, so a refused insert leaves the request usable.
        with transaction.atomic():
            return form.save()
    except IntegrityError:
        # Two sign-ups raced for one name: both passed the form's check, the unique
        # index let only the first in. The form's check says it in these words.
        # Translators: Django's own message, worded with 아이디 like the sign-up page's label.
        form.add_error("username", _("A user with that username already exists."))
        return None


@sensitive_post_parameters("password1", "password2")
@never_cache
def sign_up(request: HttpRequest) -> HttpResponse:
    """Create the account, sign the new user in and send them where they were going.
    What an account costs is charged once the form is valid (a person's typing
    mistakes cost nothing): its proof of work, then its client's count."""
    next_url = _safe_next(request)
    level = proof.difficulty()
    form = SignUpForm(request.POST if request.method == "POST" else None, difficulty=level)
    refusal = None
    if form.is_valid():
        form.spend_proof()
    if form.is_valid() and (refusal := limits.sign_up_refusal(request)) is not None:
        form.add_error(None, forms.ValidationError(refusal.message, code="rate_limit"))
    if form.is_valid() and (user := _create(form)) is not None:
        login(request, user, backend=PASSWORD_BACKEND)
        response = redirect(next_url or settings.LOGIN_REDIRECT_URL)
        if settings.ACCOUNTS_REQUIRE_CONFIRMED_EMAIL:
            _send_confirmation(request, user, user.email)
            response = redirect(_confirm_url(next_url))
        limits.remember_device(response, user.get_username())
        return response
    context = {"form": form, "next": next_url, "challenge": proof.challenge(level) if level else None}
    if refusal is None:
        return render(request, "registration/signup.html", context)
    response = render(request, "registration/signup.html", context, status=429)
    response["Retry-After"] = str(refusal.retry_after)
    return response


# The address the last confirmation link went to, for the confirm page to say so.
SENT_TO = "accounts_app.confirmation_sent_to"


def _confirm_url(next_url: str) -> str:
    return reverse("confirm-email") + (f"?next={quote(next_url)}" if next_url else "")


def _send_confirmation(request: HttpRequest, user: AbstractBaseUser, email: str) -> str | None:
    """Send the link, counted against the account's mails: None when sent, else
    what to tell the person."""
    refusal = limits.confirmation_mail_refusal(user.pk)
    if refusal is not None:
        return refusal.message
    if not confirm.send_link(request, user, email):
        return _("We could not send the mail just now. Try again in a few minutes.")
    request.session[SENT_TO] = email
    return None


class EmailForm(forms.Form):
    email = forms.EmailField(label=_("Email"), widget=forms.EmailInput(attrs={"autocomplete": "email"}))


@login_required
@never_cache
def confirm_email(request: HttpRequest) -> HttpResponse:
    """Where a signed-in person confirms their address: whether it is confirmed,
    and a form that sends the link (to their address, or one they type)."""
    next_url = _safe_next(request)
    form = EmailForm(request.POST or None, initial={"email": request.user.email})
    if form.is_valid():
        problem = _send_confirmation(request, request.user, form.cleaned_data["email"])
        if problem is None:
            return redirect(_confirm_url(next_url))
        form.add_error(None, problem)
    context = {
        "form": form,
        "next": next_url,
        "confirmed": confirm.confirmed_address(request.user),
        "sent_to": request.session.get(SENT_TO),
        "days": confirm.LINK_MAX_AGE // 86_400,
    }
    return render(request, "registration/confirm_email.html", context)


@never_cache
def confirm_email_link(request: HttpRequest, token: str) -> HttpResponse:
    """The link in the mail. Opening it confirms (no form to send): a mail reader
    that opens links to check them confirms only that the mail was delivered,
    which is what the link proves anyway."""
    outcome, email = confirm.confirm(token)
    status = 200 if outcome is confirm.Outcome.CONFIRMED else 400
    context = {"outcome": outcome.value, "email": email}
    return render(request, "registration/confirm_email_done.html", context, status=status)
