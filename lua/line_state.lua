-- What a web process caches of a line (queue_app/line.py), in one round trip: the
-- event's settings and counters, and the leavers logged since the process last read.
-- Writes nothing.
--
-- KEYS[1] meta    HASH    status, gen (4 hex digits), admitRate, opensAt, draw, drawSize
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  places already taken off the head of the line
-- KEYS[4] holes   STRING  how many places after `popped` were left
-- KEYS[5] seats   STRING  seats left
-- KEYS[6] leftlog STRING  5 bytes per leaver, in the order they left (lua/leave.lua)
-- ARGV[1] the byte of the log to read from
-- ARGV[2] the most bytes to read
--
-- Returns {status, gen, admitRate, opensAt, draw, drawSize, seq, popped, holes,
-- seats, log bytes from ARGV[1], the log's length}, or {false} for an unknown event.
local meta = redis.call('HMGET', KEYS[1], 'status', 'gen', 'admitRate', 'opensAt', 'draw', 'drawSize')
if not meta[1] then return {false} end
-- GET, not MGET: a key of the wrong type fails the script rather than reading as nil.
local counters = {}
for i = 2, 5 do
  counters[i - 1] = redis.call('GET', KEYS[i]) or '0'
  if not tonumber(counters[i - 1]) then error(KEYS[i] .. ' is not a number') end
end
local from, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local length = redis.call('STRLEN', KEYS[6])
local chunk = ''
if length > from then chunk = redis.call('GETRANGE', KEYS[6], from, math.min(length, from + most) - 1) end
return {meta[1], meta[2], meta[3] or '0', meta[4] or '', meta[5] or '', meta[6] or '',
  counters[1], counters[2], counters[3], counters[4], chunk, length}
