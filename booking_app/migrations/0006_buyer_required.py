"""A booking on an event that caps seats per buyer must name its buyer.

Without an account or an email, a booking had nothing to count against the cap
(`seat_cap` skipped it), so leaving `buyerEmail` out bought past it. The seat
ledger's trigger now refuses such a booking in its INSERT (`buyer_required`), as it
refuses one past the cap; the booking script refuses it first, before it takes a
seat (lua/reserve.lua). And the rows already written are keyed again by today's
normalisation (booking_app/buyers.py), so that an earlier spelling counts as the
mailbox it names.
"""

import importlib

from django.db import migrations

from booking_app.buyers import email_key

LEDGER = """
CREATE OR REPLACE FUNCTION booking_app_seat_ledger() RETURNS trigger AS $$
DECLARE
  delta integer := 0;
  event varchar;
  per_buyer integer;
  per_booking integer;
BEGIN
  IF TG_OP <> 'INSERT' THEN
    event := OLD.event_id;
    IF OLD.status = 'CONFIRMED' THEN delta := delta - OLD.seat_count; END IF;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    event := NEW.event_id;
    IF NEW.status = 'CONFIRMED' THEN delta := delta + NEW.seat_count; END IF;
  END IF;
  IF delta <> 0 THEN
    UPDATE queue_app_event SET seats_sold = seats_sold + delta WHERE event_id = event
      RETURNING max_seats_per_buyer, max_seats_per_booking INTO per_buyer, per_booking;
  END IF;
  IF delta > 0 THEN
    IF per_buyer > 0 AND NEW.user_id IS NULL AND NEW.buyer_key = '' THEN
      RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = 'buyer_required: the event caps seats per buyer and the booking names none';
    END IF;
    IF NEW.user_id IS NOT NULL AND (
      SELECT sum(seat_count) FROM booking_app_reservation
      WHERE event_id = event AND user_id = NEW.user_id AND status = 'CONFIRMED'
    ) > coalesce(nullif(per_buyer, 0), per_booking) THEN
      RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = 'seat_cap: account ' || NEW.user_id || ' is past the cap';
    END IF;
    IF per_buyer > 0 AND NEW.buyer_key <> '' AND (
      SELECT sum(seat_count) FROM booking_app_reservation
      WHERE event_id = event AND buyer_key = NEW.buyer_key AND status = 'CONFIRMED'
    ) > per_buyer THEN
      RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = 'seat_cap: buyer ' || NEW.buyer_key || ' is past the cap';
    END IF;
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql;
"""

LEDGER_BEFORE = importlib.import_module("booking_app.migrations.0005_seat_caps").LEDGER


def rekey(apps, schema_editor) -> None:
    """Only the rows whose key changed are written (the trigger does not fire on
    buyer_key: the ledger's count of seats is untouched)."""
    Reservation = apps.get_model("booking_app", "Reservation")  # noqa: N806 (a model class)
    rows = Reservation.objects.exclude(buyer_email="").only("pk", "buyer_email", "buyer_key")
    for row in rows.iterator(chunk_size=2000):
        key = email_key(row.buyer_email)
        if key != row.buyer_key:
            Reservation.objects.filter(pk=row.pk).update(buyer_key=key)


class Migration(migrations.Migration):
    dependencies = [("booking_app", "0005_seat_caps")]

    operations = [
        migrations.RunSQL(LEDGER, LEDGER_BEFORE),
        migrations.RunPython(rekey, migrations.RunPython.noop),
    ]
