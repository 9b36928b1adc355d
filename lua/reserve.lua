-- Book seats for an active token: every check and the decrement in one step, so
-- two requests can never both take the last seat.
-- Checks, in this order: event OPEN; an account when the event asks for one; a
-- buyer (an account or an email) when it caps seats per buyer (Postgres counts
-- them, booking_app/migrations/0006_buyer_required.py); token not booked before;
-- token ACTIVE and its window not passed; 1 <= seats <= the event's most per
-- booking; seats left; then, on an event with a seat map, where: the seats asked
-- for (known, of one section, each free: all or none) or the section asked for,
-- its places left, and in a numbered one the best free seats (lua/lib/seats.lua).
-- A token is active when its place was admitted by a tick whose window has not
-- passed (the admission log, lua/lib/line.lua), its person did not leave, it has
-- not booked, and on an event with a claim time, it came back in time (a booking
-- is coming back: it claims the place).
-- On success: seats go down (and the section's places, and its seats show held, or
-- sold on a free event), the booking mark is set (for the life of the event),
-- the token no longer counts as active, and the booking, with every field its row needs
-- and the window it used (given back if Postgres refuses it), is appended to the
-- outbox stream: Postgres gets it even if the app process dies before its own write
-- (reconcile decides it then). On a priced event the entry also carries what the
-- buyer owes (price x seats, as the event says now) and until when the seats are
-- held (Redis' clock, the one the windows use): the row is written HELD.
-- Validates every key before its first write: a key of the wrong type is an error
-- that changes nothing.
--
-- KEY meta        HASH    status, gen, maxPerBooking, requireAccount, draw, drawSize, maxPerBuyer,
--                         price, currency, holdSeconds
-- KEY windows     ZSET    the admission log
-- KEY booked      STRING  reservation id, once this token has booked ('-' and an id:
--                         a booking that was not saved, which does not stop another)
-- KEY seats       STRING  seats left
-- KEY outbox      STREAM  bookings not yet decided in Postgres
-- KEY popped      STRING  places already taken off the head of the line
-- KEY left        STRING  bitmap of the places whose person left
-- KEY per_window  HASH    `to` of a window -> bookings made in it
-- KEY active      STRING  people in a window not yet passed who have not booked
-- KEY drawpos     STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEY booked_places STRING bitmap of the places whose token booked
-- KEY nonces      STRING  the random bytes of each number's token, 2 bytes a number
-- KEY sections    HASH    the seat map's sections (lua/lib/seats.lua); none: no map
-- KEY seat_index  HASH    seat id -> position, '#' .. position -> seat id
-- KEY seat_state  STRING  2 bits a numbered seat: free, held, sold, blocked
-- KEY section_left HASH   section -> places free
-- KEY claims      HASH    per admission log entry, the time its people must come back by
-- KEY claimed     STRING  bitmap of the admitted places that came back
-- ARG token  token, 16 raw bytes
-- ARG token_text  token, canonical text (for the outbox)
-- ARG wanted  seats wanted
-- ARG reservation  reservation id (chosen by the caller, so Postgres and Redis share it)
-- ARG name  buyer's name ('' for none)
-- ARG email  buyer's email ('' for none)
-- ARG account  the signed-in account's id ('' for none; an account event needs one)
-- ARG section  on an event with a seat map: the section to pick `wanted` seats in,
--         or '' when seat_ids name them (their section, if given, must be theirs)
-- ARG together  1: the picked seats must be adjacent (a run of one row), or none
-- ARG seat_ids...  the numbered seats asked for, all or none (wanted is their count)
--
-- Returns these, in this order (booking_app/services.py: Reserved); a refusal only
-- the first two:
-- REPLY outcome   OK, or the refusal: EVENT_NOT_FOUND, EVENT_CLOSED, ALREADY_BOOKED,
--                 ACCOUNT_REQUIRED, BUYER_REQUIRED, NOT_ACTIVE, VALIDATION_ERROR,
--                 SEATS_INVALID, SECTION_NOT_FOUND, SEAT_NOT_FOUND, SEAT_TAKEN,
--                 SOLD_OUT, SECTION_SOLD_OUT, NO_ADJACENT_SEATS or INSUFFICIENT_SEATS
-- REPLY detail    OK: seats left; ALREADY_BOOKED: the reservation id; VALIDATION_ERROR:
--                 the most per booking; SEATS_INVALID: why; SEAT_NOT_FOUND, SEAT_TAKEN:
--                 the seat ids, comma-joined; SOLD_OUT, INSUFFICIENT_SEATS: seats left
--                 (in the section, on a map); NO_ADJACENT_SEATS: the section's left
-- REPLY entry     OK: the outbox entry's id
-- REPLY window_end  OK: the end of the person's window (ms)
-- REPLY amount    OK: what the buyer owes, in the currency's minor unit (0: free)
-- REPLY currency  OK: its currency
-- REPLY hold_until  OK on a priced event: when the hold ends (ms), else 0
-- REPLY section   OK: the section's code ('' without a map)
-- REPLY seat_list  OK: the numbered seats held, comma-joined ('' for unnumbered places)
-- needs: line
-- needs: seats
local fields = redis.call('HMGET', meta, 'status', 'maxPerBooking', 'requireAccount', 'gen', 'draw',
  'drawSize', 'maxPerBuyer', 'price', 'currency', 'holdSeconds')
if not fields[1] then return {'EVENT_NOT_FOUND'} end
if fields[1] ~= 'OPEN' then return {'EVENT_CLOSED'} end
if fields[3] == '1' and account == '' then return {'ACCOUNT_REQUIRED'} end
if (tonumber(fields[7] or 0) or 0) > 0 and account == '' and email == '' then return {'BUYER_REQUIRED'} end

local mark = redis.call('GET', booked)
if mark and mark:sub(1, 1) ~= '-' then return {'ALREADY_BOOKED', mark} end

local n = number_of(token)
if not issued(nonces, generation(fields[4]), token, n) then return {'NOT_ACTIVE'} end  -- not this line's
local place = n
if fields[5] == 'DONE' and n <= tonumber(fields[6]) then place = drawn_place(drawpos, n) end
if fields[5] == 'PENDING' or place > counter(popped) or is_set(left, place) or is_set(booked_places, place) then
  return {'NOT_ACTIVE'}
end
local window_end, window = window_of(windows, place)
if not window_end or window_end <= now_ms() then return {'NOT_ACTIVE'} end
local claim = claim_of(claims, claimed, window, place, now_ms())
if claim == 'PASSED' then return {'NOT_ACTIVE'} end  -- a grace is taken by a poll (the booking page's)

local count = tonumber(wanted)
local most = tonumber(fields[2] or 4)
if count < 1 or count > most then return {'VALIDATION_ERROR', most} end

local seats_left = tonumber(redis.call('GET', seats) or 0)
if not seats_left then return redis.error_reply('seats left is not a number') end
if seats_left <= 0 then return {'SOLD_OUT', 0} end
local price, hold = tonumber(fields[8] or 0), tonumber(fields[10] or 0)
if not price or not hold then return redis.error_reply('price and holdSeconds must be numbers') end

-- Where: a section's places, and in a numbered one which seats (asked for, or picked).
local code, positions = section, {}
if redis.call('HLEN', sections) == 0 then
  if code ~= '' or #seat_ids > 0 then return {'SEATS_INVALID', 'this event has no seat map'} end
  if seats_left < count then return {'INSUFFICIENT_SEATS', seats_left} end
else
  if #seat_ids > 0 then
    local theirs, seen = seat_ids[1]:match('^([^-]+)-'), {}
    for _, id in ipairs(seat_ids) do
      if seen[id] then return {'SEATS_INVALID', 'seat ' .. id .. ' is named twice'} end
      seen[id] = true
      if id:match('^([^-]+)-') ~= theirs then return {'SEATS_INVALID', 'the seats of one booking are in one section'} end
    end
    if code ~= '' and code ~= theirs then return {'SEATS_INVALID', 'the seats are not in section ' .. code} end
    code = theirs or ''
    local unknown
    positions, unknown = seat_positions(seat_index, seat_ids)
    if not positions then return {'SEAT_NOT_FOUND', table.concat(unknown, ',')} end
  elseif code == '' then
    return {'SEATS_INVALID', 'name the seats, or a section to pick them in'}
  end
  local spec = section_spec(sections, code)
  if not spec then return {'SECTION_NOT_FOUND', code} end
  if #seat_ids > 0 then
    local taken = {}
    for i, state in ipairs(seat_states(seat_state, positions)) do
      if state ~= FREE then taken[#taken + 1] = seat_ids[i] end
    end
    if #taken > 0 then return {'SEAT_TAKEN', table.concat(taken, ',')} end
  end
  local places = tonumber(redis.call('HGET', section_left, code) or 0)
  if not places then return redis.error_reply('places left of section ' .. code .. ' is not a number') end
  if places <= 0 then return {'SECTION_SOLD_OUT', 0} end
  if places < count then return {'INSUFFICIENT_SEATS', places} end
  if spec.numbered and #seat_ids == 0 then
    positions = seats_pick(seat_state, spec, count, together == '1')
    if not positions then return {'NO_ADJACENT_SEATS', places} end
    seat_ids = seat_ids_at(seat_index, positions)
  end
  price = spec.price
end
local amount, currency, hold_until = price * count, fields[9] or '', 0
if amount > 0 then hold_until = now_ms() + hold * 1000 end
redis.call('XLEN', outbox)  -- a wrong type fails here, before any write
redis.call('HLEN', per_window)
counter(active)

seats_left = redis.call('DECRBY', seats, count)
if code ~= '' then
  redis.call('HINCRBY', section_left, code, -count)
  seats_mark(seat_state, positions, amount > 0 and HELD or SOLD)
end
redis.call('SET', booked, reservation)
redis.call('SETBIT', booked_places, place, 1)
if claim == 'CLAIM' then redis.call('SETBIT', claimed, place, 1) end
redis.call('HINCRBY', per_window, window, 1)
redis.call('DECR', active)
local seat_list = table.concat(seat_ids, ',')
local entry = redis.call('XADD', outbox, '*', 'reservationId', reservation, 'token', token_text,
  'seats', count, 'buyerName', name, 'buyerEmail', email, 'windowEnd', window_end, 'userId', account,
  'amount', amount, 'currency', currency, 'holdUntil', hold_until, 'section', code, 'seatIds', seat_list)
return {'OK', seats_left, entry, window_end, amount, currency, hold_until, code, seat_list}
