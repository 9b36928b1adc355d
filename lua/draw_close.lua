-- Close an event's pre-queue once its scheduled start has passed: the numbers issued
-- so far (1..drawSize) are the pre-queue that is drawn (queue_app/draw.py); every
-- join from now on takes a number behind them. A join after the start closes it the
-- same way (lua/join.lua), whichever comes first; closing twice keeps the first size.
--
-- KEYS[1] meta    HASH    draw, opensAt; drawSize is written
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  places already taken off the head of the line (0 until the
--                         draw is done: nothing is admitted or compacted before it)
-- KEYS[4] pre     STRING  the pre-queue's tokens, 16 bytes each (lua/join.lua)
--
-- Returns {'CLOSED', drawSize}, {'NOT_DUE', opensAt}, {'DONE', drawSize} (drawn
-- before), {'NO_DRAW'} (no scheduled start) or {'EVENT_NOT_FOUND'}.
-- Validates every key before its first write.
local meta = redis.call('HMGET', KEYS[1], 'status', 'draw', 'opensAt', 'drawSize')
if not meta[1] then return {'EVENT_NOT_FOUND'} end
if meta[2] == 'DONE' then return {'DONE', tonumber(meta[4])} end
if meta[2] ~= 'PENDING' then return {'NO_DRAW'} end
local opens = tonumber(meta[3])
if not opens then error(KEYS[1] .. ': opensAt is not a number') end
local popped = tonumber(redis.call('GET', KEYS[3]) or 0)
if popped ~= 0 then error(KEYS[3] .. ' moved before the draw') end
local size = tonumber(meta[4] or '')
if not size then
  local t = redis.call('TIME')
  if t[1] * 1000 + math.floor(t[2] / 1000) < opens then return {'NOT_DUE', opens} end
  size = tonumber(redis.call('GET', KEYS[2]) or 0)
  if not size then error(KEYS[2] .. ' is not a number') end
  if redis.call('STRLEN', KEYS[4]) ~= size * 16 then error(KEYS[4] .. ' is not the pre-queue') end
  redis.call('HSET', KEYS[1], 'drawSize', size)
end
if redis.call('STRLEN', KEYS[4]) ~= size * 16 then error(KEYS[4] .. ' is not the pre-queue') end
return {'CLOSED', size}
