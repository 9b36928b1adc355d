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
--                         drawSize, mode, claimSeconds, priorityShare; admitRate,
--                         laneRate and laneCarry are written
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
-- KEY blocks      ZSET    the blocks of arrival numbers out (lua/block.lua): "first:last:until"
--                         scored by first
-- KEY lane_seq    STRING  the priority lane's `seq`; and its other keys of a line, as the
-- KEY lane_popped STRING  general line's of the same name (without lane_) are
-- KEY lane_left   STRING
-- KEY lane_holes  STRING
-- KEY lane_windows ZSET
-- KEY lane_per_window HASH
-- KEY lane_claims HASH
-- KEY lane_claimed STRING
-- ARG lead        how long before a scheduled start its draw is due (ms)
-- ARG lost_claim_ms  how long the people of a lost block have to come back (ms), on an
--                 event without a claim time of its own
--
-- A claim time (meta claimSeconds > 0; docs/modes.md): the people a tick admits
-- must come back within it (lua/lib/line.lua: claim_of). Once an entry's claim
-- time has passed, the tick counts those who did not and takes them off the active
-- count before it admits, so their slots go to the next people in this same tick.
--
-- The priority lane (meta priorityShare, a percentage; lua/join.lua says who joins
-- it) is a second line, admitted from first, in the same tick: up to its share of
-- the second's admissions, more only when the general line has nobody waiting, so
-- the general line always gets the rest. A share that is a fraction of a person
-- (30 % of 1 a second) is carried from tick to tick (meta laneCarry, in hundredths
-- of a person): over any ten ticks the lane gets 3 and the general line 7. Both
-- lines' admissions count against the one
-- active cap; each line keeps its own admission log, claims and observed rate
-- (admitRate: the general line's, laneRate: the lane's).
--
-- Nobody is admitted from a block of arrival numbers still out on (lua/block.lua):
-- its web process may not have handed them all out yet, and a number admitted before
-- its person came would be a slot given to nobody. A block past its time was never
-- given back (its process was killed): a lost block. Its numbers are admitted in
-- their turn, in an admission log entry of their own whose people must come back
-- within a claim time (`lost_claim_ms`, or the event's own claim time), as on an
-- event with a claim time: those who hold a token come back and keep their turn, and
-- the slots of the numbers nobody was handed go to the next people once it is over.
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
-- REPLY waiting   people waiting after it, in both lines (0 when it did not run)
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
  'admitRate', 'draw', 'opensAt', 'mode', 'claimSeconds', 'priorityShare', 'laneRate', 'laneCarry')
if not fields[1] then return {'EVENT_NOT_FOUND', 0, 0, 0} end

local t = redis.call('TIME')
local second = tonumber(t[1])
local now = second * 1000 + math.floor(tonumber(t[2]) / 1000)
local last_tick = counter(tick)
if last_tick >= second and last_tick - second <= CLOCK_JUMP_SECONDS then
  return {'ALREADY_TICKED', 0, 0, 0}
end

local general = {seq = seq, popped = popped, left = left, holes = holes, windows = windows,
  per_window = per_window, claims = claims, claimed = claimed, rate_field = 'admitRate', rate = fields[5]}
local priority = {seq = lane_seq, popped = lane_popped, left = lane_left, holes = lane_holes,
  windows = lane_windows, per_window = lane_per_window, claims = lane_claims, claimed = lane_claimed,
  rate_field = 'laneRate', rate = fields[11]}
local lines = {priority, general}

-- Each key written below is read here with a command that fails on the wrong type.
local active_count = counter(active)
for _, L in ipairs(lines) do
  L.arrived, L.head, L.hole_count = counter(L.seq), counter(L.popped), counter(L.holes)
  L.waiting = L.arrived - L.head - L.hole_count
  redis.call('STRLEN', L.left)
  redis.call('HLEN', L.per_window)
  redis.call('HLEN', L.claims)
  redis.call('STRLEN', L.claimed)
end
redis.call('LLEN', admit_log)

