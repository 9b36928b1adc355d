-- One admission tick for one event: end the windows that have passed, then move
-- up to `admitPerSecond` people from the head of the line into the active window.
--
-- Runs at most once per second of Redis' clock, however many beat or worker
-- processes call it: a second caller in the same second admits nobody. Admits
-- nobody unless the event is OPEN and has seats left, and never beyond the
-- event's cap of people active at once. O(batch + hole budget) work, whatever the
-- line's length.
--
-- Reads and validates everything before its first write, then writes: Redis keeps
-- the writes done before an error, so a bad key (of the wrong type, a counter or
-- setting that is not a number) fails the tick with nothing changed, never with the
-- head of the line popped and `popped` stale.
--
-- KEYS[1] meta    HASH    status, admitPerSecond, windowSeconds, maxActive, draw, opensAt,
--                         drawSize; admitRate is written
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  places already taken off the head of the line
-- KEYS[4] line    LIST    tokens (16 raw bytes) in arrival order
-- KEYS[5] left    ZSET    places of people who left the line
-- KEYS[6] active  ZSET    token -> end of its active window (ms)
-- KEYS[7] seats   STRING  seats left
-- KEYS[8] tick    STRING  the last second (Redis clock) a tick ran
-- KEYS[9] log     LIST    "<second>:<admitted>" of the last 120 ticks, newest first
-- KEYS[10] pre    STRING  a drawn pre-queue's tokens, 16 bytes each, by arrival number
-- KEYS[11] drawnum STRING the arrival number at each drawn position, 4 bytes each
-- ARGV[1] how long before a scheduled start its draw is due (ms)
--
-- Touches no key but these: a person's token carries their arrival number, and
-- "taken off the head" is their place being <= `popped`. After a scheduled start's
-- draw (meta draw = DONE, drawSize = P), places 1..P are the pre-queue in drawn
-- order, read from KEYS[11] and KEYS[10]; the LIST holds the places after P. Once
-- the line is past P, those two keys are deleted.
--
-- An event with a scheduled start admits nobody until its pre-queue is drawn (meta
-- draw = PENDING): NOT_OPEN, then DRAW_DUE from ARGV[1] ms before the start on,
-- which tells the caller to have the draw run (queue_app/draw.py: it prepares
-- what it can while the pre-queue is still open, and draws at the start).
--
-- Returns {outcome, admitted, waiting, active}; outcome is ADMITTED, ALREADY_TICKED,
-- NOT_OPEN, DRAW_DUE, SOLD_OUT, EMPTY (nobody waiting), FULL (the active cap is
-- reached) or EVENT_NOT_FOUND.

-- A last tick more than this many seconds ahead of Redis' clock is not "this second
-- already ticked" but the clock having gone back (a failover to a replica whose
-- clock is behind): waiting for the new clock to catch up would stop admission for
-- as long as the jump. The slack keeps the guard for ordinary skew between beats.
local CLOCK_JUMP_SECONDS = 5
-- Holes (people who left) are skipped, at most this many per tick beyond the batch,
-- so that one tick stays short whatever the line holds.
local HOLE_BUDGET = 10000

local function number(value, what)
  local n = tonumber(value)
  if not n then error(what .. ' is not a number') end
  return n
end

-- 1. Read and validate; nothing is written before step 2.
local meta = redis.call('HMGET', KEYS[1], 'status', 'admitPerSecond', 'windowSeconds', 'maxActive',
  'admitRate', 'draw', 'opensAt', 'drawSize')
if not meta[1] then return {'EVENT_NOT_FOUND', 0, 0, 0} end

local t = redis.call('TIME')
local second = tonumber(t[1])
local now = second * 1000 + math.floor(tonumber(t[2]) / 1000)
local last_tick = number(redis.call('GET', KEYS[8]) or 0, KEYS[8])
if last_tick >= second and last_tick - second <= CLOCK_JUMP_SECONDS then
  return {'ALREADY_TICKED', 0, 0, 0}
end

-- Each key written below is read here with a command that fails on the wrong type.
local active = redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf')  -- windows not yet passed
local seq = number(redis.call('GET', KEYS[2]) or 0, KEYS[2])
local popped = number(redis.call('GET', KEYS[3]) or 0, KEYS[3])
local waiting = seq - popped - redis.call('ZCARD', KEYS[5])
redis.call('LLEN', KEYS[9])
local drawn = meta[6] == 'DONE' and number(meta[8], 'drawSize') or 0
local drawn_left = drawn > popped and redis.call('STRLEN', KEYS[10]) > 0
if drawn_left then redis.call('STRLEN', KEYS[11]) end

