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
-- (reconcile decides it then).
-- Validates every key before its first write: a key of the wrong type is an error
-- that changes nothing.
--
-- KEYS[1] meta    HASH    status, gen, maxPerBooking, requireAccount, draw, drawSize, maxPerBuyer
-- KEYS[2] windows ZSET    the admission log
-- KEYS[3] booked  STRING  reservation id, once this token has booked ('-' and an id:
--                         a booking that was not saved, which does not stop another)
-- KEYS[4] seats   STRING  seats left
-- KEYS[5] outbox  STREAM  bookings not yet decided in Postgres
-- KEYS[6] popped  STRING  places already taken off the head of the line
-- KEYS[7] left    STRING  bitmap of the places whose person left
-- KEYS[8] perwindow HASH  `to` of a window -> bookings made in it
-- KEYS[9] active  STRING  people in a window not yet passed who have not booked
-- KEYS[10] drawpos STRING drawn positions of the pre-queue's numbers, 4 bytes each
-- KEYS[11] bookedplaces STRING bitmap of the places whose token booked
-- KEYS[12] nonces  STRING the random bytes of each number's token, 2 bytes a number
-- ARGV[1] token, 16 raw bytes
-- ARGV[2] token, canonical text (for the outbox)
-- ARGV[3] seats wanted
-- ARGV[4] reservation id (chosen by the caller, so Postgres and Redis share it)
-- ARGV[5] buyer's name ('' for none)
-- ARGV[6] buyer's email ('' for none)
-- ARGV[7] the signed-in account's id ('' or absent for none; an account event needs one)
--
-- Returns {'OK', seatsLeft, outboxEntryId, windowEnd} or {refusal, detail} where
-- refusal is EVENT_NOT_FOUND, EVENT_CLOSED, ALREADY_BOOKED (detail = reservation
-- id), ACCOUNT_REQUIRED, BUYER_REQUIRED, NOT_ACTIVE, VALIDATION_ERROR (detail = most
-- per booking), SOLD_OUT or INSUFFICIENT_SEATS (detail = seats left).
-- needs: line
local meta = redis.call('HMGET', KEYS[1], 'status', 'maxPerBooking', 'requireAccount', 'gen', 'draw',
  'drawSize', 'maxPerBuyer')
if not meta[1] then return {'EVENT_NOT_FOUND'} end
if meta[1] ~= 'OPEN' then return {'EVENT_CLOSED'} end
local account = ARGV[7] or ''
if meta[3] == '1' and account == '' then return {'ACCOUNT_REQUIRED'} end
if (tonumber(meta[7] or 0) or 0) > 0 and account == '' and ARGV[6] == '' then return {'BUYER_REQUIRED'} end

local booked = redis.call('GET', KEYS[3])
if booked and booked:sub(1, 1) ~= '-' then return {'ALREADY_BOOKED', booked} end

local n = number_of(ARGV[1])
if not issued(KEYS[12], generation(meta[4]), ARGV[1], n) then return {'NOT_ACTIVE'} end  -- not this line's
local place = n
if meta[5] == 'DONE' and n <= tonumber(meta[6]) then place = drawn_place(KEYS[10], n) end
if meta[5] == 'PENDING' or place > counter(KEYS[6]) or is_set(KEYS[7], place) or is_set(KEYS[11], place) then
  return {'NOT_ACTIVE'}
end
local window_end, window = window_of(KEYS[2], place)
if not window_end or window_end <= now_ms() then return {'NOT_ACTIVE'} end

local wanted = tonumber(ARGV[3])
local most = tonumber(meta[2] or 4)
if wanted < 1 or wanted > most then return {'VALIDATION_ERROR', most} end

local left = tonumber(redis.call('GET', KEYS[4]) or 0)
if not left then return redis.error_reply('seats left is not a number') end
if left <= 0 then return {'SOLD_OUT', 0} end
if left < wanted then return {'INSUFFICIENT_SEATS', left} end
redis.call('XLEN', KEYS[5])  -- a wrong type fails here, before any write
redis.call('HLEN', KEYS[8])
counter(KEYS[9])

left = redis.call('DECRBY', KEYS[4], wanted)
redis.call('SET', KEYS[3], ARGV[4])
redis.call('SETBIT', KEYS[11], place, 1)
redis.call('HINCRBY', KEYS[8], window, 1)
redis.call('DECR', KEYS[9])
local entry = redis.call('XADD', KEYS[5], '*', 'reservationId', ARGV[4], 'token', ARGV[2],
  'seats', wanted, 'buyerName', ARGV[5], 'buyerEmail', ARGV[6], 'windowEnd', window_end, 'userId', account)
return {'OK', left, entry, window_end}
