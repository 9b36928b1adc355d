-- Return a cancelled reservation's seats, exactly once however often it is retried
-- (the request, then reconcile after a Redis outage). The `returned` hash is the
-- guard, and reconcile's seat recount (lua/seats_heal.lua) reads it: a cancellation
-- not in it is a seat still taken, one in it is back on sale. While a recount runs
-- nothing is returned (the caller retries, or leaves it to reconcile).
-- Validates every key before its first write.
--
-- KEY seats     STRING  seats left
-- KEY booked    STRING  the token's booking mark (a reservation id)
-- KEY returned  HASH    reservation id -> seats, for every cancellation returned
-- KEY recount   STRING  set while reconcile recounts seats left
-- KEY meta      HASH    the event's record (its existence is checked)
-- KEY sections    HASH    the seat map's sections (lua/lib/seats.lua)
-- KEY seat_index  HASH    seat id -> position
-- KEY seat_state  STRING  2 bits a numbered seat
-- KEY section_left HASH   section -> places free
-- ARG reservation  reservation id
-- ARG count        seats
-- ARG section      its section ('' without a map)
-- ARG seat_ids...  its numbered seats, free again with it
--
-- Returns seats left, -1 when the seats had already been returned, -2 while a
-- recount runs, or -3 when Redis holds no live state of the event (purged, or lost):
-- nothing changed then, and nothing may be written, or a later reopen would find
-- seats left that Postgres does not count (reconcile returns them once the event
-- is live again).
-- needs: seats
if redis.call('HLEN', meta) == 0 then return -3 end
if redis.call('GET', recount) then return -2 end
if redis.call('HEXISTS', returned, reservation) == 1 then return -1 end
if not tonumber(redis.call('GET', seats) or 0) then
  return redis.error_reply('seats left is not a number')
end
local mark = redis.call('GET', booked)
seats_check(sections, seat_index, seat_state, section_left, section)

redis.call('HSET', returned, reservation, count)
if mark == reservation then redis.call('DEL', booked) end
seats_give_back(sections, seat_index, seat_state, section_left, section, seat_ids, tonumber(count))
return redis.call('INCRBY', seats, count)
