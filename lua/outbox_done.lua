-- Take a booking's entry out of the outbox once its row is in Postgres. While a seat
-- recount runs (lua/seats_heal.lua) the entry stays: removing it then could hide a
-- sold seat from the recount. Reconcile removes what stays.
--
-- KEY outbox   STREAM  bookings not yet decided in Postgres
-- KEY recount  STRING  set while reconcile recounts seats left
-- ARG entry    outbox entry id
--
-- Returns 1 when removed, 0 when it was not there, -1 when left for reconcile.
-- Its one write is XDEL, after both keys were read (a wrong type fails first).
if redis.call('GET', recount) then return -1 end
return redis.call('XDEL', outbox, entry)
