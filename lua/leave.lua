-- Take a waiting token out of the line. Its entry in `line` stays behind as a
-- hole; admission skips it (its place is in `left`).
-- A token's place is the arrival number it carries, or for a number of a drawn
-- pre-queue (meta draw = DONE, numbers 1..drawSize) its drawn position. Before the
-- draw is done, a pre-queue leaver's number goes into `left`; the draw turns it
-- into the position (lua/draw_done.lua).
--
-- KEYS[1] meta    HASH    event status, draw, drawSize
-- KEYS[2] bucket  HASH    token index: token -> its owner (lua/join.lua); in it
--                         means issued and not left
-- KEYS[3] left    ZSET    places of people who left (score = place)
-- KEYS[4] popped  STRING  places already taken off the head of the line
-- KEYS[5] drawpos STRING  drawn positions of the pre-queue's numbers, 4 bytes each
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
local meta = redis.call('HMGET', KEYS[1], 'draw', 'drawSize')
if meta[1] == 'DONE' and place <= tonumber(meta[2]) then
  local p1, p2, p3, p4 = redis.call('GETRANGE', KEYS[5], place * 4 - 4, place * 4 - 1):byte(1, 4)
  if not p4 then error(KEYS[5] .. ' holds no position for ' .. place) end
  place = ((p1 * 256 + p2) * 256 + p3) * 256 + p4
end
if place <= popped then return 0 end  -- admitted already: not waiting

redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], place, tostring(place))
return 1
