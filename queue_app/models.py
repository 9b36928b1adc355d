"""The operator's record of an event. Redis holds the live state (see services)."""

import hashlib
import re
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.text import capfirst, format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ticketing import money

# No braces (they form the Redis Cluster hash tag) and no colons (the key separator).
# The schema's pattern (ECMAScript, where `$` is the very end); Python matches ids in
# full with EVENT_ID_RE (its `$` would also match before a trailing newline).
EVENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
EVENT_ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# A presale allow-list's email domain: labels of letters, digits and hyphens, lower case.
EMAIL_DOMAIN_RE = re.compile(r"\A(?=.{1,253}\Z)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}\Z")


# Proof-of-work difficulty a phone solves in about 1-2 s (docs/fairness.md).
SUGGESTED_PROOF_OF_WORK = 50_000
# The hot-sale preset's live places per client address: a couple sharing a home
# connection, not a script.
HOT_SALE_PLACES_PER_ADDRESS = 2
# The most of the admission rate a priority lane may take: the general line always
# gets at least the rest (docs/modes.md).
MAX_PRIORITY_SHARE = 90


class Event(models.Model):
    class Status(models.TextChoices):
        OPEN = "OPEN", _("Open")
        PAUSED = "PAUSED", _("Paused")  # joins accepted, nobody admitted
        CLOSED = "CLOSED", _("Closed")  # joins refused, polls answer EXPIRED

    event_id = models.CharField(
        _("event id"),
        max_length=64,
        unique=True,
        validators=[RegexValidator(EVENT_ID_RE, _("Letters, digits, '.', '_' and '-' only."))],
    )
    name = models.CharField(_("name"), max_length=200, blank=True)
    total_seats = models.PositiveIntegerField(_("total seats"), default=100)
    status = models.CharField(_("status"), max_length=6, choices=Status.choices, default=Status.OPEN)
    admit_per_second = models.PositiveIntegerField(
        _("admit per second"),
        default=70,
        help_text=_("People moved from the line into the active window each second."),
    )
    active_window_seconds = models.PositiveIntegerField(
        _("active window seconds"),
        default=180,
        validators=[MinValueValidator(1)],
        help_text=_("How long an admitted person may book."),
    )
    max_active_users = models.PositiveIntegerField(
        _("max active users"), default=0, help_text=_("Most people in the active window at once; 0 = no cap.")
    )
    max_seats_per_booking = models.PositiveIntegerField(
        _("max seats per booking"), default=4, validators=[MinValueValidator(1)]
    )

    class Mode(models.TextChoices):
        # docs/modes.md; lua/join.lua applies them, a switch keeps every place.
        QUEUE = "queue", _("Queue: everyone waits for the admission tick")
        SAFETY_NET = "safety-net", _("Safety net: straight in while there is room and nobody waits")
        PASS_THROUGH = "pass-through", _("Pass through: everyone straight in, still counted")
        REJECT = "reject", _("Reject: no new places; people in line keep theirs")

    mode = models.CharField(
        _("mode"),
        max_length=12,
        choices=Mode.choices,
        default=Mode.QUEUE,
        help_text=_("How a new arrival is let in. Switching during a sale keeps every place."),
    )
    claim_seconds = models.PositiveIntegerField(
        _("claim seconds"),
        default=0,
        help_text=_(
            "An admitted person must come back (a poll or the booking page) within this time, "
            "or their turn passes and the slot goes to the next person; 0 = no claim time."
        ),
    )
    claim_grace = models.BooleanField(
        _("grace for the late"),
        default=False,
        help_text=_(
            "A person who comes back after the claim time, while their window lasts, takes "
            "their turn again if the active cap has room. Off: they join again at the back."
        ),
    )
    # Protections against scripts (docs/fairness.md). Off by default: each one asks
    # something of a plain client. The admin's "hot sale" preset turns them on.
    proof_of_work = models.PositiveIntegerField(
        _("proof of work"),
        default=0,
        help_text=format_lazy(
            _(
                "Proof of work at join: the hashes a client computes on average "
                "(suggested {suggested}, about 1-2 s on a phone); 0 = off."
            ),
            suggested=f"{SUGGESTED_PROOF_OF_WORK:,}",
        ),
    )
    require_account = models.BooleanField(
        _("require account"),
        default=False,
        help_text=_("Joining needs a signed-in account; one place per account."),
    )
    max_places_per_address = models.PositiveIntegerField(
        _("max places per address"),
        default=0,
        help_text=_(
            "Events without accounts: most live places (waiting or active) per client "
            "address (IPv4, or IPv6 /64); 0 = no cap. Carrier-grade NAT puts many people behind one address."
        ),
    )
    max_seats_per_buyer = models.PositiveIntegerField(
        _("max seats per buyer"),
        default=0,
        help_text=_(
            "Most seats one buyer holds across bookings, by normalised email; 0 = no cap "
            "by email. An account is always capped: at this, or else at the most seats per booking."
        ),
    )
    # Checkout (booking_app/checkout.py): a priced event holds the seats of a booking
    # while its buyer pays, and releases them if the payment does not come in time.
    price = models.PositiveIntegerField(
        _("price"),
        default=0,
        validators=[MaxValueValidator(money.MAX_PRICE)],
        help_text=_("Per seat, in the currency's minor unit (KRW has none: 55000 is 55,000 KRW); 0 = free."),
    )
    currency = models.CharField(
        _("currency"),
        max_length=3,
        choices=money.CURRENCY_CHOICES,
        default=money.DEFAULT_CURRENCY,
        validators=[money.validate_currency],
    )
    hold_seconds = models.PositiveIntegerField(
        _("hold seconds"),
        default=600,
        validators=[MinValueValidator(5), MaxValueValidator(3600)],
        help_text=_("How long a priced booking's seats are held while its buyer pays."),
    )
    # What a buyer who cancels a paid booking gets back (booking_app/checkout.py:
    # booking_end). An operator's cancellation, and a payment that came after its
    # hold ended, are always refunded in full: that buyer never had the seats.
    refund_percent = models.PositiveSmallIntegerField(
        _("refund percent"),
        default=100,
        validators=[MaxValueValidator(100)],
        help_text=_(
            "Of a paid booking its buyer cancels, the share refunded, rounded down to the "
            "currency's minor unit; 0 = none. An operator's cancellation is refunded in full."
        ),
    )
    late_confirmation = models.BooleanField(
        _("late confirmation"),
        default=False,
        help_text=_(
            "A payment that arrives after its hold was released confirms the booking if the "
            "sale is open and its seats are still free; otherwise (and when off) it is refunded."
        ),
    )
    # The durable seat count: the sum of held and confirmed reservations, kept by a database
    # trigger in the same statement as every change of a reservation (see
    # booking_app/migrations/0003_seat_ledger_trigger.py). Redis decides who gets a
    # seat; this column and the constraint below make Postgres refuse a sale that
    # Redis allowed from a count it had lost (a restart that lost its last second),
    # so a seat is never sold twice whatever Redis says.
    seats_sold = models.PositiveIntegerField(_("seats sold"), default=0, editable=False)
    # A scheduled start (docs/draw.md): joins before it enter the pre-queue, drawn
    # into the line at this time in an order anyone can check.
    opens_at = models.DateTimeField(
        _("opens at"),
        null=True,
        blank=True,
        help_text=_(
            "Scheduled start: people who join before it are placed in the line in a random "
            "order drawn at this time, which anyone can check; later arrivals follow in order. "
            "Empty: the line is first come, first served from the first join."
        ),
    )
    # A presale (queue_app/presale.py): until this time only holders of a presale
    # code or accounts on the event's allow-list take a new place.
    public_from = models.DateTimeField(
        _("public from"),
        null=True,
        blank=True,
        help_text=_(
            "Presale: before this time, only people with a presale code or an account on the "
            "allow-list may join; everyone may from then on. Empty: no presale."
        ),
    )
    # The priority lane (docs/modes.md): a presale's holders join a second line,
    # admitted ahead of the general one at this share of the rate (lua/admit.lua).
    priority_share = models.PositiveSmallIntegerField(
        _("priority share"),
        default=0,
        validators=[MaxValueValidator(MAX_PRIORITY_SHARE)],
        help_text=_(
            "Percent of the admission rate given first to a priority lane, which holders of a "
            "presale code or accounts on the allow-list join, during the presale and after it. "
            "The general line always gets the rest, and all of it while the lane is empty. "
            "0 = no lane."
        ),
    )
    # When the event last became CLOSED: its Redis data goes EVENT_PURGE_AFTER_SECONDS
    # later (booking_app/retention.py); None while it is not closed.
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(seats_sold__lte=models.F("total_seats")), name="never_oversold"
            ),
        ]

    def __str__(self) -> str:
        # An event with no name reads as words ("spring-gala" as "Spring gala"): pages
        # show it to people, who should not have to read an id.
        return self.name or capfirst(re.sub(r"[-_]+", " ", self.event_id))

    def save(self, *args, **kwargs) -> None:
        if self.status == self.Status.CLOSED:
            self.closed_at = self.closed_at or timezone.now()
        else:
            self.closed_at = None
        # seats_sold moves only by the reservations' trigger: saving the operator's
        # fields must never write back a count read before a sale.
        fields = kwargs.get("update_fields")
        if not self._state.adding and fields is None:
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields if not f.primary_key and f.name != "seats_sold"
            ]
        elif fields is not None and "status" in fields:
            kwargs["update_fields"] = [*fields, "closed_at"]
        super().save(*args, **kwargs)
        if self.opens_at is not None:
            # The seed is chosen when a start is first scheduled, so that its
            # commitment can be shown from then on (docs/draw.md).
            Draw.objects.get_or_create(event=self)

    def clean(self) -> None:
        """A price needs a payment provider. A priority lane has no place in a drawn
        start's order (the draw orders one line). A start is set in the future, and stays
        as it is once it has passed (the pre-queue closed then, and its draw is under
        way or done)."""
        stored = (
            None
            if self._state.adding
            else type(self).objects.filter(pk=self.pk).values_list("opens_at", flat=True).first()
        )
        if self.price and not settings.PAYMENTS_PROVIDER:
            said = _("No payment provider is set up (PAYMENTS_PROVIDER): this server sells free seats only.")
            raise ValidationError({"price": said})
        if self.price and settings.PAYMENTS_PROVIDER == "toss" and self.currency != "KRW":
            raise ValidationError({"currency": _("Toss Payments takes payments in KRW.")})
        if self.priority_share and self.opens_at is not None:
            said = _("A priority lane and a scheduled start's draw do not go together: choose one.")
            raise ValidationError({"priority_share": said})
        if self.opens_at == stored:
            return
        now = timezone.now()
        if stored is not None and stored <= now:
            raise ValidationError(
                {"opens_at": _("The start has passed: its draw is under way or done, so it stays.")}
            )
        if self.opens_at is not None and self.opens_at <= now:
            raise ValidationError({"opens_at": _("The start must be in the future.")})

    def apply_hot_sale(self) -> None:
        """The protections a contested sale wants together, each kept where the
        operator already chose a value: proof of work at the suggested difficulty,
        a cap on live places per address, and a seat cap per buyer (email) of the
        most seats per booking. Accounts stay the operator's choice: they need an
        audience with accounts."""
        self.proof_of_work = self.proof_of_work or SUGGESTED_PROOF_OF_WORK
        self.max_places_per_address = self.max_places_per_address or HOT_SALE_PLACES_PER_ADDRESS
        self.max_seats_per_buyer = self.max_seats_per_buyer or self.max_seats_per_booking

    def protections(self) -> list[str]:
        """The protections on, in a few words each, for operators (in their language)."""
        on = []
        if self.proof_of_work:
            on.append(gettext("proof of work %(n)s") % {"n": f"{self.proof_of_work:,}"})
        if self.require_account:
            on.append(gettext("accounts"))
        if self.max_places_per_address:
            on.append(gettext("%(n)s places/address") % {"n": self.max_places_per_address})
        if self.max_seats_per_buyer:
            on.append(gettext("%(n)s seats/buyer") % {"n": self.max_seats_per_buyer})
        return on

    @classmethod
    def defaults_from_settings(cls) -> dict:
        return {
            "admit_per_second": settings.ENTRY_BATCH_SIZE,
            "active_window_seconds": settings.ACTIVE_USER_TTL_SEC,
            "max_active_users": settings.MAX_ACTIVE_USERS,
            "max_seats_per_booking": settings.MAX_SEATS_PER_BOOKING,
        }


