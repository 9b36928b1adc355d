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
local total = tonumber(ARGV[1])
local old = redis.call('HGET', KEYS[1], 'totalSeats')
local left = redis.call('GET', KEYS[2])
if not left then
  left = total - tonumber(ARGV[2])
  if left < 0 then return {'SEATS_BELOW_SOLD', 0} end
  redis.call('SET', KEYS[2], left)
elseif old and tonumber(old) ~= total then
  left = tonumber(left) + total - tonumber(old)
  if left < 0 then return {'SEATS_BELOW_SOLD', tonumber(redis.call('GET', KEYS[2]))} end
  redis.call('SET', KEYS[2], left)
end
redis.call('HSETNX', KEYS[1], 'openedAt', ARGV[3])
redis.call('HSET', KEYS[1], 'totalSeats', total, unpack(ARGV, 4))
return {'OK', tonumber(left)}
