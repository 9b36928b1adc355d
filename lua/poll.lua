-- Everything a poll shows, read in one round trip: booked? / active and until
-- when / place in line / people waiting / seats left / event status.
-- The fast lane answers a waiting person from counters each web process caches
-- (queue_app/line.py) and asks this script only for people at or past the head
-- of the line, and whenever its cache cannot tell: this is the exact answer.
--
-- A person's rank follows from their place: everyone with a smaller one is ahead,
-- except those already admitted (the first `popped` places) and those who left
-- (bits of `left`). See lua/lib/line.lua.
--
-- KEYS[1] meta    HASH    status, gen, admitRate, opensAt, draw, drawSize
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] popped  STRING  places already taken off the head of the line
-- KEYS[4] left    STRING  bitmap of the places whose person left
-- KEYS[5] holes   STRING  how many places after `popped` were left
-- KEYS[6] leftpre STRING  bitmap of the pre-queue numbers left before the draw
-- KEYS[7] windows ZSET    the admission log
-- KEYS[8] booked  STRING  reservation id, once this token has booked; '-' and an id
--                         when that booking was decided not saved after its request
--                         had answered (lua/release.lua, lua/note_not_saved.lua)
-- KEYS[9] seats   STRING  seats left
-- KEYS[10] drawpos STRING drawn positions of the pre-queue's numbers, 4 bytes each
-- KEYS[11] bookedplaces STRING bitmap of the places whose token booked
-- KEYS[12] nonces  STRING the random bytes of each number's token, 2 bytes a number
-- ARGV[1] token, 16 raw bytes
--
-- Returns {state, totalWaiting, seatsLeft, eventStatus, detail, admitRate, opensAt,
-- prequeue, drawPosition} where state is PRE_QUEUE (before the start of an event
-- with a scheduled start), DRAWING (its start passed, the draw not done), WAITING
-- (detail = rank), ACTIVE (detail = window end, ms), BOOKED (detail = reservation
-- id), NOT_SAVED (detail = the reservation id that was not saved, and ':' and the
-- window end while the window is on: the person may book again), EXPIRED or NOT_FOUND (left, or a token of another generation of the line);
-- opensAt is the scheduled start (ms) or false; prequeue 1 when the token's number
-- is of the pre-queue; drawPosition its drawn position once drawn, else 0. Or
-- {'EVENT_NOT_FOUND'}.
-- Writes nothing, and like the scripts that write, validates what it reads: a key of
-- the wrong type or a counter that is not a number fails the script.
-- needs: line
local meta = redis.call('HMGET', KEYS[1], 'status', 'admitRate', 'opensAt', 'draw', 'drawSize', 'gen')
local status = meta[1]
if not status then return {'EVENT_NOT_FOUND'} end

local popped = counter(KEYS[3])
local waiting = counter(KEYS[2]) - popped - counter(KEYS[5])
local seats = counter(KEYS[9])
local n = number_of(ARGV[1])
local draw, size = meta[4], tonumber(meta[5] or '')
local prequeue = (draw == 'PENDING' or draw == 'DONE') and (not size or n <= size) and 1 or 0
local position = 0
if draw == 'DONE' and prequeue == 1 then position = drawn_place(KEYS[10], n) end
local function answer(state, detail)
  return {state, waiting, seats, status, detail or false, meta[2] or '0', meta[3] or false, prequeue, position}
end

local booked = redis.call('GET', KEYS[8])
local not_saved
if booked then
  if booked:sub(1, 1) ~= '-' then return answer('BOOKED', booked) end
  not_saved = booked:sub(2)
end
if n > counter(KEYS[2]) or not issued(KEYS[12], generation(meta[6]), ARGV[1], n) then
  return answer('NOT_FOUND')  -- not a place of this line
end
if status == 'CLOSED' then return answer('EXPIRED') end

local now = now_ms()
if draw == 'PENDING' and prequeue == 1 then
  if is_set(KEYS[6], n) then return answer('NOT_FOUND') end
  -- Before the start, or drawing: the pre-queue has no order yet. (With drawSize not
  -- yet written, the start closes the pre-queue at the numbers issued so far.)
  local opens = tonumber(meta[3])
  if not opens then error(KEYS[1] .. ': opensAt is not a number') end
  if not size and now < opens then return answer('PRE_QUEUE') end
  return answer('DRAWING')
end
local place = position > 0 and position or n
if is_set(KEYS[4], place) then return answer('NOT_FOUND') end
if place <= popped then
  local ends = window_of(KEYS[7], place)
  local open = ends and ends > now and not is_set(KEYS[11], place)
  if not_saved then return answer('NOT_SAVED', open and (not_saved .. ':' .. ends) or not_saved) end
  if open then return answer('ACTIVE', ends) end
  return answer('EXPIRED')  -- admitted, and the window passed (or a booking was cancelled)
end
local ahead = place - 1 - popped - ones(KEYS[4], popped + 1, place - 1)
return answer('WAITING', ahead + 1)
