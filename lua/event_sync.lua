-- Write an event's settings into Redis, the live state the hot paths read.
-- Seats left are never overwritten: they are set once, and a change of the total
-- moves them by the difference, so seats already sold stay sold.
--
-- A scheduled start (opens_at; docs/draw.md) is written as opensAt with draw =
-- PENDING, and may move while the pre-queue is open. Once the pre-queue is closed
-- (drawSize set) or drawn (draw = DONE), the schedule stays as it was. A line that
-- anyone has joined cannot be given a start (its order is under way), nor can a
-- pre-queue that anyone has joined lose its start (they were promised a draw).
--
-- KEY meta       HASH    status, totalSeats, openedAt, gen, opensAt, draw and the settings below
-- KEY seats      STRING  seats left
-- KEY seq        STRING  arrival numbers issued
-- ARG total_seats totalSeats
-- ARG sold      seats already sold (used only when seats left are not set yet)
-- ARG opened_at  openedAt (ms), kept if already set
-- ARG opens_at  the scheduled start (ms), or '' for none
-- ARG gen  the line's generation, 4 random hex digits, kept if already set. Every token
--         carries its line's (queue_app/tokens.py), so a line rebuilt from nothing
--         (its keys wiped, or a Redis that lost them) never takes an older token
--         for one of its own.
-- ARG settings...  field, value pairs for the meta hash
--
-- Returns {'OK', seatsLeft}, {'SEATS_BELOW_SOLD', seatsLeft}, {'LINE_STARTED',
-- seatsLeft} or {'PRE_QUEUE_JOINED', seatsLeft} (nothing changed).
-- Validates every key and argument before its first write (Redis keeps the writes
-- done before an error): a bad one fails the script with nothing changed.
local total, already = tonumber(total_seats), tonumber(sold)
if not total or not already then error('totalSeats and sold must be numbers') end
-- An odd list would fail the HSET below, after seats left were written.
if #settings % 2 ~= 0 then error('the settings must be field, value pairs') end
if not gen:match('^%x%x%x%x$') then error('the generation must be 4 hex digits') end
if opens_at ~= '' and not tonumber(opens_at) then error('opensAt must be a number') end
local old, draw, closed = unpack(redis.call('HMGET', meta, 'totalSeats', 'draw', 'drawSize'))
local left = redis.call('GET', seats)
if left and not tonumber(left) then error(seats .. ' is not a number') end
local joined = tonumber(redis.call('GET', seq) or 0)
if not joined then error(seq .. ' is not a number') end
local fixed = draw == 'DONE' or (draw == 'PENDING' and closed)
if opens_at ~= '' and not draw and joined > 0 then return {'LINE_STARTED', tonumber(left or 0)} end
if opens_at == '' and draw == 'PENDING' and not closed and joined > 0 then
  return {'PRE_QUEUE_JOINED', tonumber(left or 0)}
end

if not left then
  left = total - already
  if left < 0 then return {'SEATS_BELOW_SOLD', 0} end
  redis.call('SET', seats, left)
elseif old and tonumber(old) ~= total then
  if not tonumber(old) then error(meta .. ': totalSeats is not a number') end
  left = tonumber(left) + total - tonumber(old)
  if left < 0 then return {'SEATS_BELOW_SOLD', tonumber(redis.call('GET', seats))} end
  redis.call('SET', seats, left)
end
redis.call('HSETNX', meta, 'openedAt', opened_at)
redis.call('HSETNX', meta, 'gen', gen)
redis.call('HSET', meta, 'totalSeats', total, unpack(settings))
if not fixed then
  if opens_at == '' then
    redis.call('HDEL', meta, 'opensAt', 'draw')
  else
    redis.call('HSET', meta, 'opensAt', opens_at, 'draw', 'PENDING')
  end
end
return {'OK', tonumber(left)}
