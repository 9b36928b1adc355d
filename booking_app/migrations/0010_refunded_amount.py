"""What of a payment went back: refunds before this one were all in full, so a
refunded row's amount is what it was given back."""

from django.db import migrations, models
from django.db.models import F


def refunded_in_full(apps, schema_editor) -> None:
    Reservation = apps.get_model("booking_app", "Reservation")  # noqa: N806 (a model class)
    Reservation.objects.filter(status="REFUNDED").update(refunded_amount=F("amount"))


class Migration(migrations.Migration):

    dependencies = [
        ('booking_app', '0009_checkout'),
    ]

    operations = [
        migrations.AddField(
            model_name='reservation',
            name='refunded_amount',
            field=models.PositiveBigIntegerField(blank=True, null=True, verbose_name='refunded amount'),
        ),
        migrations.RunPython(refunded_in_full, migrations.RunPython.noop),
    ]
