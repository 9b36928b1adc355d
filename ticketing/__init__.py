# The Celery app is loaded with Django, so tasks queued from the web use it.
from ticketing.celery import app as celery_app

__all__ = ("celery_app",)