def new_seed() -> bytes:
    return secrets.token_bytes(32)


def commitment(seed: bytes) -> str:
    """SHA-256 of a draw's seed, in hex: published before the start, so the seed
    revealed after it can be checked against it."""
    return hashlib.sha256(seed).hexdigest()


class Draw(models.Model):
    """The draw of an event's pre-queue (docs/draw.md): the secret seed from the
    moment the start is scheduled (only its hash, the commitment, is shown before
    the start), then what the draw publishes.

    The receipts are kept here, not in Redis: the published list must outlive the
    event's Redis data, and it is read only by people checking the draw."""

    event = models.OneToOneField(Event, on_delete=models.CASCADE, related_name="draw")
    seed = models.BinaryField(max_length=32, editable=False, default=new_seed)
    # Filled by the draw: how many joined before the start, their receipts (8 bytes
    # each) in the order they joined, and each one's drawn position (4 bytes,
    # big-endian), in the same order.
    size = models.PositiveIntegerField(null=True, editable=False)
    receipts = models.BinaryField(null=True, editable=False)
    positions = models.BinaryField(null=True, editable=False)
    drawn_at = models.DateTimeField(null=True, editable=False)

    def __str__(self) -> str:
        return f"draw of {self.event}"

    @property
    def commitment(self) -> str:
        return commitment(bytes(self.seed))


