-- Take a waiting token out of the line. Its entry in `line` stays behind as a
-- hole; admission skips it (its number is in `left`).
--
-- KEYS[1] meta    HASH    event status
-- KEYS[2] bucket  HASH    token index: token -> its owner (lua/join.lua); in it
--                         means issued and not left
-- KEYS[3] left    ZSET    arrival numbers of people who left (score = number)
-- KEYS[4] popped  STRING  arrival numbers already taken off the head of the line
-- ARGV[1] token, 16 raw bytes
--
-- Returns 1 when removed, 0 when the token was not waiting, -1 for an unknown event.
-- Validates every key and value before its first write (Redis keeps the writes done
-- before an error): a bad key fails the script with nothing changed.
if redis.call('HLEN', KEYS[1]) == 0 then return -1 end  -- HLEN: meta must be a hash
if not redis.call('HGET', KEYS[2], ARGV[1]) then return 0 end
-- ZADD refuses a `left` that is not a zset: after HDEL, the token would be out of
-- its bucket and its hole never counted.
redis.call('ZCARD', KEYS[3])
local popped = tonumber(redis.call('GET', KEYS[4]) or 0)
if not popped then error(KEYS[4] .. ' is not a number') end
-- The arrival number the token carries (bytes 10-14; queue_app/tokens.py).
local b1, b2, b3, b4, b5 = ARGV[1]:byte(10, 14)
local place = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
if place <= popped then return 0 end  -- admitted already: not waiting

redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], place, tostring(place))
return 1
