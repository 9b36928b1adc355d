-- Show a paid hold's numbered seats as sold rather than held (lua/lib/seats.lua):
-- only the map's picture moves, never a count, so a call that is lost (Redis away)
-- loses nothing; reconcile's recount (lua/seats_heal.lua) sets every seat's state
-- from Postgres anyway. A seat no longer held (given back, then taken by another)
-- is left as it is.
--
-- KEY sections    HASH    the seat map's sections (lua/lib/seats.lua)
-- KEY seat_index  HASH    seat id -> position
-- KEY seat_state  STRING  2 bits a numbered seat
-- ARG seat_ids...  the booking's seats
--
-- Returns how many seats now show sold.
-- needs: seats
if #seat_ids == 0 or redis.call('HLEN', sections) == 0 then return 0 end
local positions = seat_positions(seat_index, seat_ids)
if not positions then return 0 end
local held = {}
for i, state in ipairs(seat_states(seat_state, positions)) do
  if state == HELD then held[#held + 1] = positions[i] end
end
seats_mark(seat_state, held, SOLD)
return #held
