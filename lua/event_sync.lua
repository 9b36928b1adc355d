-- Write an event's settings into Redis, the live state the hot paths read.
-- Seats left are never overwritten: they are set once, and a change of the total
-- moves them by the difference, so seats already sold stay sold.
--
-- A scheduled start (ARGV[4]; docs/draw.md) is written as opensAt with draw =
-- PENDING, and may move while the pre-queue is open. Once the pre-queue is closed
-- (drawSize set) or drawn (draw = DONE), the schedule stays as it was. A line that
-- anyone has joined cannot be given a start (its order is under way), nor can a
-- pre-queue that anyone has joined lose its start (they were promised a draw).
--
-- KEYS[1] meta   HASH    status, totalSeats, openedAt, gen, opensAt, draw and the settings below
-- KEYS[2] seats  STRING  seats left
-- KEYS[3] seq    STRING  arrival numbers issued
-- ARGV[1] totalSeats
-- ARGV[2] seats already sold (used only when seats left are not set yet)
-- ARGV[3] openedAt (ms), kept if already set
-- ARGV[4] the scheduled start (ms), or '' for none
-- ARGV[5] the line's generation, 4 random hex digits, kept if already set. Every token
--         carries its line's (queue_app/tokens.py), so a line rebuilt from nothing
--         (its keys wiped, or a Redis that lost them) never takes an older token
--         for one of its own.
-- ARGV[6..] field, value pairs for the meta hash
--
-- Returns {'OK', seatsLeft}, {'SEATS_BELOW_SOLD', seatsLeft}, {'LINE_STARTED',
-- seatsLeft} or {'PRE_QUEUE_JOINED', seatsLeft} (nothing changed).
-- Validates every key and argument before its first write (Redis keeps the writes
-- done before an error): a bad one fails the script with nothing changed.
local total = tonumber(ARGV[1])
local sold = tonumber(ARGV[2])
if not total or not sold then error('totalSeats and sold must be numbers') end
-- An odd list would fail the HSET below, after seats left were written.
if #ARGV % 2 ~= 1 then error('the settings must be field, value pairs') end
if not ARGV[5]:match('^%x%x%x%x$') then error('the generation must be 4 hex digits') end
local opens = ARGV[4]
if opens ~= '' and not tonumber(opens) then error('opensAt must be a number') end
local old, draw, closed = unpack(redis.call('HMGET', KEYS[1], 'totalSeats', 'draw', 'drawSize'))
local left = redis.call('GET', KEYS[2])
if left and not tonumber(left) then error(KEYS[2] .. ' is not a number') end
local joined = tonumber(redis.call('GET', KEYS[3]) or 0)
if not joined then error(KEYS[3] .. ' is not a number') end
local fixed = draw == 'DONE' or (draw == 'PENDING' and closed)
if opens ~= '' and not draw and joined > 0 then return {'LINE_STARTED', tonumber(left or 0)} end
if opens == '' and draw == 'PENDING' and not closed and joined > 0 then
  return {'PRE_QUEUE_JOINED', tonumber(left or 0)}
end

if not left then
  left = total - sold
  if left < 0 then return {'SEATS_BELOW_SOLD', 0} end
  redis.call('SET', KEYS[2], left)
elseif old and tonumber(old) ~= total then
  if not tonumber(old) then error(KEYS[1] .. ': totalSeats is not a number') end
  left = tonumber(left) + total - tonumber(old)
  if left < 0 then return {'SEATS_BELOW_SOLD', tonumber(redis.call('GET', KEYS[2]))} end
  redis.call('SET', KEYS[2], left)
end
redis.call('HSETNX', KEYS[1], 'openedAt', ARGV[3])
redis.call('HSETNX', KEYS[1], 'gen', ARGV[5])
redis.call('HSET', KEYS[1], 'totalSeats', total, unpack(ARGV, 6))
if not fixed then
  if opens == '' then
    redis.call('HDEL', KEYS[1], 'opensAt', 'draw')
  else
    redis.call('HSET', KEYS[1], 'opensAt', opens, 'draw', 'PENDING')
  end
end
return {'OK', tonumber(left)}
