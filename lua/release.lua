-- Settle a booking that Postgres refused or did not save (its row is VOID): take its
-- entry out of the outbox and, in the same step, give back what the Redis step took.
-- Exactly once, whoever calls it and however often (the request, then reconcile, or
-- two reconciles at once): only the call whose XDEL removes the entry acts.
-- Validates every key before its first write.
--
-- KEYS[1] outbox  STREAM  bookings not yet decided in Postgres
-- KEYS[2] seats   STRING  seats left
-- KEYS[3] booked  STRING  the token's booking mark (a reservation id)
-- KEYS[4] active  ZSET    token -> end of its active window (ms)
-- ARGV[1] outbox entry id
-- ARGV[2] reservation id of the entry
-- ARGV[3] seats to give back (0 when Postgres had no room: the count in Redis was
--         too high, and keeping them taken brings it down)
-- ARGV[4] token, 16 raw bytes
-- ARGV[5] end of the token's active window to give back (ms), 0 for none
-- ARGV[6] reservation id the booking mark must name from now on (the token's
--         confirmed one), or '' to remove the mark if it names ARGV[2]
--
-- Returns 1 when released, 0 when the entry was already gone (nothing changed).
local give = tonumber(ARGV[3])
redis.call('XLEN', KEYS[1])
if give > 0 and not tonumber(redis.call('GET', KEYS[2]) or 0) then
  return redis.error_reply('seats left is not a number')
end
local mark = redis.call('GET', KEYS[3])
redis.call('ZCARD', KEYS[4])

if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
if give > 0 then redis.call('INCRBY', KEYS[2], give) end
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[3], ARGV[6])
elseif mark == ARGV[2] then
  redis.call('DEL', KEYS[3])
end
if tonumber(ARGV[5]) > 0 then redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4]) end
return 1
