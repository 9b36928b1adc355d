-- Undo a reservation whose Postgres write failed: seats back, booking mark gone,
-- the token active again until its window's original end, so it may retry.
-- Only while the outbox entry is young and still there: reconcile writes entries
-- older than its grace period to Postgres, and whichever of the two removes the
-- entry first decides. Undo refuses entries older than half that grace period.
--
-- KEYS[1] seats   STRING  seats left
-- KEYS[2] booked  STRING  reservation id of the token
-- KEYS[3] active  ZSET    token -> end of its active window (ms)
-- KEYS[4] outbox  STREAM  bookings not yet confirmed in Postgres
-- ARGV[1] token, 16 raw bytes
-- ARGV[2] reservation id
-- ARGV[3] seats
-- ARGV[4] outbox entry id
-- ARGV[5] window end (ms) to give back
-- ARGV[6] oldest entry age (ms) that may still be undone
--
-- Returns 'UNDONE', or 'TOO_LATE' when reconcile owns the entry (nothing changed).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local entry_ms = tonumber(string.match(ARGV[4], '^(%d+)'))
if now - entry_ms > tonumber(ARGV[6]) then return 'TOO_LATE' end
if redis.call('XDEL', KEYS[4], ARGV[4]) == 0 then return 'TOO_LATE' end
redis.call('INCRBY', KEYS[1], ARGV[3])
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
return 'UNDONE'
