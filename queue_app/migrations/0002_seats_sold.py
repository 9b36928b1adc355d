from django.db import migrations, models
from django.db.models import Sum


def count_sold(apps, schema_editor):
    """Start the ledger from the confirmed reservations already there."""
    Event = apps.get_model("queue_app", "Event")
    Reservation = apps.get_model("booking_app", "Reservation")
    for event in Event.objects.all():
        event.seats_sold = (
            Reservation.objects.filter(event_id=event.event_id, status="CONFIRMED").aggregate(
                n=Sum("seat_count")
            )["n"]
            or 0
        )
        event.save(update_fields=["seats_sold"])


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0001_initial"),
        ("booking_app", "0001_reservation"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="seats_sold",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(count_sold, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.CheckConstraint(
                condition=models.Q(("seats_sold__lte", models.F("total_seats"))), name="never_oversold"
            ),
        ),
    ]
