-- Count joins refused for a reason, for the operator (the admin's event list).
-- Only for an event that exists: a refused request may name any event id, and a
-- counter per made-up id would let anyone fill Redis.
--
-- KEY meta     HASH    the event's record (its existence is checked)
-- KEY refused  HASH    reason -> joins refused for it
-- ARG reason   the reason (rate, forged_token, ...)
-- ARG count    how many (a process adds its own once a second: ticketing/store/scripts.py)
--
-- Returns the reason's new count, or 0 for an unknown event.
if redis.call('EXISTS', meta) == 0 then return 0 end
return redis.call('HINCRBY', refused, reason, count)
