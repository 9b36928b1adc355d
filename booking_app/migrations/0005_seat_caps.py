"""Seat caps per buyer, kept by the seat ledger's trigger (see 0003).

A booking that would take a buyer past the event's cap is refused in the same
statement that inserts it (`seat_cap`), like a sale past the total: an account may
hold the event's most seats per buyer (else its most per booking), and a
normalised email (`buyer_key`) the most per buyer, when set. The ledger's UPDATE
locks the event's row first, so two bookings of one buyer are counted one after
the other, whatever Redis let through.
"""

from django.db import migrations

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

LEDGER_BEFORE = """
CREATE OR REPLACE FUNCTION booking_app_seat_ledger() RETURNS trigger AS $$
DECLARE
  delta integer := 0;
  event varchar;
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
    UPDATE queue_app_event SET seats_sold = seats_sold + delta WHERE event_id = event;
  END IF;
  RETURN NULL;
END $$ LANGUAGE plpgsql;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("booking_app", "0004_buyers"),
        ("queue_app", "0003_protections"),
    ]

    operations = [migrations.RunSQL(LEDGER, LEDGER_BEFORE)]