-- The tokens at places first..first+count-1: a drawn pre-queue's from its tables,
-- the rest from the LIST, whose head is the place after `popped` and the pre-queue.
local function fetch(first, count)
  local tokens, last = {}, first + count - 1
  if first <= drawn then
    local upto = math.min(last, drawn)
    local numbers = redis.call('GETRANGE', KEYS[11], (first - 1) * 4, upto * 4 - 1)
    if #numbers ~= (upto - first + 1) * 4 then error(KEYS[11] .. ' is shorter than the draw') end
    for i = 1, #numbers, 4 do
      local b1, b2, b3, b4 = numbers:byte(i, i + 3)
      local n = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
      local token = redis.call('GETRANGE', KEYS[10], (n - 1) * 16, n * 16 - 1)
      if #token ~= 16 then error(KEYS[10] .. ' holds no token for ' .. n) end
      tokens[#tokens + 1] = token
    end
    first = upto + 1
  end
  if first <= last then
    local base = math.max(popped, drawn)
    for _, token in ipairs(redis.call('LRANGE', KEYS[4], first - base - 1, last - base - 1)) do
      tokens[#tokens + 1] = token
    end
  end
  return tokens
end

local outcome, want = 'ADMITTED', 0
if meta[6] == 'PENDING' then
  local due = meta[1] ~= 'CLOSED' and now >= number(meta[7], 'opensAt') - number(ARGV[1], 'the lead')
  outcome = due and 'DRAW_DUE' or 'NOT_OPEN'
elseif meta[1] ~= 'OPEN' then
  outcome = 'NOT_OPEN'
elseif number(redis.call('GET', KEYS[7]) or 0, KEYS[7]) <= 0 then
  outcome = 'SOLD_OUT'
else
  want = number(meta[2], 'admitPerSecond')
  local cap = number(meta[4] or 0, 'maxActive')
  if cap > 0 then want = math.min(want, cap - active) end
  if waiting <= 0 then
    outcome = 'EMPTY'
  elseif want <= 0 then
    outcome = 'FULL'
  end
end

-- Who is admitted, read off the head of the line without taking anyone off it. An
-- entry whose number is in `left` is a hole (its owner left). Every entry examined
-- leaves the line in step 2.
local admit, holes, consumed = {}, {}, 0
local expires, rate
if outcome == 'ADMITTED' then
  expires = now + number(meta[3], 'windowSeconds') * 1000
  rate = number(meta[5] or 0, 'admitRate')
  local limit = math.min(want + HOLE_BUDGET, seq - popped)
  while #admit < want and consumed < limit do
    -- Ask for the people still wanted plus as many as the holes seen so far: a line
    -- full of holes is read in growing chunks, not one short LRANGE per person.
    local size = math.min(want - #admit + #holes, limit - consumed)
    local tokens = fetch(popped + consumed + 1, size)
    if #tokens == 0 then break end
    for _, token in ipairs(tokens) do
      consumed = consumed + 1
      local place = popped + consumed
      if redis.call('ZSCORE', KEYS[5], place) then
        holes[#holes + 1] = place
      else
        admit[#admit + 1] = token
        if #admit == want then break end
      end
    end
  end
end

-- 2. Write. Every key below was read above, so none of these can fail.
redis.call('SET', KEYS[8], second)
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local admitted = #admit
if outcome == 'ADMITTED' then
  local from_list = popped + consumed - math.max(popped, drawn)
  if from_list > 0 then redis.call('LTRIM', KEYS[4], from_list, -1) end
  if drawn_left and popped + consumed >= drawn then redis.call('DEL', KEYS[10], KEYS[11]) end
  for _, token in ipairs(admit) do redis.call('ZADD', KEYS[6], expires, token) end
  for _, place in ipairs(holes) do redis.call('ZREM', KEYS[5], place) end
  redis.call('SET', KEYS[3], popped + consumed)

  -- The observed rate feeds each person's estimated wait (smoothed over ~5 ticks).
  local gap = last_tick > 0 and math.min(math.max(second - last_tick, 1), 10) or 1
  local sample = admitted / gap
  if rate == 0 then rate = sample else rate = rate * 0.8 + sample * 0.2 end
  redis.call('HSET', KEYS[1], 'admitRate', string.format('%.3f', rate))
end
redis.call('LPUSH', KEYS[9], second .. ':' .. admitted)
redis.call('LTRIM', KEYS[9], 0, 119)
return {outcome, admitted, waiting - admitted, active + admitted}
