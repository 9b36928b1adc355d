-- Note how many of an event's seats are held by buyers paying now (Postgres' count
-- of HELD reservations, booking_app/checkout.py), for the polls to show: seats that
-- may come back. Written every second by the beat's sweep; only for an event that
-- exists, so that a purged event's record is never written back.
--
-- KEY meta     HASH    the event's record; its field `held` is written
-- ARG held     seats held now
--
-- Returns 1 when noted, 0 for an unknown event.
if redis.call('EXISTS', meta) == 0 then return 0 end
if not tonumber(held) then error('held must be a number') end
redis.call('HSET', meta, 'held', held)
return 1
