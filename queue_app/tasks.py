from celery import shared_task

from queue_app import services


@shared_task(ignore_result=True)
def admit_tick() -> dict[str, int]:
    """Beat's per-second tick: admit for every OPEN event. Safe to run redundantly."""
    ticks = services.events_admit()  # logs one line per event (ticketing/metrics.py)
    return {tick.event_id: tick.admitted for tick in ticks}
