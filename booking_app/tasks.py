from celery import shared_task

from booking_app import publish, reconcile, retention


@shared_task(ignore_result=True)
def publish_pending() -> int:
    return publish.publish_pending()


@shared_task(ignore_result=True)
def reconcile_all() -> dict[str, bool]:
    """Outbox settled, seats recounted from Postgres, cancellations returned: every event."""
    return reconcile.events_reconcile()


@shared_task(ignore_result=True)
def purge_closed() -> dict[str, int]:
    """Closed events' Redis data, once their grace period is over (booking_app/retention.py)."""
    return retention.events_purge()
