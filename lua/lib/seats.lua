-- An event's seat map in Redis, prepended to each script that says `-- needs: seats`
-- (queue_app/seating.py writes it: lua/seats_publish.lua). An event without a map
-- has none of these keys, and its seats are the one counter `seats`, as always.
--
--   sections      HASH    code -> "base places numbered price segments": the
--                 section's first seat position (a multiple of 4, so that each
--                 section's states start at a byte), its places, 1 when numbered,
--                 its price, and its runs of adjacent seats in index order (sizes
--                 joined by ',': a row, or the part of a row between two aisles)
--   seat_index    HASH    seat id -> position; '#' .. position -> seat id
--   seat_state    STRING  2 bits a numbered seat, by position: 0 free, 1 held,
--                 2 sold, 3 blocked (what GET /api/events/<id>/seats serves)
--   section_left  HASH    code -> places neither held, sold nor blocked
-- Seats left (`seats`) stays the sum of the sections' places left.

local FREE, HELD, SOLD = 0, 1, 2

local function section_spec(sections, code)
  local spec = redis.call('HGET', sections, code)
  if not spec then return nil end
  local base, places, numbered, price, segments = spec:match('^(%d+) (%d+) ([01]) (%d+) ?(.*)$')
  if not base then error(sections .. ': section ' .. code .. ' is not "base places numbered price segments"') end
  return {code = code, base = tonumber(base), places = tonumber(places), numbered = numbered == '1',
    price = tonumber(price), segments = segments}
end

-- The positions of these seat ids, or nil and the ids that name no seat.
local function seat_positions(seat_index, ids)
  local found = redis.call('HMGET', seat_index, unpack(ids))
  local positions, unknown = {}, {}
  for i, p in ipairs(found) do
    if p then positions[i] = tonumber(p) else unknown[#unknown + 1] = ids[i] end
  end
  if #unknown > 0 then return nil, unknown end
  return positions
end

-- The seat ids at these positions.
local function seat_ids_at(seat_index, positions)
  local fields = {}
  for i, p in ipairs(positions) do fields[i] = '#' .. p end
  return redis.call('HMGET', seat_index, unpack(fields))
end

-- Each position's state.
local function seat_states(seat_state, positions)
  local ops = {}
  for _, p in ipairs(positions) do
    ops[#ops + 1] = 'GET'; ops[#ops + 1] = 'u2'; ops[#ops + 1] = '#' .. p
  end
  return redis.call('BITFIELD', seat_state, unpack(ops))
end

local function seats_mark(seat_state, positions, value)
  if #positions == 0 then return end
  local ops = {}
  for _, p in ipairs(positions) do
    ops[#ops + 1] = 'SET'; ops[#ops + 1] = 'u2'; ops[#ops + 1] = '#' .. p; ops[#ops + 1] = value
  end
  redis.call('BITFIELD', seat_state, unpack(ops))
end

-- The free seats of a section to hold, best first: the front-most run of `count`
-- adjacent free seats (runs are in the map's order, the operator's best first);
-- unless `together`, when there is none, the front-most free seats wherever they
-- are. Nil when there are not. One read of the section's states, scanned a byte (4
-- seats) at a time: a byte with no free seat is passed at once.
local function seats_pick(seat_state, spec, count, together)
  local first, last = spec.base / 4, math.floor((spec.base + spec.places - 1) / 4)
  local bytes = redis.call('GETRANGE', seat_state, first, last)
  local known = {}  -- byte value -> which of its 4 seats are free (false: none is), as met
  local function free_at(b)
    if known[b] == nil then
      local seats, any = {}, false
      for j = 0, 3 do
        seats[j] = math.floor(b / 4 ^ (3 - j)) % 4 == FREE
        any = any or seats[j]
      end
      known[b] = any and seats
    end
    return known[b]
  end
  local function scan(from, to, wanted, adjacent)  -- seats from..to of the section
    local picked, i = {}, from
    while i <= to do
      local seats = free_at(bytes:byte(math.floor(i / 4) + 1) or 0)
      if not seats then
        if adjacent then picked = {} end
        i = i - i % 4 + 4
      else
        if seats[i % 4] then
          picked[#picked + 1] = spec.base + i
          if #picked == wanted then return picked end
        elseif adjacent then
          picked = {}
        end
        i = i + 1
      end
    end
    return nil
  end
  local start = 0
  for size in spec.segments:gmatch('%d+') do
    local picked = scan(start, start + tonumber(size) - 1, count, true)
    if picked then return picked end
    start = start + tonumber(size)
  end
  if together then return nil end
  return scan(0, spec.places - 1, count, false)
end

-- Fail, before a script's first write, on any of the map's keys that is not of its
-- type, or on a section's places left that are not a number: what the give-backs
-- and the recount write after their other writes. Nothing to check for a booking
-- without a section (an event without a map): its give-back writes none of them.
local function seats_check(sections, seat_index, seat_state, section_left, section)
  if section == '' then return end
  redis.call('HLEN', sections)
  redis.call('HLEN', seat_index)
  redis.call('STRLEN', seat_state)
  local places = redis.call('HGET', section_left, section or '')
  if places and not tonumber(places) then error('places left of section ' .. section .. ' is not a number') end
end

-- Give a booking's seats back: free again, and counted in its section's places left.
-- Nothing when the event has no map now (a purged event's) or the booking no section.
local function seats_give_back(sections, seat_index, seat_state, section_left, section, ids, count)
  if section == '' or redis.call('HEXISTS', sections, section) == 0 then return end
  redis.call('HINCRBY', section_left, section, count)
  if #ids > 0 then
    local positions = seat_positions(seat_index, ids)
    if positions then seats_mark(seat_state, positions, FREE) end
  end
end

-- Take a booking's seats (`value`: HELD or SOLD) and count them out of its section.
local function seats_take(sections, seat_index, seat_state, section_left, section, ids, count, value)
  if section == '' or redis.call('HEXISTS', sections, section) == 0 then return end
  redis.call('HINCRBY', section_left, section, -count)
  if #ids > 0 then
    local positions = seat_positions(seat_index, ids)
    if positions then seats_mark(seat_state, positions, value) end
  end
end

-- Whether two seat states (seat_state's values) differ in which seats are taken,
-- whatever they are taken as (held, sold or blocked).
local function seats_taken_differ(a, b)
  if a == b then return false end
  for i = 1, math.max(#a, #b) do
    local x, y = a:byte(i) or 0, b:byte(i) or 0
    if x ~= y then
      for shift = 0, 3 do
        local d = 4 ^ shift
        if (math.floor(x / d) % 4 == 0) ~= (math.floor(y / d) % 4 == 0) then return true end
      end
    end
  end
  return false
end

-- A comma-joined list's items ('' is none).
local function split_ids(text)
  local ids = {}
  for id in (text or ''):gmatch('[^,]+') do ids[#ids + 1] = id end
  return ids
end
