-- Settle a booking that Postgres refused or did not save (its row is VOID): take its
-- entry out of the outbox and, in the same step, give back what the Redis step took.
-- Exactly once, whoever calls it and however often (the request, then reconcile, or
-- two reconciles at once): only the call whose XDEL removes the entry acts.
-- Validates every key before its first write.
--
-- KEYS[1] outbox  STREAM  bookings not yet decided in Postgres
-- KEYS[2] seats   STRING  seats left
-- KEYS[3] booked  STRING  the token's booking mark (a reservation id)
-- KEYS[4] windows ZSET    the admission log (lua/lib/line.lua)
-- KEYS[5] perwindow HASH  `to` of a window -> bookings made in it
-- KEYS[6] active  STRING  people in a window not yet passed who have not booked
-- KEYS[7] meta    HASH    draw, drawSize
-- KEYS[8] drawpos STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEYS[9] bookedplaces STRING bitmap of the places whose token booked
-- ARGV[1] outbox entry id
-- ARGV[2] reservation id of the entry
-- ARGV[3] seats to give back (0 when Postgres had no room: the count in Redis was
--         too high, and keeping them taken brings it down)
-- ARGV[4] token, 16 raw bytes
-- ARGV[5] 1 to give the token's active window back (what is left of it), 0 not to
-- ARGV[6] reservation id the booking mark must name from now on (the token's
--         confirmed one), or '' to remove the mark if it names ARGV[2]
-- ARGV[7] 1 when the client never heard the outcome (reconcile decides): a mark
--         naming ARGV[2] becomes '-' .. ARGV[2] instead, so that polls answer
--         NOT_SAVED; 0 otherwise
--
-- Returns 1 when released, 0 when the entry was already gone (nothing changed).
-- needs: line
local give = tonumber(ARGV[3])
redis.call('XLEN', KEYS[1])
if give > 0 and not tonumber(redis.call('GET', KEYS[2]) or 0) then
  return redis.error_reply('seats left is not a number')
end
local mark = redis.call('GET', KEYS[3])
redis.call('HLEN', KEYS[5])
counter(KEYS[6])
-- The window the booking used, while it has not passed: the token is active again
-- once its mark is gone, so it counts as active again.
local window, place
if tonumber(ARGV[5]) > 0 then
  redis.call('STRLEN', KEYS[9])
  local meta = redis.call('HMGET', KEYS[7], 'draw', 'drawSize')
  place = number_of(ARGV[4])
  if meta[1] == 'DONE' and place <= tonumber(meta[2]) then place = drawn_place(KEYS[8], place) end
  local ends, to = window_of(KEYS[4], place)
  if ends and ends > now_ms() then window = to end
end

if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
if give > 0 then redis.call('INCRBY', KEYS[2], give) end
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[3], ARGV[6])
elseif mark == ARGV[2] and ARGV[7] == '1' then
  redis.call('SET', KEYS[3], '-' .. ARGV[2])
elseif mark == ARGV[2] then
  redis.call('DEL', KEYS[3])
end
if place then redis.call('SETBIT', KEYS[9], place, 0) end
if window then
  redis.call('HINCRBY', KEYS[5], window, -1)
  redis.call('INCR', KEYS[6])
end
return 1
