-- Set seats left to what Postgres says, exactly, while bookings go on.
--
-- seats left = ARGV[2] - seats of outbox entries whose rows were not yet confirmed
-- (or cancelled) in Postgres when the caller read it. ARGV[2] is, from one Postgres
-- snapshot: total - confirmed - cancelled but not yet in the `returned` hash.
--
-- Why that is exact: the caller took the recount mark (KEYS[3]) before reading the
-- `returned` hash and then Postgres, and read the outbox after its snapshot. While
-- the mark is held, the two steps that could hide a taken seat are held back: taking
-- a committed booking's entry out of the outbox (lua/outbox_done.lua), and returning
-- a cancellation (lua/cancel.lua). A booking that arrived after the outbox read has
-- no confirmed row in the snapshot, so it is counted once, as pending. reserve.lua and
-- release.lua may run meanwhile: each moves seats and the outbox together, in one step.
-- Applied only if the mark is still the caller's (not expired, not taken over).
--
-- KEYS[1] seats    STRING  seats left
-- KEYS[2] outbox   STREAM  bookings not yet decided in Postgres
-- KEYS[3] recount  STRING  the caller's recount mark
-- KEYS[4] meta     HASH    the event's record (its existence is checked)
-- ARGV[1] the caller's recount mark value
-- ARGV[2] seats free according to Postgres (see above)
-- ARGV[3..] reservation ids of outbox entries that Postgres had confirmed or cancelled
--
-- Returns {seats left before (false when missing), seats left now, pending seats},
-- or {'LOST'} when the mark was no longer the caller's, or {'GONE'} when Redis holds
-- no live state of the event (purged meanwhile): nothing changed.
if redis.call('HLEN', KEYS[4]) == 0 then return {'GONE'} end
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {'LOST'} end
local durable = {}
for i = 3, #ARGV do durable[ARGV[i]] = true end
local pending = 0
for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '-', '+')) do
  local fields = entry[2]
  local rid, seats
  for i = 1, #fields, 2 do
    if fields[i] == 'reservationId' then rid = fields[i + 1] end
    if fields[i] == 'seats' then seats = tonumber(fields[i + 1]) end
  end
  if not durable[rid] then pending = pending + seats end
end
local before = redis.call('GET', KEYS[1])
local now = tonumber(ARGV[2]) - pending
redis.call('SET', KEYS[1], now)
return {before and tonumber(before) or false, now, pending}
