-- Close an event's pre-queue once its scheduled start has passed: the numbers issued
-- so far (1..drawSize) are the pre-queue that is drawn (queue_app/draw.py); every
-- join from now on takes a number behind them. A join after the start closes it the
-- same way (lua/join.lua), whichever comes first; closing twice keeps the first size.
--
-- KEY meta        HASH    draw, opensAt; drawSize is written
-- KEY seq         STRING  last arrival number issued
-- KEY popped      STRING  places already taken off the head of the line (0 until the
--                         draw is done: nothing is admitted or compacted before it)
-- KEY pre         STRING  the pre-queue's tokens, 16 bytes each (lua/join.lua)
--
-- Returns {'CLOSED', drawSize}, {'NOT_DUE', opensAt}, {'DONE', drawSize} (drawn
-- before), {'NO_DRAW'} (no scheduled start) or {'EVENT_NOT_FOUND'}.
-- Validates every key before its first write.
local fields = redis.call('HMGET', meta, 'status', 'draw', 'opensAt', 'drawSize')
if not fields[1] then return {'EVENT_NOT_FOUND'} end
if fields[2] == 'DONE' then return {'DONE', tonumber(fields[4])} end
if fields[2] ~= 'PENDING' then return {'NO_DRAW'} end
local opens = tonumber(fields[3])
if not opens then error(meta .. ': opensAt is not a number') end
local head = tonumber(redis.call('GET', popped) or 0)
if head ~= 0 then error(popped .. ' moved before the draw') end
local size = tonumber(fields[4] or '')
if not size then
  local t = redis.call('TIME')
  if t[1] * 1000 + math.floor(t[2] / 1000) < opens then return {'NOT_DUE', opens} end
  size = tonumber(redis.call('GET', seq) or 0)
  if not size then error(seq .. ' is not a number') end
  if redis.call('STRLEN', pre) ~= size * 16 then error(pre .. ' is not the pre-queue') end
  redis.call('HSET', meta, 'drawSize', size)
end
if redis.call('STRLEN', pre) ~= size * 16 then error(pre .. ' is not the pre-queue') end
return {'CLOSED', size}
