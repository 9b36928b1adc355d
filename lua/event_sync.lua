-- Write an event's settings into Redis, the live state the hot paths read.
-- Seats left are never overwritten: they are set once, and a change of the total
-- moves them by the difference, so seats already sold stay sold.
--
-- KEYS[1] meta   HASH    status, totalSeats, openedAt and the settings below
-- KEYS[2] seats  STRING  seats left
-- ARGV[1] totalSeats
-- ARGV[2] seats already sold (used only when seats left are not set yet)
-- ARGV[3] openedAt (ms), kept if already set
-- ARGV[4..] field, value pairs for the meta hash
--
-- Returns {'OK', seatsLeft} or {'SEATS_BELOW_SOLD', seatsLeft} (nothing changed).
-- Validates every key and argument before its first write (Redis keeps the writes
-- done before an error): a bad one fails the script with nothing changed.
local total = tonumber(ARGV[1])
local sold = tonumber(ARGV[2])
if not total or not sold then error('totalSeats and sold must be numbers') end
-- An odd list would fail the HSET below, after seats left were written.
if #ARGV % 2 ~= 1 then error('the settings must be field, value pairs') end
local old = redis.call('HGET', KEYS[1], 'totalSeats')
local left = redis.call('GET', KEYS[2])
if left and not tonumber(left) then error(KEYS[2] .. ' is not a number') end

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
redis.call('HSET', KEYS[1], 'totalSeats', total, unpack(ARGV, 4))
return {'OK', tonumber(left)}
