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
-- KEY sections     HASH    the seat map's sections (lua/lib/seats.lua)
-- KEY seat_index   HASH    seat id -> position
-- KEY seat_state   STRING  2 bits a numbered seat
-- KEY section_left HASH    section -> places free
-- ARG mark  the caller's recount mark value
-- ARG free  seats free according to Postgres (see above)
-- ARG version  the seat map's version Postgres has ('' for none): the map's part is
--         recounted only if Redis has that version (meta seatMap)
-- ARG state  every numbered seat's state according to Postgres (2 bits each, as
--         seat_state holds them), the pending bookings' seats not yet marked
-- ARG section_free  "code:free" per section, comma-joined: places free according to
--         Postgres, as `free` is for the event
-- ARG confirmed...  reservation ids of outbox entries that Postgres had confirmed or cancelled
--
-- With a seat map, each section's places left and every seat's state are set the
-- same way, from the same snapshot and the same read of the outbox.
--
-- Returns {seats left before (false when missing), seats left now, pending seats,
-- what of the map was wrong: 'seats' when a seat was taken or free that should not
-- have been (held shown for sold is not wrong), and the sections whose places left
-- were, comma-joined},
-- or {'LOST'} when the mark was no longer the caller's, or {'GONE'} when Redis holds
-- no live state of the event (purged meanwhile): nothing changed.
-- needs: seats
if redis.call('HLEN', meta) == 0 then return {'GONE'} end
if redis.call('GET', recount) ~= mark then return {'LOST'} end
local durable = {}
for _, rid in ipairs(confirmed) do durable[rid] = true end
local pending, by_section, held, sold = 0, {}, {}, {}
for _, entry in ipairs(redis.call('XRANGE', outbox, '-', '+')) do
  local fields = entry[2]
  local rid, count, code, ids, amount
  for i = 1, #fields, 2 do
    if fields[i] == 'reservationId' then rid = fields[i + 1] end
    if fields[i] == 'seats' then count = tonumber(fields[i + 1]) end
    if fields[i] == 'section' then code = fields[i + 1] end
    if fields[i] == 'seatIds' then ids = fields[i + 1] end
    if fields[i] == 'amount' then amount = tonumber(fields[i + 1]) end
  end
  if not durable[rid] then
    pending = pending + count
    if code and code ~= '' then by_section[code] = (by_section[code] or 0) + count end
    for _, id in ipairs(split_ids(ids)) do
      if (amount or 0) > 0 then held[#held + 1] = id else sold[#sold + 1] = id end
    end
  end
end
if version ~= '' then seats_check(sections, seat_index, seat_state, section_left, nil) end
local before = redis.call('GET', seats)
local now = tonumber(free) - pending
redis.call('SET', seats, now)
local changed = {}
if version ~= '' and redis.call('HGET', meta, 'seatMap') == version then
  local old = redis.call('GET', seat_state) or ''
  redis.call('SET', seat_state, state)
  for _, taken in ipairs({{held, HELD}, {sold, SOLD}}) do
    if #taken[1] > 0 then
      local positions = seat_positions(seat_index, taken[1])
      if positions then seats_mark(seat_state, positions, taken[2]) end
    end
  end
  if seats_taken_differ(old, redis.call('GET', seat_state)) then changed[#changed + 1] = 'seats' end
  for code, places in section_free:gmatch('([^:,]+):(%-?%d+)') do
    local now_left = tonumber(places) - (by_section[code] or 0)
    if tonumber(redis.call('HGET', section_left, code) or -1) ~= now_left then changed[#changed + 1] = code end
    redis.call('HSET', section_left, code, now_left)
  end
end
return {before and tonumber(before) or false, now, pending, table.concat(changed, ',')}
