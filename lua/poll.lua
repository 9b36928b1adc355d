-- Everything a poll shows, read in one round trip: booked? / active and until
-- when / place in line / people waiting / seats left / event status.
--
-- The line is a LIST in arrival order plus counters, not a ZSET: a place costs
-- ~45 bytes instead of ~140. A person's rank follows from their arrival number:
-- everyone with a smaller number is ahead, except those already admitted (the
-- first `popped` numbers) and those who left (their numbers are in `left`).
--
-- KEYS[1] meta    HASH    status, admitRate
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  arrival numbers already taken off the head of the line
-- KEYS[4] left    ZSET    arrival numbers of people who left the line (score = number)
-- KEYS[5] bucket  HASH    token index: token -> its owner (lua/join.lua); in it
--                         means issued and not left
-- KEYS[6] active  ZSET    token -> end of its active window (ms)
-- KEYS[7] booked  STRING  reservation id, once this token has booked
-- KEYS[8] seats   STRING  seats left
-- ARGV[1] token, 16 raw bytes
--
-- Returns {state, totalWaiting, seatsLeft, eventStatus, detail, admitRate} where
-- state is WAITING (detail = rank), ACTIVE (detail = window end, ms), BOOKED
-- (detail = reservation id), EXPIRED or NOT_FOUND; or {'EVENT_NOT_FOUND'}.
-- Writes nothing, and like the scripts that write, validates what it reads: a key of
-- the wrong type or a counter that is not a number fails the script.
local meta = redis.call('HMGET', KEYS[1], 'status', 'admitRate')
local status = meta[1]
if not status then return {'EVENT_NOT_FOUND'} end

-- A counter kept as a string: absent is 0, anything but a number is an error (not a
-- nil that would cut the reply short).
local function number(i)
  local n = tonumber(redis.call('GET', KEYS[i]) or 0)
  if not n then error(KEYS[i] .. ' is not a number') end
  return n
end

local popped = number(3)
local waiting = number(2) - popped - redis.call('ZCARD', KEYS[4])
local seats = number(8)
local function answer(state, detail)
  return {state, waiting, seats, status, detail or false, meta[2] or '0'}
end

local booked = redis.call('GET', KEYS[7])
if booked then return answer('BOOKED', booked) end
if status == 'CLOSED' then return answer('EXPIRED') end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expires = redis.call('ZSCORE', KEYS[6], ARGV[1])
if expires and tonumber(expires) > now then return answer('ACTIVE', expires) end

if not redis.call('HGET', KEYS[5], ARGV[1]) then return answer('NOT_FOUND') end
-- The arrival number the token carries (bytes 10-14; queue_app/tokens.py).
local b1, b2, b3, b4, b5 = ARGV[1]:byte(10, 14)
local place = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
if place <= popped then return answer('EXPIRED') end  -- admitted, and the window passed
local ahead = place - 1 - popped - redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. tostring(place))
return answer('WAITING', ahead + 1)
