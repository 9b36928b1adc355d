-- Take a waiting token out of the line. Its entry in `line` stays behind as a
-- hole; admission skips it (its number is in `left`).
--
-- KEYS[1] meta    HASH    event status
-- KEYS[2] bucket  HASH    token -> arrival number (taken off the head once <= popped)
-- KEYS[3] left    ZSET    arrival numbers of people who left (score = number)
-- KEYS[4] popped  STRING  arrival numbers already taken off the head of the line
-- ARGV[1] token, 16 raw bytes
--
-- Returns 1 when removed, 0 when the token was not waiting, -1 for an unknown event.
-- Validates every key and value before its first write (Redis keeps the writes done
-- before an error): a bad key fails the script with nothing changed.
if redis.call('HLEN', KEYS[1]) == 0 then return -1 end  -- HLEN: meta must be a hash
local state = redis.call('HGET', KEYS[2], ARGV[1])
if not state then return 0 end
-- ZADD refuses a `left` that is not a zset and a place that is not a number: after
-- HDEL, the token would be out of its bucket and its hole never counted.
redis.call('ZCARD', KEYS[3])
if not tonumber(state) then error(KEYS[2] .. ': the place is not a number') end
local popped = tonumber(redis.call('GET', KEYS[4]) or 0)
if not popped then error(KEYS[4] .. ' is not a number') end
if tonumber(state) <= popped then return 0 end  -- admitted already: not waiting

redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], state, state)
return 1
