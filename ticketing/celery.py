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
}
