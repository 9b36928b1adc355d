"""The seat ledger kept by the database itself.

A trigger on reservations moves `queue_app_event.seats_sold` in the same statement
as every change of a confirmed reservation (booked, cancelled, or any edit at all),
and the event's CHECK (seats_sold <= total_seats) refuses the statement that would
sell more than the total. No code path can forget it, and a booking needs one INSERT.
"""

from django.db import migrations

POSTGRES = """
CREATE FUNCTION booking_app_seat_ledger() RETURNS trigger AS $$
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

CREATE TRIGGER booking_app_seat_ledger
AFTER INSERT OR UPDATE OF status, seat_count OR DELETE ON booking_app_reservation
FOR EACH ROW EXECUTE FUNCTION booking_app_seat_ledger();
"""

POSTGRES_REVERSE = """
DROP TRIGGER booking_app_seat_ledger ON booking_app_reservation;
DROP FUNCTION booking_app_seat_ledger();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("booking_app", "0002_void_status"),
        ("queue_app", "0002_seats_sold"),
    ]

    operations = [migrations.RunSQL(POSTGRES, POSTGRES_REVERSE)]
