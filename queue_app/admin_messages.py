"""The operator's messages to the crowd of an event, a page of its admin: post one
(Korean and English), clear it, and read the history (queue_app/crowd_messages.py).
Every waiting room and booking page shows the message within a poll."""

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext

from queue_app import crowd_messages
from queue_app.models import Event, EventMessage
from ticketing.errors import REDIS_ERRORS


class MessageForm(forms.ModelForm):
    """A new message: either text may be left empty (pages in that language show the
    other), not both (the model's constraint says so)."""

    class Meta:
        model = EventMessage
        fields = ["text_ko", "text_en"]
        widgets = {
            "text_ko": forms.Textarea(attrs={"rows": 2, "cols": 60, "lang": "ko"}),
            "text_en": forms.Textarea(attrs={"rows": 2, "cols": 60, "lang": "en"}),
        }

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.help_text = gettext("At most %(n)s characters.") % {"n": field.max_length}


# How many past messages the page lists (the newest first).
HISTORY_SHOWN = 50


class EventMessagesAdmin:
    """EventAdmin's page of messages to the crowd (its URL is EventAdmin.get_urls')."""

    def messages_page(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The message shown now, a form for a new one and a button to clear it, and
        the history. Who may view the event sees it; a change needs the change
        permission. Plain forms, answered by a redirect once done."""
        event = self._viewable(request, pk)
        form = MessageForm()
        if request.method == "POST":
            if not self.has_change_permission(request, event):
                raise PermissionDenied
            if "clear" in request.POST:
                if self._message_cleared(request, event):
                    return redirect(request.path)
            else:
                form = MessageForm(request.POST)
                if self._message_posted(request, event, form):
                    return redirect(request.path)
        history = list(event.messages.select_related("created_by", "cleared_by")[:HISTORY_SHOWN])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "event": event,
            "title": gettext("%(event)s — messages to the crowd") % {"event": event},
            "shown": next((m for m in history if m.cleared_at is None), None),
            "history": history,
            "more": event.messages.count() - len(history),
            "form": form,
            "can_change": self.has_change_permission(request, event),
        }
        return render(request, "admin/queue_app/event/messages.html", context)

    def _message_posted(self, request: HttpRequest, event: Event, form: MessageForm) -> bool:
        if not form.is_valid():
            return False
        try:
            crowd_messages.event_message_post(
                event_id=event.event_id,
                text_ko=form.cleaned_data["text_ko"],
                text_en=form.cleaned_data["text_en"],
                by=request.user,
            )
        except REDIS_ERRORS:
            messages.error(request, gettext("Redis could not be reached, so nothing changed; try again."))
            return False
        self.message_user(request, gettext("The message is shown to the line now."), messages.SUCCESS)
        return True

    def _message_cleared(self, request: HttpRequest, event: Event) -> bool:
        try:
            cleared = crowd_messages.event_message_clear(event_id=event.event_id, by=request.user)
        except REDIS_ERRORS:
            messages.error(request, gettext("Redis could not be reached, so nothing changed; try again."))
            return False
        if cleared is None:
            self.message_user(request, gettext("No message was shown."), messages.INFO)
        else:
            self.message_user(request, gettext("The message is no longer shown."), messages.SUCCESS)
        return True
