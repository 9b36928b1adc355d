-- One admission tick for one event: end the windows that have passed, then move
-- up to `admitPerSecond` people from the head of the line into the active window.
--
-- Runs at most once per second of Redis' clock, however many beat or worker
-- processes call it: a second caller in the same second admits nobody. Admits
-- nobody unless the event is OPEN and has seats left, and never beyond the
-- event's cap of people active at once.
--
-- Admitting is moving a counter: the places after `popped` are read off the
-- `left` bitmap, a byte (eight places) at a time, and runs of holes are skipped by
-- BITPOS, so a tick costs O(batch / 8) whatever the line's length and however many
-- left. The admitted range goes into the admission log (`windows`), which is what
-- makes its people active until the window's end; nothing is written per person.
--
-- Reads and validates everything before its first write, then writes: Redis keeps
-- the writes done before an error, so a bad key (of the wrong type, a counter or
-- setting that is not a number) fails the tick with nothing changed.
--
-- KEYS[1] meta    HASH    status, admitPerSecond, windowSeconds, maxActive, draw, opensAt,
--                         drawSize; admitRate is written
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  places already taken off the head of the line
-- KEYS[4] left    STRING  bitmap of the places whose person left
-- KEYS[5] holes   STRING  how many places after `popped` were left
-- KEYS[6] windows ZSET    the admission log: "to:from:end:admitted" scored by `to`
-- KEYS[7] booked  HASH    `to` of a window -> bookings made in it
-- KEYS[8] active  STRING  people in a window not yet passed who have not booked
-- KEYS[9] seats   STRING  seats left
-- KEYS[10] tick   STRING  the last second (Redis clock) a tick ran
-- KEYS[11] log    LIST    "<second>:<admitted>" of the last 120 ticks, newest first
-- ARGV[1] how long before a scheduled start its draw is due (ms)
--
-- An event with a scheduled start admits nobody until its pre-queue is drawn (meta
-- draw = PENDING): NOT_OPEN, then DRAW_DUE from ARGV[1] ms before the start on,
-- which tells the caller to have the draw run (queue_app/draw.py). After the draw,
-- places 1..drawSize are the pre-queue in drawn order; admission reads places and
-- needs nothing else.
--
-- Returns {outcome, admitted, waiting, active}; outcome is ADMITTED, ALREADY_TICKED,
-- NOT_OPEN, DRAW_DUE, SOLD_OUT, EMPTY (nobody waiting), FULL (the active cap is
-- reached) or EVENT_NOT_FOUND.
-- needs: line

-- A last tick more than this many seconds ahead of Redis' clock is not "this second
-- already ticked" but the clock having gone back (a failover to a replica whose
-- clock is behind): waiting for the new clock to catch up would stop admission for
-- as long as the jump. The slack keeps the guard for ordinary skew between beats.
local CLOCK_JUMP_SECONDS = 5
-- Bytes of `left` read per GETRANGE while admitting.
local CHUNK = 512

local function number(value, what)
  local n = tonumber(value)
  if not n then error(what .. ' is not a number') end
  return n
end

-- 1. Read and validate; nothing is written before step 2.
local meta = redis.call('HMGET', KEYS[1], 'status', 'admitPerSecond', 'windowSeconds', 'maxActive',
  'admitRate', 'draw', 'opensAt')
if not meta[1] then return {'EVENT_NOT_FOUND', 0, 0, 0} end

local t = redis.call('TIME')
local second = tonumber(t[1])
local now = second * 1000 + math.floor(tonumber(t[2]) / 1000)
local last_tick = counter(KEYS[10])
if last_tick >= second and last_tick - second <= CLOCK_JUMP_SECONDS then
  return {'ALREADY_TICKED', 0, 0, 0}
end

-- Each key written below is read here with a command that fails on the wrong type.
local seq, popped, holes = counter(KEYS[2]), counter(KEYS[3]), counter(KEYS[5])
local waiting = seq - popped - holes
local active = counter(KEYS[8])
redis.call('STRLEN', KEYS[4])
redis.call('HLEN', KEYS[7])
redis.call('LLEN', KEYS[11])

