-- Book seats for an active token: every check and the decrement in one step, so
-- two requests can never both take the last seat.
-- Checks, in this order: event OPEN; an account when the event asks for one; a
-- buyer (an account or an email) when it caps seats per buyer (Postgres counts
-- them, booking_app/migrations/0006_buyer_required.py); token not booked before;
-- token ACTIVE and its window not passed; 1 <= seats <= the event's most per
-- booking; enough seats.
-- A token is active when its place was admitted by a tick whose window has not
-- passed (the admission log, lua/lib/line.lua), its person did not leave, and it
-- has not booked.
-- On success: seats go down, the booking mark is set (for the life of the event),
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
-- ARG token  token, 16 raw bytes
-- ARG token_text  token, canonical text (for the outbox)
-- ARG wanted  seats wanted
-- ARG reservation  reservation id (chosen by the caller, so Postgres and Redis share it)
-- ARG name  buyer's name ('' for none)
-- ARG email  buyer's email ('' for none)
-- ARG account  the signed-in account's id ('' for none; an account event needs one)
--
-- Returns these, in this order (booking_app/services.py: Reserved); a refusal only
-- the first two:
-- REPLY outcome   OK, or the refusal: EVENT_NOT_FOUND, EVENT_CLOSED, ALREADY_BOOKED,
--                 ACCOUNT_REQUIRED, BUYER_REQUIRED, NOT_ACTIVE, VALIDATION_ERROR,
--                 SOLD_OUT or INSUFFICIENT_SEATS
-- REPLY detail    OK: seats left; ALREADY_BOOKED: the reservation id; VALIDATION_ERROR:
--                 the most per booking; SOLD_OUT, INSUFFICIENT_SEATS: seats left
-- REPLY entry     OK: the outbox entry's id
-- REPLY window_end  OK: the end of the person's window (ms)
-- REPLY amount    OK: what the buyer owes, in the currency's minor unit (0: free)
-- REPLY currency  OK: its currency
-- REPLY hold_until  OK on a priced event: when the hold ends (ms), else 0
-- needs: line
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

local count = tonumber(wanted)
local most = tonumber(fields[2] or 4)
if count < 1 or count > most then return {'VALIDATION_ERROR', most} end

local seats_left = tonumber(redis.call('GET', seats) or 0)
if not seats_left then return redis.error_reply('seats left is not a number') end
if seats_left <= 0 then return {'SOLD_OUT', 0} end
if seats_left < count then return {'INSUFFICIENT_SEATS', seats_left} end
local price, hold = tonumber(fields[8] or 0), tonumber(fields[10] or 0)
if not price or not hold then return redis.error_reply('price and holdSeconds must be numbers') end
local amount, currency, hold_until = price * count, fields[9] or '', 0
if amount > 0 then hold_until = now_ms() + hold * 1000 end
redis.call('XLEN', outbox)  -- a wrong type fails here, before any write
redis.call('HLEN', per_window)
counter(active)

seats_left = redis.call('DECRBY', seats, count)
redis.call('SET', booked, reservation)
redis.call('SETBIT', booked_places, place, 1)
redis.call('HINCRBY', per_window, window, 1)
redis.call('DECR', active)
local entry = redis.call('XADD', outbox, '*', 'reservationId', reservation, 'token', token_text,
  'seats', count, 'buyerName', name, 'buyerEmail', email, 'windowEnd', window_end, 'userId', account,
  'amount', amount, 'currency', currency, 'holdUntil', hold_until)
return {'OK', seats_left, entry, window_end, amount, currency, hold_until}
