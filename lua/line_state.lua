-- What a web process caches of a line (queue_app/line.py), in one round trip: the
-- event's settings and counters, and the leavers logged since the process last read.
-- Writes nothing.
--
-- KEY meta        HASH    status, gen (4 hex digits), admitRate, opensAt, draw, drawSize, held, message,
--                         laneRate
-- KEY seq         STRING  last arrival number issued
-- KEY popped      STRING  places already taken off the head of the line
-- KEY holes       STRING  how many places after `popped` were left
-- KEY seats       STRING  seats left
-- KEY leftlog     STRING  5 bytes per leaver, in the order they left (lua/leave.lua)
-- ARG offset  the byte of the log to read from
-- ARG most  the most bytes to read
--
-- Returns these, in this order (queue_app/line.py: LineState), or {false} for an
-- unknown event:
-- REPLY status    the event's status
-- REPLY gen       the line's generation (4 hex digits)
-- REPLY rate      admitRate
-- REPLY opens_at  the scheduled start (ms), or ''
-- REPLY draw      the draw's state, or ''
-- REPLY draw_size the pre-queue's size once drawn, or ''
-- REPLY seq       last arrival number issued
-- REPLY popped    places taken off the head
-- REPLY holes     places after `popped` that were left
-- REPLY seats     seats left
-- REPLY chunk     the log's bytes from `offset`, at most `most`
-- REPLY length    the log's length
-- REPLY held      seats held by buyers paying now (lua/held_note.lua)
-- REPLY message   the operator's message to the crowd (JSON, queue_app/events.py), or ''
-- REPLY lane_rate laneRate: the priority lane's admitRate (lua/admit.lua)
local fields = redis.call('HMGET', meta, 'status', 'gen', 'admitRate', 'opensAt', 'draw', 'drawSize', 'held', 'message',
  'laneRate')
if not fields[1] then return {false} end
-- GET, not MGET: a key of the wrong type fails the script rather than reading as nil.
local counters = {}
for i, key in ipairs({seq, popped, holes, seats}) do
  counters[i] = redis.call('GET', key) or '0'
  if not tonumber(counters[i]) then error(key .. ' is not a number') end
end
local start, limit = tonumber(offset), tonumber(most)
local length = redis.call('STRLEN', leftlog)
local chunk = ''
if length > start then chunk = redis.call('GETRANGE', leftlog, start, math.min(length, start + limit) - 1) end
return {fields[1], fields[2], fields[3] or '0', fields[4] or '', fields[5] or '', fields[6] or '',
  counters[1], counters[2], counters[3], counters[4], chunk, length, fields[7] or '0', fields[8] or '', fields[9] or '0'}