-- Windows that have passed leave the count of active people. The log is in order
-- of places, which is the order of time: the passed ones are at its start.
local passed = {}
for _, entry in ipairs(redis.call('ZRANGE', KEYS[6], 0, 99)) do
  local to, ends, admitted = entry:match('^(%d+):%d+:(%d+):(%d+)$')
  if not to then error(KEYS[6] .. ' holds an entry that is not to:from:end:admitted') end
  if tonumber(ends) > now then break end
  passed[#passed + 1] = entry
  active = active - tonumber(admitted) + tonumber(redis.call('HGET', KEYS[7], to) or 0)
end
active = math.max(active, 0)

local outcome, want = 'ADMITTED', 0
if meta[6] == 'PENDING' then
  local due = meta[1] ~= 'CLOSED' and now >= number(meta[7], 'opensAt') - number(ARGV[1], 'the lead')
  outcome = due and 'DRAW_DUE' or 'NOT_OPEN'
elseif meta[1] ~= 'OPEN' then
  outcome = 'NOT_OPEN'
elseif counter(KEYS[9]) <= 0 then
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

-- Who is admitted: the first `want` places after `popped` whose bit in `left` is
-- clear, up to `seq`. Holes (set bits) are passed; `last` is the last place passed.
local admitted, passed_holes, last = 0, 0, popped
local window_ms, rate
if outcome == 'ADMITTED' then
  window_ms = number(meta[3], 'windowSeconds') * 1000
  rate = number(meta[5] or 0, 'admitRate')
  while admitted < want and last < seq do
    local first_byte = math.floor((last + 1) / 8)
    local bytes = redis.call('GETRANGE', KEYS[4], first_byte, first_byte + CHUNK - 1)
    for i = 0, CHUNK - 1 do
      local c = bytes:byte(i + 1) or 0
      local base = (first_byte + i) * 8  -- the place of this byte's first bit
      local lo, hi = math.max(last + 1, base), math.min(seq, base + 7)
      if lo > hi then break end
      if c == 0 and hi - lo + 1 <= want - admitted then
        admitted, last = admitted + hi - lo + 1, hi
      elseif c == 255 then
        -- A run of holes: BITPOS finds its end at C speed.
        local clear = redis.call('BITPOS', KEYS[4], 0, first_byte + i)
        local upto = math.min(seq, clear - 1)
        passed_holes, last = passed_holes + upto - lo + 1, upto
        break  -- read on from there
      else
        for p = lo, hi do
          if bit.band(c, 2 ^ (7 - (p - base))) ~= 0 then
            passed_holes = passed_holes + 1
          else
            admitted = admitted + 1
          end
          last = p
          if admitted == want then break end
        end
      end
      if admitted == want or last >= seq then break end
    end
  end
end

-- 2. Write. Every key below was read above, so none of these can fail.
redis.call('SET', KEYS[10], second)
for _, entry in ipairs(passed) do
  redis.call('ZREM', KEYS[6], entry)
  redis.call('HDEL', KEYS[7], entry:match('^(%d+):'))
end
if outcome == 'ADMITTED' then
  if admitted > 0 then
    local ends = now + window_ms
    redis.call('ZADD', KEYS[6], last, last .. ':' .. (popped + 1) .. ':' .. ends .. ':' .. admitted)
  end
  redis.call('SET', KEYS[3], last)
  redis.call('SET', KEYS[5], holes - passed_holes)

  -- The observed rate feeds each person's estimated wait (smoothed over ~5 ticks).
  local gap = last_tick > 0 and math.min(math.max(second - last_tick, 1), 10) or 1
  local sample = admitted / gap
  if rate == 0 then rate = sample else rate = rate * 0.8 + sample * 0.2 end
  redis.call('HSET', KEYS[1], 'admitRate', string.format('%.3f', rate))
end
active = active + admitted
redis.call('SET', KEYS[8], active)
redis.call('LPUSH', KEYS[11], second .. ':' .. admitted)
redis.call('LTRIM', KEYS[11], 0, 119)
return {outcome, admitted, waiting - admitted, active}
