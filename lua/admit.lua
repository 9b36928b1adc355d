-- One admission tick for one event: end the windows that have passed, then move
-- up to `admitPerSecond` people from the head of the line into the active window.
--
-- Runs at most once per second of Redis' clock, however many beat or worker
-- processes call it: a second caller in the same second admits nobody. Admits
-- nobody unless the event is OPEN and has seats left, and never beyond the
-- event's cap of people active at once. O(batch) work, whatever the line's length.
--
-- KEYS[1] meta    HASH    status, admitPerSecond, windowSeconds, maxActive; admitRate is written
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  arrival numbers already taken off the head of the line
-- KEYS[4] line    LIST    tokens (16 raw bytes) in arrival order
-- KEYS[5] left    ZSET    arrival numbers of people who left the line
-- KEYS[6] active  ZSET    token -> end of its active window (ms)
-- KEYS[7] seats   STRING  seats left
-- KEYS[8] tick    STRING  the last second (Redis clock) a tick ran
-- KEYS[9] log     LIST    "<second>:<admitted>" of the last 120 ticks, newest first
-- ARGV[1] prefix of the token-index hashes, "ticket:{<eventId>}:tokens:"
--
-- Returns {outcome, admitted, waiting, active}; outcome is ADMITTED, ALREADY_TICKED,
-- NOT_OPEN, SOLD_OUT, EMPTY (nobody waiting), FULL (the active cap is reached) or
-- EVENT_NOT_FOUND.
local meta = redis.call('HMGET', KEYS[1], 'status', 'admitPerSecond', 'windowSeconds', 'maxActive',
  'admitRate')
if not meta[1] then return {'EVENT_NOT_FOUND', 0, 0, 0} end

local t = redis.call('TIME')
local second = tonumber(t[1])
local now = second * 1000 + math.floor(tonumber(t[2]) / 1000)
local last_tick = tonumber(redis.call('GET', KEYS[8]) or 0)
if last_tick >= second then return {'ALREADY_TICKED', 0, 0, 0} end
redis.call('SET', KEYS[8], second)

redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local active = redis.call('ZCARD', KEYS[6])
local seq = tonumber(redis.call('GET', KEYS[2]) or 0)
local popped = tonumber(redis.call('GET', KEYS[3]) or 0)
local waiting = seq - popped - redis.call('ZCARD', KEYS[5])

local function done(outcome, admitted)
  redis.call('LPUSH', KEYS[9], second .. ':' .. admitted)
  redis.call('LTRIM', KEYS[9], 0, 119)
  return {outcome, admitted, waiting - admitted, active + admitted}
end

if meta[1] ~= 'OPEN' then return done('NOT_OPEN', 0) end
if tonumber(redis.call('GET', KEYS[7]) or 0) <= 0 then return done('SOLD_OUT', 0) end
local want = tonumber(meta[2])
local cap = tonumber(meta[4] or 0)
if cap > 0 then want = math.min(want, cap - active) end
if waiting <= 0 then return done('EMPTY', 0) end
if want <= 0 then return done('FULL', 0) end

local expires = now + tonumber(meta[3]) * 1000
local admitted = 0
-- Holes (people who left) are skipped; bound the skipping so one tick stays short.
local budget = want + 10000
while admitted < want and popped < seq and budget > 0 do
  local tokens = redis.call('LPOP', KEYS[4], math.min(want - admitted, seq - popped))
  if not tokens then break end
  for _, token in ipairs(tokens) do
    popped = popped + 1
    local bucket = ARGV[1] .. string.format('%02x%02x', token:byte(1), token:byte(2))
    if redis.call('HGET', bucket, token) == tostring(popped) then
      redis.call('HSET', bucket, token, 0)
      redis.call('ZADD', KEYS[6], expires, token)
      admitted = admitted + 1
    else
      redis.call('ZREM', KEYS[5], popped)
    end
  end
  budget = budget - #tokens
end
redis.call('SET', KEYS[3], popped)

-- The observed rate feeds each person's estimated wait (smoothed over ~5 ticks).
local gap = last_tick > 0 and math.min(math.max(second - last_tick, 1), 10) or 1
local rate = tonumber(meta[5] or 0)
local sample = admitted / gap
if rate == 0 then rate = sample else rate = rate * 0.8 + sample * 0.2 end
redis.call('HSET', KEYS[1], 'admitRate', string.format('%.3f', rate))
return done('ADMITTED', admitted)
