-- Set seats left to what Postgres says, exactly, while bookings go on.
--
-- seats left = free - seats of outbox entries whose rows were not yet confirmed
-- (or cancelled) in Postgres when the caller read it. `free` is, from one Postgres
-- snapshot: total - confirmed - cancelled but not yet in the `returned` hash.
--
-- Why that is exact: the caller took the recount mark (`recount`) before reading the
-- `returned` hash and then Postgres, and read the outbox after its snapshot. While
-- the mark is held, the two steps that could hide a taken seat are held back: taking
-- a committed booking's entry out of the outbox (lua/outbox_done.lua), and returning
-- a cancellation (lua/cancel.lua). A booking that arrived after the outbox read has
-- no confirmed row in the snapshot, so it is counted once, as pending. reserve.lua and
-- release.lua may run meanwhile: each moves seats and the outbox together, in one step.
-- Applied only if the mark is still the caller's (not expired, not taken over).
--
-- KEY seats        STRING  seats left
-- KEY outbox       STREAM  bookings not yet decided in Postgres
-- KEY recount      STRING  the caller's recount mark
-- KEY meta         HASH    the event's record (its existence is checked)
-- ARG mark  the caller's recount mark value
-- ARG free  seats free according to Postgres (see above)
-- ARG confirmed...  reservation ids of outbox entries that Postgres had confirmed or cancelled
--
-- Returns {seats left before (false when missing), seats left now, pending seats},
-- or {'LOST'} when the mark was no longer the caller's, or {'GONE'} when Redis holds
-- no live state of the event (purged meanwhile): nothing changed.
if redis.call('HLEN', meta) == 0 then return {'GONE'} end
if redis.call('GET', recount) ~= mark then return {'LOST'} end
local durable = {}
for _, rid in ipairs(confirmed) do durable[rid] = true end
local pending = 0
for _, entry in ipairs(redis.call('XRANGE', outbox, '-', '+')) do
  local fields = entry[2]
  local rid, count
  for i = 1, #fields, 2 do
    if fields[i] == 'reservationId' then rid = fields[i + 1] end
    if fields[i] == 'seats' then count = tonumber(fields[i + 1]) end
  end
  if not durable[rid] then pending = pending + count end
end
local before = redis.call('GET', seats)
local now = tonumber(free) - pending
redis.call('SET', seats, now)
return {before and tonumber(before) or false, now, pending}
