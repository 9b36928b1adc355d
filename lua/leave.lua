-- Take a waiting token out of the line. Its entry in `line` stays behind as a
-- hole; admission skips it (the token's state no longer names that number).
--
-- KEYS[1] meta    HASH  event status
-- KEYS[2] bucket  HASH  token -> arrival number (waiting) or 0 (admitted)
-- KEYS[3] left    ZSET  arrival numbers of people who left (score = number)
-- ARGV[1] token, 16 raw bytes
--
-- Returns 1 when removed, 0 when the token was not waiting, -1 for an unknown event.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local state = redis.call('HGET', KEYS[2], ARGV[1])
if not state or state == '0' then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], state, state)
return 1
