"""The operator's admin: events with live numbers, open/pause/close, live settings,
an event's seat map (queue_app/admin_seats.py), its presale (queue_app/admin_presale.py),
its messages to the crowd (queue_app/admin_messages.py) and the support lookup of a
person's place (queue_app/admin_support.py)."""

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, F, Q, QuerySet, Sum
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from queue_app import events, live
from queue_app.admin_messages import EventMessagesAdmin
from queue_app.admin_presale import PresaleAdmin, PresaleAllowInline
from queue_app.admin_seats import SeatMapAdmin
from queue_app.admin_support import SupportAdmin
from queue_app.models import Event, NotifyRequest
from ticketing import money


class EventForm(forms.ModelForm):
    class Meta:
        model = Event
        fields = [
            "event_id",
            "name",
            "status",
            "mode",
            "total_seats",
            "admit_per_second",
            "active_window_seconds",
            "max_active_users",
            "claim_seconds",
            "claim_grace",
            "max_seats_per_booking",
            "proof_of_work",
            "require_account",
            "max_places_per_address",
            "max_seats_per_buyer",
            "price",
            "currency",
            "hold_seconds",
            "opens_at",
            "public_from",
            "priority_share",
        ]

    def clean_opens_at(self) -> object:
        opens_at = self.cleaned_data["opens_at"]
        before = self.instance.opens_at  # the form's values reach the instance after the fields' clean
        if not self.instance.pk or (opens_at is None) == (before is None):
            return opens_at  # a new event, no start, or one that moves (Event.clean says when)
        if events.line_started(self.instance.event_id):
            if opens_at is None:
                raise forms.ValidationError(
                    _("People have joined the pre-queue: its start can move, not go.")
                )
            raise forms.ValidationError(_("People have joined this line: it can no longer get a start time."))
        return opens_at

    def clean_total_seats(self) -> int:
        total = self.cleaned_data["total_seats"]
        if self.instance.pk:
            sold = Event.objects.values_list("seats_sold", flat=True).get(pk=self.instance.pk)
            if total < sold:
                raise forms.ValidationError(
                    _("%(sold)s seats are already sold; the total cannot be lower.") % {"sold": sold}
                )
        return total


# The reasons a join was refused (services.JOIN_REFUSALS), as the list and the live
# page name them.
REFUSALS = {
    "rate": _("rate"),
    "forged_token": _("forged token"),
    "cap": _("cap"),
    "proof_of_work": _("proof of work"),
    "presale": _("presale, no code"),
    "presale_code": _("presale code refused"),
}


def refusal_name(reason: str) -> str:
    """A reason counted by Redis in the operator's words; one this table does not
    know yet still reads as words."""
    return str(REFUSALS.get(reason, reason.replace("_", " ")))


