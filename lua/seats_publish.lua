-- Put an event's seat map in Redis (lua/lib/seats.lua names the keys), read from
-- Postgres by queue_app/seating.py: once per map. A map already there under the
-- same version keeps its states and places left (they move with every booking
-- since, and only a recount may set them again); only its prices are written. A new version (the map was replaced,
-- which Postgres allows only while no seat is held or sold) or none (a new event, or
-- a Redis that lost it) is written whole, and seats left become its places left.
-- Validates every argument before its first write.
--
-- KEY meta         HASH    the event's record: seatMap, the version in Redis
-- KEY seats        STRING  seats left
-- KEY sections     HASH    code -> "base places numbered price segments"
-- KEY seat_index   HASH    seat id -> position; '#' .. position -> seat id
-- KEY seat_state   STRING  2 bits a numbered seat, by position
-- KEY section_left HASH    code -> places free
-- ARG version  the map's version (changes whenever the map is replaced)
-- ARG state    every numbered seat's state, 2 bits each, as seat_state holds them
-- ARG ids      every position's seat id, in position order, each followed by ','
--              ('' for the padding between sections)
-- ARG specs...  code, spec, places left: three per section
--
-- Returns KEPT (the same version was there) or WRITTEN, and seats left.
if redis.call('HLEN', meta) == 0 then return redis.error_reply('the event is not in Redis: publish it first') end
if #specs % 3 ~= 0 then return redis.error_reply('specs come three per section') end
local total = 0
for i = 3, #specs, 3 do
  if not tonumber(specs[i]) then return redis.error_reply('places left must be numbers') end
  total = total + tonumber(specs[i])
end
if redis.call('HGET', meta, 'seatMap') == version and redis.call('EXISTS', sections) == 1 then
  for i = 1, #specs, 3 do redis.call('HSET', sections, specs[i], specs[i + 1]) end  -- a price may have changed
  return {'KEPT', tonumber(redis.call('GET', seats) or 0)}
end

redis.call('DEL', sections, seat_index, seat_state, section_left)
for i = 1, #specs, 3 do
  redis.call('HSET', sections, specs[i], specs[i + 1])
  redis.call('HSET', section_left, specs[i], specs[i + 2])
end
if #state > 0 then redis.call('SET', seat_state, state) end
local batch, position = {}, 0
for id in ids:gmatch('([^,]*),') do
  if id ~= '' then
    batch[#batch + 1] = id; batch[#batch + 1] = position
    batch[#batch + 1] = '#' .. position; batch[#batch + 1] = id
  end
  if #batch >= 2000 then
    redis.call('HSET', seat_index, unpack(batch))
    batch = {}
  end
  position = position + 1
end
if #batch > 0 then redis.call('HSET', seat_index, unpack(batch)) end
redis.call('SET', seats, total)
redis.call('HSET', meta, 'seatMap', version)
return {'WRITTEN', total}