class Section(models.Model):
    """A part of an event's seat map (queue_app/seating.py): general admission, a
    count of unnumbered places, or numbered seats in rows; each with its price. An
    event without sections is one unnumbered section of `total_seats`, as before."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="sections")
    code = models.CharField(_("section"), max_length=8, validators=[RegexValidator(r"\A[A-Za-z0-9]{1,8}\Z")])
    name = models.CharField(_("name"), max_length=100)
    price = models.PositiveIntegerField(_("price"), help_text=_("Per seat, in the currency's minor unit."))
    places = models.PositiveIntegerField(_("places"), help_text=_("Seats in the section, numbered or not."))
    numbered = models.BooleanField(_("numbered"), default=False)
    position = models.PositiveSmallIntegerField(default=0, editable=False)  # the map's order
    box = models.JSONField(null=True, blank=True, editable=False)  # where it is drawn, if given
    # The section's seat ledger, as seats_sold is the event's: held and confirmed
    # seats, moved only by the reservations' trigger (booking_app/migrations/0011_seats.py),
    # whose CHECK refuses a booking the section has no room for.
    sold = models.PositiveIntegerField(_("sold"), default=0, editable=False)

    class Meta:
        verbose_name = _("section")
        verbose_name_plural = _("sections")
        ordering = ["event", "position"]
        constraints = [
            models.UniqueConstraint(fields=["event", "code"], name="one_code_per_section"),
            models.CheckConstraint(
                condition=models.Q(sold__lte=models.F("places")), name="section_never_oversold"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.code})"


class Seat(models.Model):
    """A numbered seat: its id (SECTION-ROW-SEAT) is stable for the event's life, and
    its index (its place in the section, from 0) is its bit in the section's state."""

    section = models.ForeignKey(Section, on_delete=models.CASCADE, related_name="seats")
    seat_id = models.CharField(_("seat"), max_length=26)
    row = models.CharField(_("row"), max_length=8)
    label = models.CharField(_("number"), max_length=8)
    index = models.PositiveIntegerField(editable=False)
    x = models.FloatField(editable=False)
    y = models.FloatField(editable=False)
    blocked = models.BooleanField(
        _("blocked"),
        default=False,
        help_text=_("Kept off sale (for the press, accessibility, technical reasons)."),
    )

    class Meta:
        verbose_name = _("seat")
        verbose_name_plural = _("seats")
        ordering = ["section", "index"]
        constraints = [
            models.UniqueConstraint(fields=["section", "seat_id"], name="one_seat_per_id"),
            models.UniqueConstraint(fields=["section", "index"], name="one_seat_per_index"),
        ]

    def __str__(self) -> str:
        return self.seat_id


