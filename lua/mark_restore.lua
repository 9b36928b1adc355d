-- Restore the booking mark of a confirmed reservation that Redis lost (a restart
-- without its data, or from an older snapshot): its token then polls BOOKED and can
-- neither book again nor take a new place in line. Skipped when the reservation's
-- seats were returned meanwhile: it was cancelled after the caller read Postgres.
-- Validates every key before its first write.
--
-- KEYS[1] booked    STRING  the token's booking mark
-- KEYS[2] returned  HASH    reservation id -> seats, for every cancellation returned
-- KEYS[3] meta      HASH    the event's record (its existence is checked)
-- ARGV[1] reservation id
--
-- Returns 1 when restored, 0 when it was cancelled meanwhile or Redis holds no live
-- state of the event (purged meanwhile).
if redis.call('HLEN', KEYS[3]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
return 1
