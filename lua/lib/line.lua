-- The line's shared reading, prepended to each script that says `-- needs: line`
-- (ticketing/store/scripts.py). Nothing here touches a key it is not handed: the scripts
-- pass their keys in.
--
-- The line is counters, with nothing kept per waiting person (docs/line.md):
--   seq      the last arrival number issued; a token carries its number
--   nonces   the two random bytes of each number's token, 2 bytes a number: the
--            one thing kept per person, so that a token is only taken for its
--            place if that place was issued to it (after Redis comes back from an
--            older snapshot, a number may be issued again, to another token)
--   popped   places taken off the head: place p is admitted (or passed, as a hole)
--            once p <= popped
--   left     a bitmap by place: bit p set = the person at place p left
--   holes    how many of the places after `popped` left
--   windows  the admission log, a ZSET: member "to:from:end:admitted" scored by
--            `to`, one per tick that admitted anyone (places from..to, their active
--            window ending at `end` ms)
--   booked places  a bitmap by place: bit p set = the token at place p booked
--            (whether or not the booking was cancelled since): no longer active
--   claims   on an event with a claim time (meta claimSeconds; docs/modes.md): per
--            admission log entry, by its `to`, the time (ms) its people must come
--            back by, "<ms>", then "<ms>:<unclaimed>" once the tick has counted
--            those who did not and given their slots to the next people
--   claimed  a bitmap by place: bit p set = the person at place p came back after
--            admission (a poll, the booking page, a rejoin, a booking)
-- A place is the arrival number, except for the numbers of a drawn pre-queue (meta
-- draw = DONE, numbers 1..drawSize), whose place is their drawn position.

-- The line's generation, kept in meta as 4 hex digits, as the 2 bytes a token of
-- the line begins with (queue_app/tokens.py).
local function generation(hex)
  if not hex or not hex:match('^%x%x%x%x$') then error('meta gen is not 4 hex digits') end
  return (hex:gsub('..', function(h) return string.char(tonumber(h, 16)) end))
end

-- The arrival number a token carries (bytes 10-14; queue_app/tokens.py).
local function number_of(token)
  local b1, b2, b3, b4, b5 = token:byte(10, 14)
  return (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
end

-- Whether this line issued the token: its generation, and the random bytes kept
-- for its number.
local function issued(nonces, gen, token, n)
  return token:sub(1, 2) == gen and redis.call('GETRANGE', nonces, n * 2 - 2, n * 2 - 1) == token:sub(3, 4)
end

-- A counter kept as a string: absent is 0, anything but a number is an error.
local function counter(key)
  local n = tonumber(redis.call('GET', key) or 0)
  if not n then error(key .. ' is not a number') end
  return n
end

-- Redis' clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- A drawn pre-queue number's position: 4 bytes big-endian at (n - 1) * 4 of drawpos.
local function drawn_place(drawpos, n)
  local b1, b2, b3, b4 = redis.call('GETRANGE', drawpos, n * 4 - 4, n * 4 - 1):byte(1, 4)
  if not b4 then error(drawpos .. ' holds no position for ' .. n) end
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end

-- A leavers' log entry (queue_app/line.py reads them): the place, 5 bytes big-endian
-- (a pre-queue number carries 2^39 on top: lua/leave.lua).
local function log_entry(p)
  return string.char(math.floor(p / 4294967296) % 256, math.floor(p / 16777216) % 256,
    math.floor(p / 65536) % 256, math.floor(p / 256) % 256, p % 256)
end

-- Whether bit p of a bitmap is set (GETBIT refuses a key that is not a string).
local function is_set(bitmap, p)
  return redis.call('GETBIT', bitmap, p) == 1
end

-- How many bits are set among places a..b of a bitmap: BITCOUNT over whole bytes
-- (byte ranges, which Redis 6 knows), the edges bit by bit.
local function ones(bitmap, a, b)
  if a > b then return 0 end
  local first, last = math.floor(a / 8), math.floor(b / 8)
  local function edge(byte, lo, hi)
    local c = redis.call('GETRANGE', bitmap, byte, byte):byte(1) or 0
    local n = 0
    for k = lo, hi do
      if bit.band(c, 2 ^ (7 - k)) ~= 0 then n = n + 1 end
    end
    return n
  end
  if first == last then return edge(first, a % 8, b % 8) end
  local n = edge(first, a % 8, 7) + edge(last, 0, b % 8)
  if first + 1 <= last - 1 then n = n + redis.call('BITCOUNT', bitmap, first + 1, last - 1) end
  return n
end

-- The admission log's entry that admitted place p, as (end ms, to), or nil when no
-- entry kept holds it (its window ended and the tick dropped it, or p was passed as
-- a hole).
local function window_of(windows, p)
  local entry = redis.call('ZRANGEBYSCORE', windows, p, '+inf', 'LIMIT', 0, 1)[1]
  if not entry then return nil end
  local to, from, ends = entry:match('^(%d+):(%d+):(%d+):')
  if not to then error(windows .. ' holds an entry that is not to:from:end:admitted') end
  if tonumber(from) > p then return nil end
  return tonumber(ends), to
end

-- Write an admission log entry: places from..to admitted, their window ending at
-- `ends` (ms), and, with a claim time, when they must come back by (`claim_by` ms, or
-- nil). The one writer of the entry's form, for the tick and the join that admits.
local function log_admission(windows, claims, to, from, ends, admitted, claim_by)
  redis.call('ZADD', windows, to, to .. ':' .. from .. ':' .. ends .. ':' .. admitted)
  if claim_by then redis.call('HSET', claims, to, claim_by) end
end

-- The claim time of the log entry `to` (docs/modes.md), as `claims` keeps it:
-- "<ms>", then "<ms>:<unclaimed>" once the tick has counted those who did not come
-- back. Returns the time (ms) and the count, nil while not counted; nothing at all
-- when no claim time applies. The one reader of that form.
local function claim_deadline(claims, to)
  local deadline = redis.call('HGET', claims, to)
  if not deadline then return nil end
  local by, gone = deadline:match('^(%d+):?(%d*)$')
  if not by then error(claims .. ' holds a claim time that is not a number') end
  return tonumber(by), gone ~= '' and tonumber(gone) or nil
end

-- An admitted place's claim (docs/modes.md), given the log entry `to` that admitted
-- it: 'CLAIMED' when it came back or no claim time applies, 'CLAIM' when it comes
-- back now, in time (the caller sets its bit of `claimed`), 'PASSED' when its claim
-- time ran out before it came back: its slot went to the next person.
local function claim_of(claims, claimed, to, p, now)
  local by, gone = claim_deadline(claims, to)
  if not by or is_set(claimed, p) then return 'CLAIMED' end
  if not gone and now <= by then return 'CLAIM' end
  return 'PASSED'
end

-- A late person's grace (meta claimGrace = '1'; docs/modes.md): coming back after
-- the claim time, while the window lasts, they take their turn again if the active
-- cap has room (`cap` 0: no cap). One not counted away yet simply claims; one the
-- tick counted away comes back into the active count, and out of the entry's
-- count of those who did not come back. True when the turn is theirs again.
local function claim_regain(claims, claimed, active, to, p, cap)
  local by, gone = claim_deadline(claims, to)
  local count = counter(active)
  if gone and cap > 0 and count >= cap then return false end
  redis.call('SETBIT', claimed, p, 1)
  if gone then
    redis.call('SET', active, count + 1)
    redis.call('HSET', claims, to, by .. ':' .. math.max(gone - 1, 0))
  end
  return true
end
