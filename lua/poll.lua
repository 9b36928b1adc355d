-- Everything a poll shows, read in one round trip: booked? / active and until
-- when / place in line / people waiting / seats left / event status.
--
-- The line is a LIST in arrival order plus counters, not a ZSET: a place costs
-- ~45 bytes instead of ~140. A person's rank follows from their place: everyone
-- with a smaller one is ahead, except those already admitted (the first `popped`
-- places) and those who left (their places are in `left`). A place is the arrival
-- number the token carries, except for the numbers of a drawn pre-queue (meta
-- draw = DONE, numbers 1..drawSize), whose place is their drawn position.
--
-- KEYS[1] meta    HASH    status, admitRate, opensAt, draw, drawSize
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  places already taken off the head of the line
-- KEYS[4] left    ZSET    places of people who left the line (score = place)
-- KEYS[5] bucket  HASH    token index: token -> its owner (lua/join.lua); in it
--                         means issued and not left
-- KEYS[6] active  ZSET    token -> end of its active window (ms)
-- KEYS[7] booked  STRING  reservation id, once this token has booked
-- KEYS[8] seats   STRING  seats left
-- KEYS[9] drawpos STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- ARGV[1] token, 16 raw bytes
--
-- Returns {state, totalWaiting, seatsLeft, eventStatus, detail, admitRate, opensAt,
-- prequeue, drawPosition} where state is PRE_QUEUE (before the start of an event
-- with a scheduled start), DRAWING (its start passed, the draw not done), WAITING
-- (detail = rank), ACTIVE (detail = window end, ms), BOOKED (detail = reservation
-- id), EXPIRED or NOT_FOUND; opensAt is the scheduled start (ms) or false; prequeue
-- 1 when the token's number is of the pre-queue; drawPosition its drawn position
-- once drawn, else 0. Or {'EVENT_NOT_FOUND'}.
-- Writes nothing, and like the scripts that write, validates what it reads: a key of
-- the wrong type or a counter that is not a number fails the script.
local meta = redis.call('HMGET', KEYS[1], 'status', 'admitRate', 'opensAt', 'draw', 'drawSize')
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
-- The arrival number the token carries (bytes 10-14; queue_app/tokens.py).
local b1, b2, b3, b4, b5 = ARGV[1]:byte(10, 14)
local n = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
local draw, size = meta[4], tonumber(meta[5] or '')
local prequeue = (draw == 'PENDING' or draw == 'DONE') and (not size or n <= size) and 1 or 0
local position = 0
if draw == 'DONE' and prequeue == 1 then
  local p1, p2, p3, p4 = redis.call('GETRANGE', KEYS[9], n * 4 - 4, n * 4 - 1):byte(1, 4)
  if not p4 then error(KEYS[9] .. ' holds no position for ' .. n) end
  position = ((p1 * 256 + p2) * 256 + p3) * 256 + p4
end
local function answer(state, detail)
  return {state, waiting, seats, status, detail or false, meta[2] or '0', meta[3] or false, prequeue, position}
end

local booked = redis.call('GET', KEYS[7])
if booked then return answer('BOOKED', booked) end
if status == 'CLOSED' then return answer('EXPIRED') end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expires = redis.call('ZSCORE', KEYS[6], ARGV[1])
if expires and tonumber(expires) > now then return answer('ACTIVE', expires) end

if not redis.call('HGET', KEYS[5], ARGV[1]) then return answer('NOT_FOUND') end
if draw == 'PENDING' and prequeue == 1 then
  -- Before the start, or drawing: the pre-queue has no order yet. (With drawSize not
  -- yet written, the start closes the pre-queue at the numbers issued so far.)
  local opens = tonumber(meta[3])
  if not opens then error(KEYS[1] .. ': opensAt is not a number') end
  if not size and now < opens then return answer('PRE_QUEUE') end
  return answer('DRAWING')
end
local place = position > 0 and position or n
if place <= popped then return answer('EXPIRED') end  -- admitted, and the window passed
local ahead = place - 1 - popped - redis.call('ZCOUNT', KEYS[4], '-inf', '(' .. tostring(place))
return answer('WAITING', ahead + 1)