class PresaleCode(models.Model):
    """A presale code (queue_app/presale.py): only its keyed hash is kept, the code
    itself is shown once, when it is made. Its uses are counted in Redis, where a
    join spends one in the same step as it takes the place."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="presale_codes")
    # HMAC-SHA256 of the event and the code, keyed by the server's secret, in hex: a
    # copy of the table does not give the codes back (50 bits would be guessed from a
    # plain hash in hours).
    code_hash = models.CharField(_("code hash"), max_length=64, editable=False)
    uses = models.PositiveIntegerField(
        _("uses"), default=1, validators=[MinValueValidator(1)], help_text=_("Places the code gives.")
    )
    note = models.CharField(_("note"), max_length=200, blank=True, help_text=_("Who the codes went to."))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("presale code")
        verbose_name_plural = _("presale codes")
        ordering = ["-created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["event", "code_hash"], name="one_code_hash_per_event"),
        ]

    def __str__(self) -> str:
        return f"{self.code_hash[:12]}…"


class PresaleAllow(models.Model):
    """An entry of an event's presale allow-list: an account, or every account whose
    confirmed email address is at a domain (or one of its subdomains)."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="presale_allows")
    account = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("account"),
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
    )
    email_domain = models.CharField(
        _("email domain"),
        max_length=253,
        blank=True,
        validators=[RegexValidator(EMAIL_DOMAIN_RE, _("A domain, such as example.com."))],
        help_text=_("Accounts whose confirmed email address is at this domain or one of its subdomains."),
    )

    class Meta:
        verbose_name = _("presale allow-list entry")
        verbose_name_plural = _("presale allow-list")
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(account__isnull=False, email_domain="")
                    | (models.Q(account__isnull=True) & ~models.Q(email_domain=""))
                ),
                name="presale_allow_account_or_domain",
            ),
            models.UniqueConstraint(
                fields=["event", "account"],
                condition=models.Q(account__isnull=False),
                name="one_presale_allow_per_account",
            ),
            models.UniqueConstraint(
                fields=["event", "email_domain"],
                condition=~models.Q(email_domain=""),
                name="one_presale_allow_per_domain",
            ),
        ]

    def __str__(self) -> str:
        return self.email_domain or str(self.account)

    def save(self, *args, **kwargs) -> None:
        self.email_domain = self.normal_domain(self.email_domain)
        super().save(*args, **kwargs)

    def clean(self) -> None:
        if (self.account_id is None) == (not self.email_domain):
            raise ValidationError(_("Name an account or an email domain, not both."))

    @staticmethod
    def normal_domain(value: str) -> str:
        """A domain as the list keeps it: "@Example.com " is example.com."""
        return value.strip().lstrip("@").lower()


