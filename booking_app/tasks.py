from celery import shared_task

from booking_app import publish, reconcile


@shared_task(ignore_result=True)
def publish_pending() -> int:
    return publish.publish_pending()


@shared_task(ignore_result=True)
def reconcile_all() -> dict[str, bool]:
    """Outbox settled, seats recounted from Postgres, cancellations returned: every event."""
    return reconcile.events_reconcile()
