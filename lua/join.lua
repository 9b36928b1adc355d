-- Give a token its place at the back of the waiting line, unless it has one.
-- join passes a fresh token; rejoin passes the token the client kept, so F5
-- keeps the place and an expired or unknown token goes to the back.
-- Arrival order is one counter (KEYS[2]) and Redis' own clock: no app server's
-- wall clock takes part, and two arrivals never share a number.
--
-- KEYS[1] meta    HASH    event status
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] line    LIST    tokens in arrival order
-- KEYS[4] bucket  HASH    token -> arrival number (taken off the head once <= popped)
-- KEYS[5] active  ZSET    token -> end of its active window (ms)
-- KEYS[6] booked  STRING  reservation id, once this token has booked
-- KEYS[7] popped  STRING  arrival numbers already taken off the head of the line
-- ARGV[1] token, 16 raw bytes
--
-- Returns {outcome, joinedAtMs, reservationId}; outcome is one of
-- JOINED, WAITING, ACTIVE, ALREADY_BOOKED, EVENT_NOT_FOUND, EVENT_CLOSED.
-- Validates every key before its first write (Redis keeps the writes done before an
-- error): a bad key fails the script with nothing changed.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {'EVENT_NOT_FOUND'} end
local booked = redis.call('GET', KEYS[6])
if booked then return {'ALREADY_BOOKED', 0, booked} end
if status == 'CLOSED' then return {'EVENT_CLOSED'} end

local popped = tonumber(redis.call('GET', KEYS[7]) or 0)
if not popped then error(KEYS[7] .. ' is not a number') end
local state = redis.call('HGET', KEYS[4], ARGV[1])
if state then
  local number = tonumber(state)
  if not number then error(KEYS[4] .. ': the place is not a number') end
  if number > popped then return {'WAITING', 0} end
end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expires = redis.call('ZSCORE', KEYS[5], ARGV[1])
if expires and tonumber(expires) > now then return {'ACTIVE', 0} end

-- The keys about to be written, checked first: RPUSH into a line that is not a list
-- would fail after INCR, leaving a number issued to nobody. The pattern is INCR's
-- own rule (an integer without leading zeros), kept short of overflowing.
local last = redis.call('GET', KEYS[2])
if last and not (last == '0' or (#last <= 18 and last:match('^%-?[1-9]%d*$'))) then
  error(KEYS[2] .. ' is not an integer')
end
redis.call('LLEN', KEYS[3])

local seq = redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], seq)
return {'JOINED', now}
