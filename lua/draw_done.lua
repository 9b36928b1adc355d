-- Put a drawn pre-queue in place (queue_app/draw.py): the positions one run of the
-- draw wrote to a key of its own become the line's, and admission may begin.
-- Places 1..drawSize are then the pre-queue in drawn order; everyone who joined
-- after the start keeps their arrival number as their place, behind them. People
-- of the pre-queue who left before now are marked by number in `leftpre`; they
-- become holes at their drawn position (and are logged there for the web
-- processes' caches). The pre-queue's tokens, read by the draw, are let go.
-- Two runs of the draw compute the same order: the first to get here puts its
-- positions in place, the other's are dropped.
--
-- KEY meta        HASH    draw, drawSize; draw = DONE is written
-- KEY runpos      STRING  this run's position of each pre-queue number, 4 bytes each
-- KEY drawpos     STRING  the line's (renamed from runpos)
-- KEY left        STRING  bitmap of the places whose person left
-- KEY leftpre     STRING  bitmap of the pre-queue numbers left before the draw
-- KEY leftlog     STRING  5 bytes per leaver, in the order they left
-- KEY popped      STRING  places taken off the head of the line: 0 until now
-- KEY pre         STRING  the pre-queue's tokens
-- ARG draw_size  drawSize the run drew
--
-- Returns 'DONE', or 'ALREADY' when another run was first (this run's key deleted).
-- Validates every key and count before its first write.
-- needs: line
local fields = redis.call('HMGET', meta, 'draw', 'drawSize')
if fields[1] == 'DONE' then
  redis.call('DEL', runpos)
  return 'ALREADY'
end
local size = tonumber(draw_size)
if fields[1] ~= 'PENDING' or tonumber(fields[2]) ~= size then error('the pre-queue is not the one drawn') end
if counter(popped) ~= 0 then error(popped .. ' moved before the draw') end
if redis.call('STRLEN', runpos) ~= size * 4 then error('the run\'s positions are not this draw\'s') end
redis.call('STRLEN', drawpos)  -- RENAME would replace a key of another type: refused here
redis.call('STRLEN', left)
redis.call('STRLEN', leftlog)
redis.call('STRLEN', pre)

-- The pre-queue's leavers, found a set bit at a time.
local from, gone = 0, {}
while true do
  local n = redis.call('BITPOS', leftpre, 1, from)
  if n < 0 then break end
  if n > size then error(leftpre .. ' marks ' .. n .. ', not of the pre-queue') end
  gone[#gone + 1] = n
  -- Skip to the next set bit: bytes are BITPOS' unit, so the rest of this one is
  -- read here.
  local byte = math.floor(n / 8)
  local c = redis.call('GETRANGE', leftpre, byte, byte):byte(1)
  for k = n % 8 + 1, 7 do
    if bit.band(c, 2 ^ (7 - k)) ~= 0 then gone[#gone + 1] = byte * 8 + k end
  end
  from = byte + 1
end
for _, n in ipairs(gone) do
  local at = n * 4
  local b1, b2, b3, b4 = redis.call('GETRANGE', runpos, at - 4, at - 1):byte(1, 4)
  local place = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  redis.call('SETBIT', left, place, 1)
  redis.call('APPEND', leftlog, log_entry(place))
end
redis.call('DEL', leftpre, pre)
if size > 0 then  -- (an empty pre-queue leaves this run nothing to put in place)
  redis.call('RENAME', runpos, drawpos)
  redis.call('PERSIST', drawpos)
end
redis.call('HSET', meta, 'draw', 'DONE')
return 'DONE'
