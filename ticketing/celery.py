"""The Celery app and its beat schedule (in code, so every beat runs the same one)."""

import os
from datetime import timedelta

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")

app = Celery("ticketing")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "admit-every-second": {
        "task": "queue_app.tasks.admit_tick",
        "schedule": timedelta(seconds=1),
        # A tick that waited in the broker past its second is dropped, not replayed
        # as a burst after an outage (the script's once-per-second guard is the
        # second line of defence).
        "options": {"expires": 1.0},
    },
    # Notify me: the people near the front who left an email address, mailed once.
    # Every 5 s: a notice of minutes (NOTIFY_AHEAD_SECONDS) is late by 5 s at most.
    "notify-near-front": {
        "task": "queue_app.tasks.notify_near_front",
        "schedule": timedelta(seconds=5),
        "options": {"expires": 5.0},
    },
    # booking.completed messages the request could not send (broker away).
    "publish-bookings": {
        "task": "booking_app.tasks.publish_pending",
        "schedule": timedelta(seconds=5),
        "options": {"expires": 5.0},
    },
    # Bookings whose process died between the Redis step and the commit.
    "reconcile-bookings": {
        "task": "booking_app.tasks.reconcile_all",
        "schedule": timedelta(seconds=30),
        "options": {"expires": 30.0},
    },
    # Holds whose time ran out: their seats back on sale within a second or so.
    "release-expired-holds": {
        "task": "booking_app.tasks.holds_expire",
        "schedule": timedelta(seconds=1),
        "options": {"expires": 1.0},
    },
    # Refunds the payment provider could not take when they were due.
    "retry-refunds": {
        "task": "booking_app.tasks.refunds_retry",
        "schedule": timedelta(seconds=30),
        "options": {"expires": 30.0},
    },
    # Closed events' Redis data, after EVENT_PURGE_AFTER_SECONDS.
    "purge-closed-events": {
        "task": "booking_app.tasks.purge_closed",
        "schedule": timedelta(minutes=5),
        "options": {"expires": 300.0},
    },
}
