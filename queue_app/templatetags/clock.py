"""Times as pages show them to people. One instant reads the same on every page: in
the browser's zone and the page's language, its zone named (static/js/clock.js
rewrites each <time data-local>); before the script runs, or without it, the
server's text names the server's zone, so a time is never one of two unnamed clocks."""

import datetime

from django import template
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def clock(moment: datetime.datetime | None) -> SafeString | str:
    """`{{ event.opens_at|clock }}`: a <time> with the instant in UTC (ISO 8601) for
    the script, and "2026-12-05 14:41 KST" (TIME_ZONE) as its text till then."""
    if moment is None:
        return ""
    utc = moment.astimezone(datetime.UTC)
    return format_html(
        '<time datetime="{}" data-local>{}</time>',
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        dateformat.format(timezone.localtime(moment), "Y-m-d H:i T"),
    )