-- The first block of arrival numbers still out, and the lost ones before it.
local BLOCKS_READ = 100
local out = redis.call('ZRANGE', blocks, 0, BLOCKS_READ - 1)
general.admittable, general.lost, priority.lost = general.arrived, {}, {}
for i, block in ipairs(out) do
  local first, last, ends = block:match('^(%d+):(%d+):(%d+)$')
  if not first then error(blocks .. ' holds a block that is not first:last:until') end
  if tonumber(ends) > now or i == BLOCKS_READ then
    general.admittable = math.min(general.arrived, tonumber(first) - 1)
    break
  end
  general.lost[#general.lost + 1] = {member = block, first = tonumber(first), last = tonumber(last)}
end
priority.admittable = priority.arrived

local claim_ms = number(fields[9] or 0, 'claimSeconds') * 1000
number(lost_claim_ms, 'lost_claim_ms')
local share = number(fields[10] or 0, 'priorityShare')  -- percent
local carry = number(fields[12] or 0, 'laneCarry')  -- hundredths of a person

-- Windows that have passed leave the count of active people (less those already
-- taken off as unclaimed). The log is in order of places, which is the order of
-- time: the passed ones are at its start.
local function claim_time(L, to)
  local by, gone = claim_deadline(L.claims, to)
  if gone then return nil, gone end  -- counted already
  return by, 0
end
for _, L in ipairs(lines) do
  L.passed, L.counted = {}, {}
  for _, entry in ipairs(redis.call('ZRANGE', L.windows, 0, 99)) do
    local to, ends, admitted = entry:match('^(%d+):%d+:(%d+):(%d+)$')
    if not to then error(L.windows .. ' holds an entry that is not to:from:end:admitted') end
    if tonumber(ends) > now then break end
    L.passed[#L.passed + 1] = entry
    local _, unclaimed = claim_time(L, to)
    active_count = active_count - tonumber(admitted) + tonumber(redis.call('HGET', L.per_window, to) or 0)
      + unclaimed
  end
  -- Then the windows whose claim time has passed since the last count (claims' field
  -- `upto`: the last entry counted) give back the slots of those who did not come back.
  L.was_upto = redis.call('HGET', L.claims, 'upto') or '0'
  if not tonumber(L.was_upto) then error(L.claims .. ': upto is not a number') end
  L.upto = L.was_upto
  for _, entry in ipairs(redis.call('ZRANGEBYSCORE', L.windows, '(' .. L.upto, '+inf', 'LIMIT', 0, 100)) do
    local to, from, ends, admitted = entry:match('^(%d+):(%d+):(%d+):(%d+)$')
    if not to then error(L.windows .. ' holds an entry that is not to:from:end:admitted') end
    local by = claim_time(L, to)
    if by and by >= now then break end  -- its claim time is on, and so is every later one's
    if by and tonumber(ends) > now then
      local unclaimed = tonumber(admitted) - ones(L.claimed, tonumber(from), tonumber(to))
      L.counted[#L.counted + 1] = {to, by .. ':' .. unclaimed}
      active_count = active_count - unclaimed
    end
    L.upto = to
  end
end
active_count = math.max(active_count, 0)
local waiting = priority.waiting + general.waiting

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

-- Who is admitted from a line: the first `want` places after `last` whose bit in
-- `left` is clear, up to `arrived`. Holes (set bits) are passed. Returns how many
-- were admitted, how many holes passed, and the last place passed.
local function scan(L, want, last, arrived)
  local admitted, passed_holes = 0, 0
  while admitted < want and last < arrived do
    local first_byte = math.floor((last + 1) / 8)
    local bytes = redis.call('GETRANGE', L.left, first_byte, first_byte + CHUNK - 1)
    for i = 0, CHUNK - 1 do
      local c = bytes:byte(i + 1) or 0
      local base = (first_byte + i) * 8  -- the place of this byte's first bit
      local lo, hi = math.max(last + 1, base), math.min(arrived, base + 7)
      if lo > hi then break end
      if c == 0 and hi - lo + 1 <= want - admitted then
        admitted, last = admitted + hi - lo + 1, hi
      elseif c == 255 then
        -- A run of holes: BITPOS finds its end at C speed.
        local clear = redis.call('BITPOS', L.left, 0, first_byte + i)
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
  return admitted, passed_holes, last
end

-- Who is admitted from a line, up to L.admittable: its admission log entries
-- (L.entries), one for each stretch that is, or is not, of a lost block (L.lost), so
-- that only a lost block's places get its claim time. L.last is the last place passed.
local function take(L, want)
  local admitted, passed_holes, last = 0, 0, L.head
  L.entries = {}
  while admitted < want and last < L.admittable do
    local upto, lost_block = L.admittable, false
    for _, b in ipairs(L.lost) do
      if b.last > last then
        if b.first <= last + 1 then upto, lost_block = math.min(b.last, upto), true
        else upto = math.min(b.first - 1, upto) end
        break
      end
    end
    local got, passed, reached = scan(L, want - admitted, last, upto)
    if got > 0 then
      L.entries[#L.entries + 1] = {from = last + 1, to = reached, admitted = got, lost = lost_block}
    end
    admitted, passed_holes, last = admitted + got, passed_holes + passed, reached
    if reached < upto then break end
  end
  L.admitted, L.passed_holes, L.last = admitted, passed_holes, last
  return admitted
end

local window_ms
if outcome == 'ADMITTED' then
  window_ms = number(fields[3], 'windowSeconds') * 1000
  number(fields[5] or 0, 'admitRate')
  number(fields[11] or 0, 'laneRate')
  -- The lane's part of this second: its share, or all of it while the general line
  -- has nobody waiting; the general line takes what the lane leaves.
  local lane_want = 0
  if share > 0 then
    if general.waiting <= 0 or fields[8] == 'pass-through' then
      lane_want = want
    elseif priority.waiting > 0 then
      -- What the lane is owed this tick, in hundredths of a person.
      local owed = carry + math.min(want, number(fields[2], 'admitPerSecond')) * share
      lane_want = math.floor(owed / 100)
      carry = owed - lane_want * 100
    end
    lane_want = math.min(lane_want, want)
  end
  take(general, want - take(priority, lane_want))
end

-- 2. Write. Every key below was read above, so none of these can fail.
redis.call('SET', tick, second)
-- A lost block the head has passed is done with.
for _, b in ipairs(general.lost) do
  if outcome == 'ADMITTED' and b.last <= general.last or b.last <= general.head then
    redis.call('ZREM', blocks, b.member)
  end
end
local admitted = 0
for _, L in ipairs(lines) do
  for _, entry in ipairs(L.passed) do
    redis.call('ZREM', L.windows, entry)
    redis.call('HDEL', L.per_window, entry:match('^(%d+):'))
    redis.call('HDEL', L.claims, entry:match('^(%d+):'))
  end
  for _, count in ipairs(L.counted) do redis.call('HSET', L.claims, count[1], count[2]) end
  if L.upto ~= L.was_upto then redis.call('HSET', L.claims, 'upto', L.upto) end
  if outcome == 'ADMITTED' and (L.arrived > 0 or L == general) then
    local ends = now + window_ms
    local claim_by = claim_ms > 0 and now + claim_ms or nil
    for _, e in ipairs(L.entries) do
      local by = claim_by
      if e.lost then by = claim_by or now + tonumber(lost_claim_ms) end
      log_admission(L.windows, L.claims, e.to, e.from, ends, e.admitted, by)
    end
    redis.call('SET', L.popped, L.last)
    redis.call('SET', L.holes, L.hole_count - L.passed_holes)

    -- The observed rate feeds each person's estimated wait (smoothed over ~5 ticks).
    local rate = tonumber(L.rate or 0)
    local gap = last_tick > 0 and math.min(math.max(second - last_tick, 1), 10) or 1
    local sample = L.admitted / gap
    if rate == 0 then rate = sample else rate = rate * 0.8 + sample * 0.2 end
    redis.call('HSET', meta, L.rate_field, string.format('%.3f', rate))
    admitted = admitted + L.admitted
  end
end
if share > 0 then redis.call('HSET', meta, 'laneCarry', carry) end
active_count = active_count + admitted
redis.call('SET', active, active_count)
redis.call('LPUSH', admit_log, second .. ':' .. admitted)
redis.call('LTRIM', admit_log, 0, 119)
return {outcome, admitted, waiting - admitted, active_count}
