-- Block numbered seats (keep them off sale: for the press, accessibility, technical
-- reasons) or release blocked ones back to sale, as the operator's admin asks
-- (queue_app/seating.py, after Postgres agreed: a seat held or sold there is never
-- blocked). A seat moves only from free to blocked, or from blocked to free; any
-- other (a booking Redis holds that Postgres has not decided yet) is left as it
-- is and named in the reply. Its section's places left and seats left move with it.
-- Validates every key before its first write.
--
-- KEY seats        STRING  seats left
-- KEY sections     HASH    the seat map's sections (lua/lib/seats.lua)
-- KEY seat_index   HASH    seat id -> position
-- KEY seat_state   STRING  2 bits a numbered seat
-- KEY section_left HASH    section -> places free
-- ARG block  1 to block, 0 to release
-- ARG seat_ids...  the seats, all of one section
--
-- Returns the number of seats moved, then the ids of those left as they were; or
-- {-1} when Redis has no map of the event (it is put there from Postgres, blocks
-- included, when the event is published).
-- needs: seats
if redis.call('HLEN', sections) == 0 or #seat_ids == 0 then return {-1} end
local section = seat_ids[1]:match('^([^-]+)-')
local positions = seat_positions(seat_index, seat_ids)
if not positions or not section or redis.call('HEXISTS', sections, section) == 0 then
  return redis.error_reply('seats that the map in Redis does not have')
end
if not tonumber(redis.call('GET', seats) or 0) then return redis.error_reply('seats left is not a number') end
seats_check(sections, seat_index, seat_state, section_left, section)
local from, to = FREE, 3
if block == '0' then from, to = 3, FREE end
local moved, kept = {}, {}
for i, state in ipairs(seat_states(seat_state, positions)) do
  if state == from then moved[#moved + 1] = positions[i] else kept[#kept + 1] = seat_ids[i] end
end
seats_mark(seat_state, moved, to)
local delta = #moved
if block == '1' then delta = -delta end
redis.call('HINCRBY', section_left, section, delta)
redis.call('INCRBY', seats, delta)
return {#moved, unpack(kept)}
