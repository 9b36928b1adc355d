-- Put a drawn pre-queue in place (queue_app/draw.py): the positions and numbers one
-- run of the draw wrote to keys of its own become the line's, and admission may
-- begin. Places 1..drawSize are then the pre-queue in drawn order (lua/admit.lua
-- finds each place's number in KEYS[5], its token in the pre-queue's string); the
-- LIST holds everyone who joined after the start, unchanged. People of the
-- pre-queue who left before now are in `left` by their number; they move to their
-- drawn position.
-- Two runs of the draw compute the same order: the first to get here puts its keys
-- in place, the other's are dropped.
--
-- KEYS[1] meta    HASH    draw, drawSize; draw = DONE is written
-- KEYS[2] runpos  STRING  this run's position of each pre-queue number, 4 bytes each
-- KEYS[3] runnum  STRING  this run's pre-queue number at each position, 4 bytes each
-- KEYS[4] drawpos STRING  the line's (renamed from KEYS[2])
-- KEYS[5] drawnum STRING  the line's (renamed from KEYS[3])
-- KEYS[6] left    ZSET    places of people who left (score = place)
-- KEYS[7] popped  STRING  places taken off the head of the line: 0 until now
-- ARGV[1] drawSize the run drew
--
-- Returns 'DONE', or 'ALREADY' when another run was first (this run's keys deleted).
-- Validates every key and count before its first write.
local meta = redis.call('HMGET', KEYS[1], 'draw', 'drawSize')
if meta[1] == 'DONE' then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 'ALREADY'
end
local size = tonumber(ARGV[1])
if meta[1] ~= 'PENDING' or tonumber(meta[2]) ~= size then error('the pre-queue is not the one drawn') end
if tonumber(redis.call('GET', KEYS[7]) or 0) ~= 0 then error(KEYS[7] .. ' moved before the draw') end
if redis.call('STRLEN', KEYS[2]) ~= size * 4 or redis.call('STRLEN', KEYS[3]) ~= size * 4 then
  error('the run\'s positions are not this draw\'s')
end
redis.call('ZCARD', KEYS[6])
redis.call('STRLEN', KEYS[4])  -- RENAME would replace a key of another type: refused here
redis.call('STRLEN', KEYS[5])

local gone = redis.call('ZRANGEBYSCORE', KEYS[6], 1, size)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], 1, size)
  for _, n in ipairs(gone) do
    local at = tonumber(n) * 4
    local b1, b2, b3, b4 = redis.call('GETRANGE', KEYS[2], at - 4, at - 1):byte(1, 4)
    local place = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
    redis.call('ZADD', KEYS[6], place, tostring(place))
  end
end
if size > 0 then  -- (an empty pre-queue leaves this run nothing to put in place)
  redis.call('RENAME', KEYS[2], KEYS[4])
  redis.call('PERSIST', KEYS[4])
  redis.call('RENAME', KEYS[3], KEYS[5])
  redis.call('PERSIST', KEYS[5])
end
redis.call('HSET', KEYS[1], 'draw', 'DONE')
return 'DONE'