# Characters in each language's text of a message to the crowd: a line or two on a
# phone (the poll carries it to every waiting person, so it stays short).
MESSAGE_MAX_LENGTH = 280


class EventMessage(models.Model):
    """An operator's message to the people of an event's line, in Korean and English
    (queue_app/crowd_messages.py). Every poll carries the one shown now, the newest
    one not cleared; the rows are the history, kept for as long as the event is."""

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="messages")
    text_ko = models.CharField(_("Korean"), max_length=MESSAGE_MAX_LENGTH, blank=True)
    text_en = models.CharField(_("English"), max_length=MESSAGE_MAX_LENGTH, blank=True)
    created_at = models.DateTimeField(_("posted at"), default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("posted by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # When it stopped being shown: cleared, or replaced by the next message.
    cleared_at = models.DateTimeField(_("cleared at"), null=True, blank=True)
    cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("cleared by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        verbose_name = _("message to the crowd")
        verbose_name_plural = _("messages to the crowd")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=~(models.Q(text_ko="") & models.Q(text_en="")),
                name="message_says_something",
                violation_error_message=_("Write the message in Korean, in English, or in both."),
            ),
            # Posting ends the message shown before (crowd_messages.event_message_post).
            models.UniqueConstraint(
                fields=["event"], condition=models.Q(cleared_at__isnull=True), name="one_message_shown"
            ),
        ]

    def __str__(self) -> str:
        return self.text_ko or self.text_en

    @classmethod
    def shown_now(cls, event: Event) -> "EventMessage | None":
        """The message the event's line is shown now: the one not cleared (posting a
        message ends the one before)."""
        return cls.objects.filter(event=event, cleared_at__isnull=True).first()

    def as_polled(self) -> dict:
        """The message as every poll carries it (PositionOutput.message)."""
        return {
            "id": self.pk,
            "ko": self.text_ko,
            "en": self.text_en,
            "at": int(self.created_at.timestamp() * 1000),
        }


# What an address may be, as the SMTP standard caps it (RFC 5321: 254 characters).
NOTIFY_EMAIL_MAX = 254


class NotifyRequest(models.Model):
    """An email address left in the waiting room for one place in line: mailed once,
    when the place is near the front (queue_app/notify.py). One row per place: asking
    again changes the address of a mail not sent yet.

    The token is kept only until the mail is sent (its link carries it back) or the
    place is gone; `place`, its SHA-256, stays, so that a place that was mailed is
    never mailed again."""

    class Status(models.TextChoices):
        PENDING = "PENDING", _("Waiting to be near the front")
        SENDING = "SENDING", _("Being sent")
        SENT = "SENT", _("Sent")
        DROPPED = "DROPPED", _("Not sent: the place left the line")
        FAILED = "FAILED", _("Not sent: the mail server refused it")

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="notify_requests")
    place = models.CharField(_("place"), max_length=64, editable=False)  # SHA-256 of the token, hex
    # The arrival number the token carries: the order the sender looks at places in
    # (a later number is never nearer the front, but in a drawn pre-queue).
    number = models.PositiveBigIntegerField(_("arrival number"), editable=False)
    token = models.CharField(_("token"), max_length=36, blank=True, editable=False)
    email = models.EmailField(_("email"), max_length=NOTIFY_EMAIL_MAX)
    language = models.CharField(_("language"), max_length=8, choices=settings.LANGUAGES)
    site = models.CharField(max_length=200, editable=False)  # the link's site, as the person reached it
    status = models.CharField(_("status"), max_length=7, choices=Status.choices, default=Status.PENDING)
    tries = models.PositiveSmallIntegerField(default=0, editable=False)  # sends the mail server refused
    retry_at = models.DateTimeField(null=True, editable=False)  # not tried again before
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, editable=False)

    class Meta:
        verbose_name = _("notify-me request")
        verbose_name_plural = _("notify-me requests")
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["event", "place"], name="one_notify_per_place")]
        indexes = [
            # The sender's reading: an event's pending places in arrival order.
            models.Index(
                fields=["event", "number"],
                condition=models.Q(status="PENDING"),
                name="notify_pending_by_number",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} ({self.event})"
