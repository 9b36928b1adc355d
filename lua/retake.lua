-- Take a released hold's seats back for its late payment (booking_app/checkout.py,
-- on an event that allows late confirmation): lua/cancel.lua's give-back undone,
-- exactly once. The caller holds the reservation's row locked in Postgres from
-- before this step until its row says CONFIRMED (or it gives the seats back), and
-- every give-back locks that row and acts only on a row still given back: no
-- give-back of this reservation can run in between, or after, on a stale read.
-- The `returned` hash says where the seats are, as reconcile's recount
-- (lua/seats_heal.lua) reads it: a released reservation in it has its seats back on
-- sale, and they are taken again only if that many are left (it leaves the hash
-- with them); one not in it never had them given back (Redis failed then), so they
-- are still taken and nothing moves. Either way the recount counts them taken both
-- before the row's commit (released, not in the hash) and after (confirmed).
-- While a recount runs nothing is taken (the caller retries).
-- The token's booking mark names the reservation again when it has none.
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
-- ARG seat_ids...  its numbered seats: each must be free to be taken again
--
-- Returns TAKEN (taken from seats left), KEPT (never given back: still taken),
-- NO_ROOM (fewer seats left than it needs), RECOUNT (a recount runs) or GONE (Redis
-- holds no live state of the event); nothing changed for the last three.
-- needs: seats
if redis.call('HLEN', meta) == 0 then return 'GONE' end
if redis.call('GET', recount) then return 'RECOUNT' end
local left = tonumber(redis.call('GET', seats) or 0)
if not left then return redis.error_reply('seats left is not a number') end
local mark = redis.call('GET', booked)
local given = redis.call('HEXISTS', returned, reservation) == 1
if given and left < tonumber(count) then return 'NO_ROOM' end
seats_check(sections, seat_index, seat_state, section_left, section)
local mapped = section ~= '' and redis.call('HEXISTS', sections, section) == 1
if given and mapped then
  if tonumber(redis.call('HGET', section_left, section) or 0) < tonumber(count) then return 'NO_ROOM' end
  local positions = seat_positions(seat_index, seat_ids)
  if #seat_ids > 0 and not positions then return 'NO_ROOM' end
  for _, state in ipairs(#seat_ids > 0 and seat_states(seat_state, positions) or {}) do
    if state ~= FREE then return 'NO_ROOM' end
  end
end

if given then
  redis.call('HDEL', returned, reservation)
  redis.call('DECRBY', seats, count)
  seats_take(sections, seat_index, seat_state, section_left, section, seat_ids, tonumber(count), SOLD)
end
if not mark then redis.call('SET', booked, reservation) end
if given then return 'TAKEN' end
return 'KEPT'
