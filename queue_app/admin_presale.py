"""An event's presale in the admin (queue_app/presale.py): its allow-list, edited
on the event's form; a page that makes a batch of codes and hands them over once,
as a CSV download; and the codes made, by their hashes, with the uses each has
left, where deleting one revokes it."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError
from django.db.models import QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from queue_app import presale
from queue_app.models import Event, PresaleAllow, PresaleCode
from ticketing.errors import REDIS_ERRORS


class PresaleAllowForm(forms.ModelForm):
    class Meta:
        model = PresaleAllow
        fields = ["account", "email_domain"]

    def clean_email_domain(self) -> str:
        # "@Example.com" as the list keeps it, before the model checks its form.
        return PresaleAllow.normal_domain(self.cleaned_data["email_domain"])


class PresaleAllowInline(admin.TabularInline):
    """The allow-list on the event's form: accounts, and email domains (an account
    whose confirmed address is at one). Applies to joins within a few seconds."""

    model = PresaleAllow
    form = PresaleAllowForm
    extra = 0
    raw_id_fields = ["account"]
    verbose_name = _("presale allow-list entry")
    verbose_name_plural = _("presale allow-list: accounts and email domains that join without a code")


class PresaleCodesForm(forms.Form):
    count = forms.IntegerField(label=_("codes"), min_value=1, max_value=presale.MAX_BATCH, initial=100)
    uses = forms.IntegerField(
        label=_("uses per code"), min_value=1, initial=1, help_text=_("Places each code gives.")
    )
    note = forms.CharField(
        label=_("note"),
        max_length=200,
        required=False,
        help_text=_("Who the codes go to (kept with them, and in the file)."),
    )


class PresaleAdmin:
    """EventAdmin's presale codes page (its URL is EventAdmin.get_urls')."""

    def presale_page(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The event's codes, counted, and a form that makes a batch: its answer is
        the batch as a CSV file, the only copy of the codes there will be."""
        event = self._viewable(request, pk)
        form = PresaleCodesForm()
        if request.method == "POST":
            if not self.has_change_permission(request, event):
                raise PermissionDenied
            form = PresaleCodesForm(request.POST)
            made = self._codes_made(request, event, form)
            if made is not None:
                return made
        codes = PresaleCode.objects.filter(event=event)
        digests = list(codes.values_list("code_hash", flat=True))
        left = presale.uses_left(event.event_id, digests)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "event": event,
            "title": gettext("%(event)s — presale codes") % {"event": event},
            "form": form,
            "can_change": self.has_change_permission(request, event),
            "codes": len(digests),
            "uses": codes.aggregate(n=Sum("uses"))["n"] or 0,
            "uses_left": sum(n for n in left.values() if n is not None and n > 0),
            "codes_url": reverse("admin:queue_app_presalecode_changelist") + f"?event__id__exact={event.pk}",
        }
        return render(request, "admin/queue_app/event/presale.html", context)

    def _codes_made(self, request: HttpRequest, event: Event, form: PresaleCodesForm) -> HttpResponse | None:
        if not form.is_valid():
            return None
        count, uses, note = (form.cleaned_data[name] for name in ("count", "uses", "note"))
        try:
            codes = presale.codes_create(event, count=count, uses=uses, note=note)
        except IntegrityError:
            said = gettext("A code came out equal to one the event has (very rare): try again.")
            messages.error(request, said)
            return None
        except REDIS_ERRORS:
            messages.error(request, gettext("Redis could not be reached, so no code was made; try again."))
            return None
        text = presale.codes_csv(event, codes, uses, note)
        response = HttpResponse(text, content_type="text/csv; charset=utf-8")
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="presale-codes-{event.event_id}-{stamp}.csv"'
        # (admin_view marks it never_cache: no cache keeps a copy of the only one.)
        return response


@admin.register(PresaleCode)
class PresaleCodeAdmin(admin.ModelAdmin):
    """The codes made, by their hashes (the codes themselves were shown once). Made
    on an event's presale codes page; deleting one revokes it at once."""

    list_display = ("__str__", "event", "uses", "uses_left", "note", "created_at")
    list_filter = ("event",)
    search_fields = ("note", "event__event_id")
    readonly_fields = ("event", "code_hash", "uses", "note", "created_at")
    list_select_related = ("event",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made in batches, on the event's presale codes page

    def has_change_permission(self, request: HttpRequest, obj: PresaleCode | None = None) -> bool:
        return False

    @admin.display(description=_("uses left"))
    def uses_left(self, obj: PresaleCode) -> int | None:
        return presale.uses_left(obj.event.event_id, [obj.code_hash])[obj.code_hash]

    def delete_model(self, request: HttpRequest, obj: PresaleCode) -> None:
        presale.codes_revoke(obj.event, [obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for event in Event.objects.filter(pk__in=queryset.values("event")):
            presale.codes_revoke(event, list(queryset.filter(event=event)))
