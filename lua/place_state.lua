-- Everything an operator's support lookup shows of one token's place
-- (queue_app/support.py), in one round trip. Read only: lua/poll.lua, which an
-- admitted person's poll runs, is them coming back (their claim, docs/modes.md), and
-- an operator looking a person up must never come back for them.
--
-- The place's state is read as a poll reads it (lua/lib/line.lua), with the details
-- a poll does not show: whether this line issued the token at all, the admission
-- log's entry that admitted it, its claim time and whether the person came back,
-- the booking bit and mark. A closed event's places keep their line state here (a
-- poll answers EXPIRED to all of them): the lookup shows the event's status beside it.
--
-- KEY meta        HASH    status, gen, draw, drawSize, opensAt, windowSeconds
-- KEY seq         STRING  last arrival number issued
-- KEY popped      STRING  places already taken off the head of the line
-- KEY left        STRING  bitmap of the places whose person left
-- KEY holes       STRING  how many places after `popped` were left
-- KEY leftpre     STRING  bitmap of the pre-queue numbers left before the draw
-- KEY windows     ZSET    the admission log
-- KEY booked      STRING  the token's booking mark: reservation id; '-' and an id when
--                         that booking was decided not saved
-- KEY drawpos     STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEY booked_places STRING bitmap of the places whose token booked
-- KEY nonces      STRING  the random bytes of each number's token, 2 bytes a number
-- KEY claims      HASH    per admission log entry, the time its people must come back by
-- KEY claimed     STRING  bitmap of the admitted places that came back
-- ARG token        16 raw bytes
--
-- Returns these, in this order (queue_app/support.py: PlaceState), or {'EVENT_NOT_FOUND'}:
-- REPLY state     PRE_QUEUE, DRAWING, WAITING, ACTIVE, UNCLAIMED (admitted, its claim
--                 time ran out before it came back, its window not over), EXPIRED
--                 (admitted, its window over), LEFT, BOOKED, NOT_SAVED (its booking
--                 was decided not saved) or NOT_FOUND (not a place of this line)
-- REPLY of_line   1 when this line issued the token: its generation, and the random
--                 bytes kept for its number; else 0
-- REPLY number    the arrival number the token carries
-- REPLY place     its place in line: the number, or its drawn position; 0 while a
--                 pre-queue number is not drawn (or the token is not of this line)
-- REPLY rank      WAITING: its rank, 1-based; else false
-- REPLY waiting   people waiting in the whole line
-- REPLY head      places taken off the head of the line (`popped`)
-- REPLY status    the event's status
-- REPLY prequeue  1 when the number is of a scheduled start's pre-queue
-- REPLY entry     the admission log's entry that admitted the place,
--                 "to:from:end:admitted", or false (not admitted, or the entry is gone)
-- REPLY window_seconds  the event's active window now (meta windowSeconds)
-- REPLY claim     the entry's claim time: "<ms>", "<ms>:<unclaimed>" once counted, or false
-- REPLY came_back 1 when the admitted place came back (bit of `claimed`), else 0
-- REPLY booked_place 1 when the place's bit of `booked_places` is set, else 0
-- REPLY mark      the token's booking mark, or false
-- REPLY now       Redis' clock, ms
-- Writes nothing. A key of the wrong type or a counter that is not a number fails it.
-- needs: line
local fields = redis.call('HMGET', meta, 'status', 'gen', 'draw', 'drawSize', 'opensAt', 'windowSeconds')
local status = fields[1]
if not status then return {'EVENT_NOT_FOUND'} end

local head = counter(popped)
local last = counter(seq)
local waiting = last - head - counter(holes)
local n = number_of(token)
local draw, size = fields[3], tonumber(fields[4] or '')
local prequeue = (draw == 'PENDING' or draw == 'DONE') and (not size or n <= size) and 1 or 0
local mark = redis.call('GET', booked) or false
local now = now_ms()
local place, entry, claim, came_back, booked_place = 0, false, false, 0, 0
local function answer(state, ours, rank)
  return {state, ours, n, place, rank or false, waiting, head, status, prequeue, entry, fields[6] or false,
    claim, came_back, booked_place, mark, now}
end
local booked_mark = mark and mark:sub(1, 1) ~= '-'

if n > last or not issued(nonces, generation(fields[2]), token, n) then
  -- Not a place of this line; a booking mark under its name is still shown.
  return answer(booked_mark and 'BOOKED' or 'NOT_FOUND', 0)
end

if draw == 'PENDING' and prequeue == 1 then
  if is_set(leftpre, n) then return answer('LEFT', 1) end
  local opens = tonumber(fields[5])
  if not opens then error(meta .. ': opensAt is not a number') end
  if not size and now < opens then return answer('PRE_QUEUE', 1) end
  return answer('DRAWING', 1)
end

place = (draw == 'DONE' and prequeue == 1) and drawn_place(drawpos, n) or n
booked_place = is_set(booked_places, place) and 1 or 0
local gone = is_set(left, place)
if place > head then
  if booked_mark then return answer('BOOKED', 1) end
  if gone then return answer('LEFT', 1) end
  return answer('WAITING', 1, place - head - ones(left, head + 1, place - 1))
end

-- Taken off the head: admitted, or passed as a hole when the person had left.
came_back = is_set(claimed, place) and 1 or 0
local ends, to = window_of(windows, place)
local standing
if ends then
  entry = redis.call('ZRANGEBYSCORE', windows, place, '+inf', 'LIMIT', 0, 1)[1]
  claim = redis.call('HGET', claims, to) or false
  standing = claim_of(claims, claimed, to, place, now)  -- read only: CLAIM means "may still come back"
else
  redis.call('HLEN', claims)  -- the same key checked on every path
end
if booked_mark then return answer('BOOKED', 1) end
if gone then return answer('LEFT', 1) end
if mark then return answer('NOT_SAVED', 1) end
if ends and ends > now and booked_place == 0 then
  if standing == 'PASSED' then return answer('UNCLAIMED', 1) end
  return answer('ACTIVE', 1)
end
return answer('EXPIRED', 1)
