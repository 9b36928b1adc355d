import logging

from celery import shared_task

from queue_app import services

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def admit_tick() -> dict[str, int]:
    """Beat's per-second tick: admit for every OPEN event. Safe to run redundantly."""
    ticks = services.events_admit()
    for tick in ticks:
        if tick.admitted:
            log.info("admitted %d to %s (%d waiting)", tick.admitted, tick.event_id, tick.waiting)
    return {tick.event_id: tick.admitted for tick in ticks}
