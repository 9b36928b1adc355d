from celery import shared_task

from queue_app import admission, draw, notify


@shared_task(ignore_result=True)
def admit_tick() -> dict[str, int]:
    """Beat's per-second tick: admit for every OPEN event, and start the draw of
    every event whose scheduled start has come. Safe to run redundantly."""
    ticks = admission.events_admit()  # logs one line per event (ticketing/metrics.py)
    for tick in ticks:
        if tick.outcome == "DRAW_DUE" and draw.dispatch(tick.event_id):
            draw_pre_queue.delay(tick.event_id)
    return {tick.event_id: tick.admitted for tick in ticks}


@shared_task(ignore_result=True)
def draw_pre_queue(event_id: str) -> str:
    """The draw of a scheduled start (queue_app/draw.py), off the request path."""
    return draw.run(event_id).outcome


@shared_task(ignore_result=True)
def notify_near_front() -> int:
    """Beat's run every few seconds: mail the people near the front who asked to be
    told (queue_app/notify.py), once each. Safe to run redundantly."""
    return notify.notify_due()
