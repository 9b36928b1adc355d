"""The operator's record of an event. Redis holds the live state (see services)."""

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

# No braces (they form the Redis Cluster hash tag) and no colons (the key separator).
EVENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class Event(models.Model):
    class Status(models.TextChoices):
        OPEN = "OPEN"
        PAUSED = "PAUSED"  # joins accepted, nobody admitted
        CLOSED = "CLOSED"  # joins refused, polls answer EXPIRED

    event_id = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(EVENT_ID_PATTERN, "Letters, digits, '.', '_' and '-' only.")],
    )
    name = models.CharField(max_length=200, blank=True)
    total_seats = models.PositiveIntegerField(default=100)
    status = models.CharField(max_length=6, choices=Status.choices, default=Status.OPEN)
    admit_per_second = models.PositiveIntegerField(
        default=70, help_text="People moved from the line into the active window each second."
    )
    active_window_seconds = models.PositiveIntegerField(
        default=180,
        validators=[MinValueValidator(1)],
        help_text="How long an admitted person may book.",
    )
    max_active_users = models.PositiveIntegerField(
        default=0, help_text="Most people in the active window at once; 0 = no cap."
    )
    max_seats_per_booking = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1)])
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or self.event_id

    @classmethod
    def defaults_from_settings(cls) -> dict:
        return {
            "admit_per_second": settings.ENTRY_BATCH_SIZE,
            "active_window_seconds": settings.ACTIVE_USER_TTL_SEC,
            "max_active_users": settings.MAX_ACTIVE_USERS,
            "max_seats_per_booking": settings.MAX_SEATS_PER_BOOKING,
        }
