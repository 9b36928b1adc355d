-- Book seats for an active token: every check and the decrement in one step, so
-- two requests can never both take the last seat.
-- Checks, in this order: event OPEN; token not booked before; token ACTIVE and
-- its window not passed; 1 <= seats <= the event's most per booking; enough seats.
-- On success: seats go down, the booking mark is set (for the life of the event),
-- the token leaves the active set, and the booking, with every field its row needs
-- and the window it used (given back if Postgres refuses it), is appended to the
-- outbox stream: Postgres gets it even if the app process dies before its own write
-- (reconcile decides it then).
-- Validates every key before its first write: a key of the wrong type is an error
-- that changes nothing.
--
-- KEYS[1] meta    HASH    status, maxPerBooking
-- KEYS[2] active  ZSET    token -> end of its active window (ms)
-- KEYS[3] booked  STRING  reservation id, once this token has booked
-- KEYS[4] seats   STRING  seats left
-- KEYS[5] outbox  STREAM  bookings not yet decided in Postgres
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
-- id), ACCOUNT_REQUIRED, NOT_ACTIVE, VALIDATION_ERROR (detail = most per booking), SOLD_OUT or
-- INSUFFICIENT_SEATS (detail = seats left).
local meta = redis.call('HMGET', KEYS[1], 'status', 'maxPerBooking', 'requireAccount')
if not meta[1] then return {'EVENT_NOT_FOUND'} end
if meta[1] ~= 'OPEN' then return {'EVENT_CLOSED'} end
local account = ARGV[7] or ''
if meta[3] == '1' and account == '' then return {'ACCOUNT_REQUIRED'} end

local booked = redis.call('GET', KEYS[3])
if booked then return {'ALREADY_BOOKED', booked} end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local window_end = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not window_end or tonumber(window_end) <= now then return {'NOT_ACTIVE'} end

local wanted = tonumber(ARGV[3])
local most = tonumber(meta[2] or 4)
if wanted < 1 or wanted > most then return {'VALIDATION_ERROR', most} end

local left = tonumber(redis.call('GET', KEYS[4]) or 0)
if not left then return redis.error_reply('seats left is not a number') end
if left <= 0 then return {'SOLD_OUT', 0} end
if left < wanted then return {'INSUFFICIENT_SEATS', left} end
redis.call('XLEN', KEYS[5])  -- a wrong type fails here, before any write

left = redis.call('DECRBY', KEYS[4], wanted)
redis.call('SET', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
local entry = redis.call('XADD', KEYS[5], '*', 'reservationId', ARGV[4], 'token', ARGV[2],
  'seats', wanted, 'buyerName', ARGV[5], 'buyerEmail', ARGV[6], 'windowEnd', window_end, 'userId', account)
return {'OK', left, entry, window_end}
