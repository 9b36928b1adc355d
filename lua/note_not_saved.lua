-- Tell a token's polls that its booking was not saved, when Redis lost the booking
-- before Postgres decided it (a restart from an older snapshot took its outbox entry
-- and its mark): reconcile never saw it, and Postgres now holds it VOID. The mark
-- becomes '-' and the reservation id, which polls answer as NOT_SAVED and which does
-- not stop the token from booking again (lua/poll.lua, lua/reserve.lua).
-- Only where the token has no mark: one naming a booking (this one, still in the
-- outbox, or a later one) or a note already there is left as it is. Nothing is
-- written for an event Redis holds no live state of.
--
-- KEY meta    HASH    the event's record (its existence is checked)
-- KEY booked  STRING  the token's booking mark
-- ARG reservation  reservation id
--
-- Returns 1 when noted, 0 when left as it was.
if redis.call('HLEN', meta) == 0 then return 0 end
if redis.call('GET', booked) then return 0 end
redis.call('SET', booked, '-' .. reservation)
return 1
