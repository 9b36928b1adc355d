-- One admission tick for one event: end the windows that have passed, then move
-- up to `admitPerSecond` people from the head of the line into the active window.
--
-- Runs at most once per second of Redis' clock, however many beat or worker
-- processes call it: a second caller in the same second admits nobody. Admits
-- nobody unless the event is OPEN and has seats left, and never beyond the
-- event's cap of people active at once; on a pass-through event (meta mode), the
-- whole line at once, whatever the cap (lua/join.lua admits there too).
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
-- KEY meta        HASH    status, admitPerSecond, windowSeconds, maxActive, draw, opensAt,
--                         drawSize, mode, claimSeconds; admitRate is written
-- KEY seq         STRING  last arrival number issued
-- KEY popped      STRING  places already taken off the head of the line
-- KEY left        STRING  bitmap of the places whose person left
-- KEY holes       STRING  how many places after `popped` were left
-- KEY windows     ZSET    the admission log: "to:from:end:admitted" scored by `to`
-- KEY per_window  HASH    `to` of a window -> bookings made in it
-- KEY active      STRING  people in a window not yet passed who have not booked
-- KEY seats       STRING  seats left
-- KEY tick        STRING  the last second (Redis clock) a tick ran
-- KEY admit_log   LIST    "<second>:<admitted>" of the last 120 ticks, newest first
-- KEY claims      HASH    per admission log entry (`to`), the time its people must come
--                         back by; ':' and how many did not, once counted
-- KEY claimed     STRING  bitmap of the admitted places that came back
-- ARG lead        how long before a scheduled start its draw is due (ms)
--
-- A claim time (meta claimSeconds > 0; docs/modes.md): the people a tick admits
-- must come back within it (lua/lib/line.lua: claim_of). Once an entry's claim
-- time has passed, the tick counts those who did not and takes them off the active
-- count before it admits, so their slots go to the next people in this same tick.
--
-- An event with a scheduled start admits nobody until its pre-queue is drawn (meta
-- draw = PENDING): NOT_OPEN, then DRAW_DUE from `lead` ms before the start on,
-- which tells the caller to have the draw run (queue_app/draw.py). After the draw,
-- places 1..drawSize are the pre-queue in drawn order; admission reads places and
-- needs nothing else.
--
-- Returns these, in this order (queue_app/admission.py: Tick):
-- REPLY outcome   ADMITTED, ALREADY_TICKED, NOT_OPEN, DRAW_DUE, SOLD_OUT, EMPTY
--                 (nobody waiting), FULL (the active cap is reached) or EVENT_NOT_FOUND
-- REPLY admitted  people admitted by this tick
-- REPLY waiting   people waiting after it (0 when it did not run)
-- REPLY active    people in a window after it (0 when it did not run)
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
local fields = redis.call('HMGET', meta, 'status', 'admitPerSecond', 'windowSeconds', 'maxActive',
  'admitRate', 'draw', 'opensAt', 'mode', 'claimSeconds')
if not fields[1] then return {'EVENT_NOT_FOUND', 0, 0, 0} end

local t = redis.call('TIME')
local second = tonumber(t[1])
local now = second * 1000 + math.floor(tonumber(t[2]) / 1000)
local last_tick = counter(tick)
if last_tick >= second and last_tick - second <= CLOCK_JUMP_SECONDS then
  return {'ALREADY_TICKED', 0, 0, 0}
end

-- Each key written below is read here with a command that fails on the wrong type.
local arrived, head, hole_count = counter(seq), counter(popped), counter(holes)
local waiting = arrived - head - hole_count
local active_count = counter(active)
redis.call('STRLEN', left)
redis.call('HLEN', per_window)
redis.call('LLEN', admit_log)

local claim_ms = number(fields[9] or 0, 'claimSeconds') * 1000
redis.call('HLEN', claims)
redis.call('STRLEN', claimed)

-- Windows that have passed leave the count of active people (less those already
-- taken off as unclaimed). The log is in order of places, which is the order of
-- time: the passed ones are at its start.
local function claim_time(to)
  local deadline = redis.call('HGET', claims, to)
  if not deadline then return nil, 0 end
  local by, gone = deadline:match('^(%d+):?(%d*)$')
  if not by then error(claims .. ' holds a claim time that is not a number') end
  if gone ~= '' then return nil, tonumber(gone) end  -- counted already
  return tonumber(by), 0
