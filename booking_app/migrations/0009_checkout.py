"""Checkout: a priced event's booking is HELD while its buyer pays, then CONFIRMED
or RELEASED (booking_app/checkout.py).

A held booking's seats are taken as a confirmed one's are: the seat ledger's
trigger counts HELD and CONFIRMED rows in seats_sold (so the never_oversold CHECK
refuses an oversale whatever Redis says) and in the seat caps; HELD to CONFIRMED
moves nothing, HELD to RELEASED gives the seats back in the same statement.
"""

import importlib

from django.conf import settings
from django.db import migrations, models


LEDGER_BEFORE = importlib.import_module("booking_app.migrations.0006_buyer_required").LEDGER
LEDGER = (
    LEDGER_BEFORE.replace("OLD.status = 'CONFIRMED'", "OLD.status IN ('HELD', 'CONFIRMED')")
    .replace("NEW.status = 'CONFIRMED'", "NEW.status IN ('HELD', 'CONFIRMED')")
    .replace("AND status = 'CONFIRMED'", "AND status IN ('HELD', 'CONFIRMED')")
)
assert LEDGER.count("IN ('HELD', 'CONFIRMED')") == 4


class Migration(migrations.Migration):

    dependencies = [
        ('booking_app', '0008_labels'),
        ('queue_app', '0008_checkout'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='reservation',
            name='one_confirmed_reservation_per_token',
        ),
        migrations.RemoveIndex(
            model_name='reservation',
            name='reservation_by_user',
        ),
        migrations.RemoveIndex(
            model_name='reservation',
            name='reservation_by_buyer',
        ),
        migrations.AddField(
            model_name='reservation',
            name='amount',
            field=models.PositiveBigIntegerField(default=0, verbose_name='amount'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='currency',
            field=models.CharField(blank=True, max_length=3, verbose_name='currency'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='hold_expires_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='hold expires at'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='paid_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='paid at'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='paying_since',
            field=models.DateTimeField(blank=True, null=True, verbose_name='paying since'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='payment_id',
            field=models.CharField(blank=True, max_length=200, null=True, unique=True, verbose_name='payment id'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='refunded_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='refunded at'),
        ),
        migrations.AddField(
            model_name='reservation',
            name='released_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='released at'),
        ),
        migrations.AlterField(
            model_name='reservation',
            name='status',
            field=models.CharField(choices=[('HELD', 'Held (awaiting payment)'), ('CONFIRMED', 'Confirmed'), ('CANCELLED', 'Cancelled'), ('RELEASED', 'Released (not paid)'), ('REFUNDED', 'Refunded'), ('VOID', 'void (never confirmed)')], default='CONFIRMED', max_length=9, verbose_name='status'),
        ),
        migrations.AddIndex(
            model_name='reservation',
            index=models.Index(condition=models.Q(('status__in', ('HELD', 'CONFIRMED')), ('user__isnull', False)), fields=['event', 'user'], name='reservation_by_user'),
        ),
        migrations.AddIndex(
            model_name='reservation',
            index=models.Index(condition=models.Q(('status__in', ('HELD', 'CONFIRMED')), models.Q(('buyer_key', ''), _negated=True)), fields=['event', 'buyer_key'], name='reservation_by_buyer'),
        ),
        migrations.AddIndex(
            model_name='reservation',
            index=models.Index(condition=models.Q(('status', 'HELD')), fields=['hold_expires_at'], name='reservation_holds'),
        ),
        migrations.AddConstraint(
            model_name='reservation',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ('HELD', 'CONFIRMED'))), fields=('event', 'token'), name='one_live_reservation_per_token'),
        ),
        migrations.AddConstraint(
            model_name='reservation',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('status', 'HELD'), _negated=True), ('hold_expires_at__isnull', False), _connector='OR'), name='a_hold_has_an_expiry'),
        ),
        migrations.RunSQL(LEDGER, LEDGER_BEFORE),
    ]
