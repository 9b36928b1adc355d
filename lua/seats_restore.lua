-- Set seats left from the durable record after Redis lost its data (recover_event):
-- seats left = total - sold in Postgres - bookings still in the outbox. Applied only
-- if the outbox is exactly as the caller saw it when it summed Postgres, so that a
-- booking confirmed in between is never counted as a free seat.
--
-- KEYS[1] seats   STRING  seats left
-- KEYS[2] outbox  STREAM  bookings not yet confirmed in Postgres
-- ARGV[1] seats left to set
-- ARGV[2] outbox entry ids the caller saw, comma-separated ('' for none)
--
-- Returns 1 when set, 0 when the outbox changed (read again and retry).
local ids = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do ids[#ids + 1] = entry[1] end
if table.concat(ids, ',') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