@admin.register(Event)
class EventAdmin(SeatMapAdmin, PresaleAdmin, EventMessagesAdmin, SupportAdmin, admin.ModelAdmin):
    form = EventForm
    list_display = (
        "event_id",
        "live_link",
        "name",
        "status",
        "waiting",
        "active",
        "seats_left",
        "admitted_last_minute",
        "joins_refused",
        "protection",
        "bookings",
        "seats_sold",
        "admit_per_second",
        "active_window_seconds",
        "max_active_users",
        "total_seats",
    )
    # Rate, window and cap change live: the next admission tick reads them.
    list_editable = ("admit_per_second", "active_window_seconds", "max_active_users")
    list_filter = ("status",)
    search_fields = ("event_id", "name")
    # The modes are actions too: an incident's switch to pass-through or reject is one
    # click on the list (docs/modes.md); the next join reads it.
    actions = [
        "open_events", "pause_events", "close_events", "mode_queue", "mode_safety_net", "mode_pass_through",
        "mode_reject", "hot_sale", "protections_off",
    ]  # fmt: skip
    inlines = [PresaleAllowInline]
    fieldsets = [
        (None, {"fields": ["event_id", "name", "status", "total_seats"]}),
        (
            _("Admission"),
            {
                "fields": [
                    "mode",
                    "admit_per_second",
                    "active_window_seconds",
                    "max_active_users",
                    "claim_seconds",
                    "claim_grace",
                    "max_seats_per_booking",
                ]
            },
        ),
        (
            _("Price and checkout"),
            {
                "description": _(
                    "A priced event holds a booking's seats while its buyer pays, and puts them back "
                    "on sale if the payment does not come in time. A price of 0 books at once, for free."
                ),
                "fields": ["price", "currency", "hold_seconds", "refund_percent", "late_confirmation"],
            },
        ),
        (
            _("Against scripts and bots"),
            {
                "description": _(
                    "Each asks something of plain clients, so each is off by default. "
                    "The action “Hot sale” on the list turns on proof of work, the cap per address "
                    "and the cap per buyer together. Changes apply to the next join."
                ),
                "fields": [
                    "proof_of_work",
                    "require_account",
                    "max_places_per_address",
                    "max_seats_per_buyer",
                ],
            },
        ),
        (
            _("Scheduled start"),
            {
                "description": _(
                    "Before the start, joining puts people in a pre-queue and their page counts "
                    "down. At the start their order is drawn at random, in a way anyone can check "
                    "(the draw's page publishes a commitment now, the seed and the list after the start). "
                    "Admission begins right after the draw."
                ),
                "fields": ["opens_at", "draw_link"],
            },
        ),
        (
            _("Presale"),
            {
                "description": _(
                    "Before the public start, only people with a presale code (made on the presale codes "
                    "page, handed over once as a file) or a signed-in account on the allow-list below "
                    "may join; a code of several uses gives that many places. From the public start, "
                    "anyone may join. A scheduled start's draw applies to presale joins as to any. "
                    "With a priority share, the same holders join a priority lane, admitted first at "
                    "that share of the rate, during the presale and after it."
                ),
                "fields": ["public_from", "priority_share", "presale_link"],
            },
        ),
        (_("Record"), {"fields": ["created_at", "updated_at"]}),
    ]

    class Media:
        css = {"all": ["css/admin-events.css"]}  # the list at a laptop's width

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        # The list's columns need the page's width: without the admin's side menu on
        # this page (the breadcrumbs lead back), rate, window and cap fit at 1440 px.
        return super().changelist_view(request, {"is_nav_sidebar_enabled": False, **(extra_context or {})})

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .annotate(confirmed=Count("reservations", filter=Q(reservations__status="CONFIRMED")))
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Event | None = None) -> tuple:
        # The id names the Redis keys: renaming it would orphan the live line.
        return (
            ("event_id", "draw_link", "presale_link", "created_at", "updated_at")
            if obj
            else ("draw_link", "presale_link", "created_at", "updated_at")
        )

    @admin.display(description=_("draw"))
    def draw_link(self, obj: Event | None) -> str:
        found = getattr(obj, "draw", None) if obj and obj.pk and obj.opens_at else None
        if found is None:
            return "–"
        state = (
            gettext("drawn")
            if found.drawn_at
            else gettext("commitment %(c)s…") % {"c": found.commitment[:16]}
        )
        return format_html('<a href="{}">{}</a>', reverse("draw-page", args=[obj.event_id]), state)

    @admin.display(description=_("presale codes"))
    def presale_link(self, obj: Event | None) -> str:
        if obj is None or not obj.pk:
            return "–"
        url = reverse("admin:queue_app_event_presale", args=[obj.pk])
        made = gettext("%(n)s codes") % {"n": f"{obj.presale_codes.count():,}"}
        return format_html('<a href="{}">{}</a>', url, made)

    def _live(self, obj: Event) -> dict:
        # One pipelined round trip per event, cached for the row's columns.
        cache = getattr(self, "_live_cache", None)
        if cache is None or cache[0] is not obj:
            self._live_cache = (obj, events.event_live_numbers(obj.event_id))
        return self._live_cache[1]

    @admin.display(description=_("waiting"))
    def waiting(self, obj: Event) -> int:
        return self._live(obj)["waiting"]

    @admin.display(description=_("active"))
    def active(self, obj: Event) -> int:
        return self._live(obj)["active"]

    @admin.display(description=_("seats left"))
    def seats_left(self, obj: Event) -> int | None:
        return self._live(obj)["seatsLeft"]

    @admin.display(description=_("admitted, last min"))
    def admitted_last_minute(self, obj: Event) -> int:
        return self._live(obj)["admittedLastMinute"]

    @admin.display(description=_("joins refused"))
    def joins_refused(self, obj: Event) -> str:
        refused = self._live(obj)["joinsRefused"]
        return ", ".join(f"{refusal_name(reason)} {n:,}" for reason, n in refused.items()) or "–"

    @admin.display(description=_("live"))
    def live_link(self, obj: Event) -> str:
        url = reverse("admin:queue_app_event_live", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, gettext("live"))

    # --- The live page: the operator's view during a sale ---------------------------

    def get_urls(self) -> list:
        own = [
            path("<int:pk>/live/", self.admin_site.admin_view(self.live_page), name="queue_app_event_live"),
            path(
                "<int:pk>/seats/", self.admin_site.admin_view(self.seats_page), name="queue_app_event_seats"
            ),
            path(
                "<int:pk>/presale/",
                self.admin_site.admin_view(self.presale_page),
                name="queue_app_event_presale",
            ),
            path(
                "<int:pk>/messages/",
                self.admin_site.admin_view(self.messages_page),
                name="queue_app_event_messages",
            ),
            path(
                "<int:pk>/support/",
                self.admin_site.admin_view(self.support_page),
                name="queue_app_event_support",
            ),
            path(
                "<int:pk>/live.json",
                self.admin_site.admin_view(self.live_numbers),
                name="queue_app_event_live_json",
            ),
        ]
        return own + super().get_urls()

    def _viewable(self, request: HttpRequest, pk: int) -> Event:
        event = Event.objects.filter(pk=pk).first()
        if event is None or not self.has_view_permission(request, event):
            raise Http404
        return event

    def live_page(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Numbers refreshed every second and charts of the last 30 minutes, drawn
        in the browser (static/js/admin-live.js) from `live_numbers`; the script's
        words come translated with the page."""
        event = self._viewable(request, pk)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "event": event,
            "title": gettext("%(event)s — live") % {"event": event},
            "data_url": reverse("admin:queue_app_event_live_json", args=[event.pk]),
            "strings": {
                "max": gettext("max %(n)s"),
                "now": gettext("now %(n)s"),
                "start": gettext("−30 min"),
                "end": gettext("now"),
                "updated": gettext("Updated %(time)s"),
                "failed": gettext("Could not refresh (%(error)s); retrying."),
                "statuses": {value: str(label) for value, label in Event.Status.choices},
                "refusals": {reason: str(name) for reason, name in REFUSALS.items()},
            },
        }
        return render(request, "admin/queue_app/event/live.html", context)

    def live_numbers(self, request: HttpRequest, pk: int) -> JsonResponse:
        event = self._viewable(request, pk)
        confirmed = event.reservations.filter(status="CONFIRMED")
        numbers = events.event_live_numbers(event.event_id) | {
            "bookings": confirmed.count(),
            "seatsSold": Event.objects.values_list("seats_sold", flat=True).get(pk=event.pk),
            "totalSeats": event.total_seats,
            "revenue": self._revenue(event),
        }
        return JsonResponse({"numbers": numbers, "series": live.series(event.event_id, confirmed)})

    @staticmethod
    def _revenue(event: Event) -> dict[str, str]:
        """Money held (awaiting payment), paid (kept: a cancelled booking's share not
        refunded too) and refunded, as people read it."""
        sums = event.reservations.aggregate(
            held=Sum("amount", filter=Q(status="HELD")),
            paid=Sum("amount", filter=Q(status="CONFIRMED")),
            kept=Sum(F("amount") - F("refunded_amount"), filter=Q(refunded_at__isnull=False)),
            refunded=Sum("refunded_amount", filter=Q(status="REFUNDED")),
        )
        sums["paid"] = (sums["paid"] or 0) + (sums.pop("kept") or 0)
        return {k: money.shown(v or 0, event.currency) for k, v in sums.items()}

    @admin.display(description=_("protections"))
    def protection(self, obj: Event) -> str:
        return ", ".join(obj.protections()) or "–"

    @admin.display(description=_("bookings"), ordering="confirmed")
    def bookings(self, obj: Event) -> int:
        return obj.confirmed

    def save_model(self, request: HttpRequest, obj: Event, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        events.event_publish(obj)

    def _set_fields(self, request: HttpRequest, queryset: QuerySet, change, done: str) -> None:
        """`done`: the message, with the number of events as %(n)s."""
        for event in queryset:
            change(event)
            event.save()
            events.event_publish(event)
        self.message_user(request, done % {"n": queryset.count()}, messages.SUCCESS)

    @admin.action(
        permissions=["change"], description=_("Hot sale: proof of work, a cap per address and per buyer")
    )
    def hot_sale(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_fields(
            request, queryset, Event.apply_hot_sale, gettext("%(n)s event(s): hot-sale protections on.")
        )

    @admin.action(
        permissions=["change"], description=_("Protections off: anyone may join, as a plain client")
    )
    def protections_off(self, request: HttpRequest, queryset: QuerySet) -> None:
        def off(event: Event) -> None:
            event.proof_of_work = event.max_places_per_address = event.max_seats_per_buyer = 0
            event.require_account = False

        self._set_fields(request, queryset, off, gettext("%(n)s event(s): protections off."))

    def _set_status(self, request: HttpRequest, queryset: QuerySet, status: Event.Status) -> None:
        for event in queryset:
            event.status = status
            event.save(update_fields=["status", "updated_at"])
            events.event_publish(event)
        done = gettext("%(n)s event(s) now %(status)s.") % {"n": queryset.count(), "status": status.label}
        self.message_user(request, done, messages.SUCCESS)

    def _set_mode(self, request: HttpRequest, queryset: QuerySet, mode: Event.Mode) -> None:
        for event in queryset:
            event.mode = mode
            event.save(update_fields=["mode", "updated_at"])
            events.event_publish(event)
        done = gettext("%(n)s event(s) now in mode %(mode)s.") % {"n": queryset.count(), "mode": mode.value}
        self.message_user(request, done, messages.SUCCESS)

    @admin.action(permissions=["change"], description=_("Mode queue: everyone waits for the tick"))
    def mode_queue(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_mode(request, queryset, Event.Mode.QUEUE)

    @admin.action(permissions=["change"], description=_("Mode safety net: straight in while there is room"))
    def mode_safety_net(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_mode(request, queryset, Event.Mode.SAFETY_NET)

    @admin.action(permissions=["change"], description=_("Mode pass-through: everyone straight in"))
    def mode_pass_through(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_mode(request, queryset, Event.Mode.PASS_THROUGH)

    @admin.action(permissions=["change"], description=_("Mode reject: no new places, the line keeps its own"))
    def mode_reject(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_mode(request, queryset, Event.Mode.REJECT)

    @admin.action(permissions=["change"], description=_("Open: accept joins and admit"))
    def open_events(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_status(request, queryset, Event.Status.OPEN)

    @admin.action(permissions=["change"], description=_("Pause: accept joins, admit nobody"))
    def pause_events(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_status(request, queryset, Event.Status.PAUSED)

    @admin.action(permissions=["change"], description=_("Close: refuse joins, polls answer EXPIRED"))
    def close_events(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_status(request, queryset, Event.Status.CLOSED)


@admin.register(NotifyRequest)
class NotifyRequestAdmin(admin.ModelAdmin):
    """Notify-me requests (queue_app/notify.py), to look up by address: whether, and
    when, a person was mailed. The people's own: nothing to add or change here."""

    list_display = ("email", "event", "number", "language", "status", "created_at", "sent_at")
    list_filter = ("status", "event")
    search_fields = ("email",)
    readonly_fields = ("event", "email", "language", "number", "status", "created_at", "sent_at")
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: NotifyRequest | None = None) -> bool:
        return False