end
local passed, counted = {}, {}
for _, entry in ipairs(redis.call('ZRANGE', windows, 0, 99)) do
  local to, ends, admitted = entry:match('^(%d+):%d+:(%d+):(%d+)$')
  if not to then error(windows .. ' holds an entry that is not to:from:end:admitted') end
  if tonumber(ends) > now then break end
  passed[#passed + 1] = entry
  local _, unclaimed = claim_time(to)
  active_count = active_count - tonumber(admitted) + tonumber(redis.call('HGET', per_window, to) or 0)
    + unclaimed
end
-- Then the windows whose claim time has passed since the last count (claims' field
-- `upto`: the last entry counted) give back the slots of those who did not come back.
local was_upto = redis.call('HGET', claims, 'upto') or '0'
if not tonumber(was_upto) then error(claims .. ': upto is not a number') end
local upto = was_upto
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', windows, '(' .. upto, '+inf', 'LIMIT', 0, 100)) do
  local to, from, ends, admitted = entry:match('^(%d+):(%d+):(%d+):(%d+)$')
  if not to then error(windows .. ' holds an entry that is not to:from:end:admitted') end
  local by = claim_time(to)
  if by and by >= now then break end  -- its claim time is on, and so is every later one's
  if by and tonumber(ends) > now then
    local unclaimed = tonumber(admitted) - ones(claimed, tonumber(from), tonumber(to))
    counted[#counted + 1] = {to, by .. ':' .. unclaimed}
    active_count = active_count - unclaimed
  end
  upto = to
end
active_count = math.max(active_count, 0)

local outcome, want = 'ADMITTED', 0
if fields[6] == 'PENDING' then
  local due = fields[1] ~= 'CLOSED' and now >= number(fields[7], 'opensAt') - number(lead, 'the lead')
  outcome = due and 'DRAW_DUE' or 'NOT_OPEN'
elseif fields[1] ~= 'OPEN' then
  outcome = 'NOT_OPEN'
elseif counter(seats) <= 0 then
  outcome = 'SOLD_OUT'
else
  want = number(fields[2], 'admitPerSecond')
  local cap = number(fields[4] or 0, 'maxActive')
  if fields[8] == 'pass-through' then
    want = math.max(waiting, 0)
  elseif cap > 0 then
    want = math.min(want, cap - active_count)
  end
  if waiting <= 0 then
    outcome = 'EMPTY'
  elseif want <= 0 then
    outcome = 'FULL'
  end
end

-- Who is admitted: the first `want` places after `head` whose bit in `left` is
-- clear, up to `arrived`. Holes (set bits) are passed; `last` is the last place passed.
local admitted, passed_holes, last = 0, 0, head
local window_ms, rate
if outcome == 'ADMITTED' then
  window_ms = number(fields[3], 'windowSeconds') * 1000
  rate = number(fields[5] or 0, 'admitRate')
  while admitted < want and last < arrived do
    local first_byte = math.floor((last + 1) / 8)
    local bytes = redis.call('GETRANGE', left, first_byte, first_byte + CHUNK - 1)
    for i = 0, CHUNK - 1 do
      local c = bytes:byte(i + 1) or 0
      local base = (first_byte + i) * 8  -- the place of this byte's first bit
      local lo, hi = math.max(last + 1, base), math.min(arrived, base + 7)
      if lo > hi then break end
      if c == 0 and hi - lo + 1 <= want - admitted then
        admitted, last = admitted + hi - lo + 1, hi
      elseif c == 255 then
        -- A run of holes: BITPOS finds its end at C speed.
        local clear = redis.call('BITPOS', left, 0, first_byte + i)
        local upto = math.min(arrived, clear - 1)
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
      if admitted == want or last >= arrived then break end
    end
  end
end

-- 2. Write. Every key below was read above, so none of these can fail.
redis.call('SET', tick, second)
for _, entry in ipairs(passed) do
  redis.call('ZREM', windows, entry)
  redis.call('HDEL', per_window, entry:match('^(%d+):'))
  redis.call('HDEL', claims, entry:match('^(%d+):'))
end
for _, count in ipairs(counted) do redis.call('HSET', claims, count[1], count[2]) end
if upto ~= was_upto then redis.call('HSET', claims, 'upto', upto) end
if outcome == 'ADMITTED' then
  if admitted > 0 then
    local ends = now + window_ms
    redis.call('ZADD', windows, last, last .. ':' .. (head + 1) .. ':' .. ends .. ':' .. admitted)
    if claim_ms > 0 then redis.call('HSET', claims, last, now + claim_ms) end
  end
  redis.call('SET', popped, last)
  redis.call('SET', holes, hole_count - passed_holes)

  -- The observed rate feeds each person's estimated wait (smoothed over ~5 ticks).
  local gap = last_tick > 0 and math.min(math.max(second - last_tick, 1), 10) or 1
  local sample = admitted / gap
  if rate == 0 then rate = sample else rate = rate * 0.8 + sample * 0.2 end
  redis.call('HSET', meta, 'admitRate', string.format('%.3f', rate))
end
active_count = active_count + admitted
redis.call('SET', active, active_count)
redis.call('LPUSH', admit_log, second .. ':' .. admitted)
redis.call('LTRIM', admit_log, 0, 119)
return {outcome, admitted, waiting - admitted, active_count}
