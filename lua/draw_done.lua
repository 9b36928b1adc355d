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
-- KEYS[1] meta    HASH    draw, drawSize; draw = DONE is written
-- KEYS[2] runpos  STRING  this run's position of each pre-queue number, 4 bytes each
-- KEYS[3] drawpos STRING  the line's (renamed from KEYS[2])
-- KEYS[4] left    STRING  bitmap of the places whose person left
-- KEYS[5] leftpre STRING  bitmap of the pre-queue numbers left before the draw
-- KEYS[6] leftlog STRING  5 bytes per leaver, in the order they left
-- KEYS[7] popped  STRING  places taken off the head of the line: 0 until now
-- KEYS[8] pre     STRING  the pre-queue's tokens
-- ARGV[1] drawSize the run drew
--
-- Returns 'DONE', or 'ALREADY' when another run was first (this run's key deleted).
-- Validates every key and count before its first write.
-- needs: line
local meta = redis.call('HMGET', KEYS[1], 'draw', 'drawSize')
if meta[1] == 'DONE' then
  redis.call('DEL', KEYS[2])
  return 'ALREADY'
end
local size = tonumber(ARGV[1])
if meta[1] ~= 'PENDING' or tonumber(meta[2]) ~= size then error('the pre-queue is not the one drawn') end
if counter(KEYS[7]) ~= 0 then error(KEYS[7] .. ' moved before the draw') end
if redis.call('STRLEN', KEYS[2]) ~= size * 4 then error('the run\'s positions are not this draw\'s') end
redis.call('STRLEN', KEYS[3])  -- RENAME would replace a key of another type: refused here
redis.call('STRLEN', KEYS[4])
redis.call('STRLEN', KEYS[6])
redis.call('STRLEN', KEYS[8])

-- The pre-queue's leavers, found a set bit at a time.
local from, gone = 0, {}
while true do
  local n = redis.call('BITPOS', KEYS[5], 1, from)
  if n < 0 then break end
  if n > size then error(KEYS[5] .. ' marks ' .. n .. ', not of the pre-queue') end
  gone[#gone + 1] = n
  -- Skip to the next set bit: bytes are BITPOS' unit, so the rest of this one is
  -- read here.
  local byte = math.floor(n / 8)
  local c = redis.call('GETRANGE', KEYS[5], byte, byte):byte(1)
  for k = n % 8 + 1, 7 do
    if bit.band(c, 2 ^ (7 - k)) ~= 0 then gone[#gone + 1] = byte * 8 + k end
  end
  from = byte + 1
end
for _, n in ipairs(gone) do
  local at = n * 4
  local b1, b2, b3, b4 = redis.call('GETRANGE', KEYS[2], at - 4, at - 1):byte(1, 4)
  local place = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  redis.call('SETBIT', KEYS[4], place, 1)
  redis.call('APPEND', KEYS[6], string.char(0, math.floor(place / 16777216) % 256,
    math.floor(place / 65536) % 256, math.floor(place / 256) % 256, place % 256))
end
redis.call('DEL', KEYS[5], KEYS[8])
if size > 0 then  -- (an empty pre-queue leaves this run nothing to put in place)
  redis.call('RENAME', KEYS[2], KEYS[3])
  redis.call('PERSIST', KEYS[3])
end
redis.call('HSET', KEYS[1], 'draw', 'DONE')
return 'DONE'
