-- Settle a booking that Postgres refused or did not save (its row is VOID): take its
-- entry out of the outbox and, in the same step, give back what the Redis step took.
-- Exactly once, whoever calls it and however often (the request, then reconcile, or
-- two reconciles at once): only the call whose XDEL removes the entry acts.
-- Validates every key before its first write.
--
-- KEY outbox      STREAM  bookings not yet decided in Postgres
-- KEY seats       STRING  seats left
-- KEY booked      STRING  the token's booking mark (a reservation id)
-- KEY windows     ZSET    the admission log (lua/lib/line.lua)
-- KEY per_window  HASH    `to` of a window -> bookings made in it
-- KEY active      STRING  people in a window not yet passed who have not booked
-- KEY meta        HASH    draw, drawSize
-- KEY drawpos     STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEY booked_places STRING bitmap of the places whose token booked
-- KEY sections    HASH    the seat map's sections (lua/lib/seats.lua)
-- KEY seat_index  HASH    seat id -> position
-- KEY seat_state  STRING  2 bits a numbered seat
-- KEY section_left HASH   section -> places free
-- ARG entry  outbox entry id
-- ARG reservation  reservation id of the entry
-- ARG seats_back  seats to give back (0 when Postgres had no room: the count in Redis was
--         too high, and keeping them taken brings it down)
-- ARG token  token, 16 raw bytes
-- ARG reopen  1 to give the token's active window back (what is left of it), 0 not to
-- ARG confirmed  reservation id the booking mark must name from now on (the token's
--         confirmed one), or '' to remove the mark if it names `reservation`
-- ARG unheard  1 when the client never heard the outcome (reconcile decides): a mark
--         naming `reservation` becomes '-' .. reservation instead, so that polls answer
--         NOT_SAVED; 0 otherwise
-- ARG section  the booking's section ('' without a map)
-- ARG seat_ids...  its numbered seats: free again when its seats are given back
--
-- Returns 1 when released, 0 when the entry was already gone (nothing changed).
-- needs: line
-- needs: seats
local give = tonumber(seats_back)
redis.call('XLEN', outbox)
if give > 0 and not tonumber(redis.call('GET', seats) or 0) then
  return redis.error_reply('seats left is not a number')
end
local mark = redis.call('GET', booked)
redis.call('HLEN', per_window)
counter(active)
-- The window the booking used, while it has not passed: the token is active again
-- once its mark is gone, so it counts as active again.
local window, place
if tonumber(reopen) > 0 then
  redis.call('STRLEN', booked_places)
  local fields = redis.call('HMGET', meta, 'draw', 'drawSize')
  place = number_of(token)
  if fields[1] == 'DONE' and place <= tonumber(fields[2]) then place = drawn_place(drawpos, place) end
  local ends, to = window_of(windows, place)
  if ends and ends > now_ms() then window = to end
end

seats_check(sections, seat_index, seat_state, section_left, section)
if redis.call('XDEL', outbox, entry) == 0 then return 0 end
if give > 0 then
  redis.call('INCRBY', seats, give)
  seats_give_back(sections, seat_index, seat_state, section_left, section, seat_ids, give)
end
if confirmed ~= '' then
  redis.call('SET', booked, confirmed)
elseif mark == reservation and unheard == '1' then
  redis.call('SET', booked, '-' .. reservation)
elseif mark == reservation then
  redis.call('DEL', booked)
end
if place then redis.call('SETBIT', booked_places, place, 0) end
if window then
  redis.call('HINCRBY', per_window, window, -1)
  redis.call('INCR', active)
end
return 1
