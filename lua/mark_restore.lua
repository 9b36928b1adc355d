-- Restore the booking mark of a confirmed reservation that Redis lost (a restart
-- without its data, or from an older snapshot): its token then polls BOOKED and can
-- neither book again nor take a new place in line. Skipped when the reservation's
-- seats were returned meanwhile: it was cancelled after the caller read Postgres.
-- Validates every key before its first write.
--
-- KEY booked    STRING  the token's booking mark
-- KEY returned  HASH    reservation id -> seats, for every cancellation returned
-- KEY meta      HASH    the event's record (its existence is checked)
-- ARG reservation  reservation id
--
-- Returns 1 when restored, 0 when it was cancelled meanwhile or Redis holds no live
-- state of the event (purged meanwhile).
if redis.call('HLEN', meta) == 0 then return 0 end
if redis.call('HEXISTS', returned, reservation) == 1 then return 0 end
redis.call('GET', booked)
redis.call('SET', booked, reservation)
return 1
