from celery import shared_task

from booking_app import publish, services
from ticketing import redis as r


@shared_task(ignore_result=True)
def publish_pending() -> int:
    return publish.publish_pending()


@shared_task(ignore_result=True)
def reconcile_all() -> dict[str, bool]:
    """Outbox entries older than the grace period reach Postgres; mismatches are logged."""
    from queue_app.models import Event

    known = {e.decode() for e in r.client().smembers(r.EVENTS_KEY)}
    reports = {}
    for event_id in Event.objects.filter(event_id__in=known).values_list("event_id", flat=True):
        reports[event_id] = services.booking_reconcile(event_id).consistent
    return reports
