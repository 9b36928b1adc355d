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
-- KEY meta        HASH    status, gen, admitRate, opensAt, draw, drawSize, held, message,
--                         claimGrace, maxActive, laneRate
-- KEY seq         STRING  last arrival number issued
-- KEY popped      STRING  places already taken off the head of the line
-- KEY left        STRING  bitmap of the places whose person left
-- KEY holes       STRING  how many places after `popped` were left
-- KEY leftpre     STRING  bitmap of the pre-queue numbers left before the draw
-- KEY windows     ZSET    the admission log
-- KEY booked      STRING  reservation id, once this token has booked; '-' and an id
--                         when that booking was decided not saved after its request
--                         had answered (lua/release.lua, lua/note_not_saved.lua)
-- KEY seats       STRING  seats left
-- KEY drawpos     STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEY booked_places STRING bitmap of the places whose token booked
-- KEY nonces      STRING  the random bytes of each number's token, 2 bytes a number
-- KEY claims      HASH    per admission log entry, the time its people must come back by
-- KEY claimed     STRING  bitmap of the admitted places that came back
-- KEY active      STRING  people in a window not yet passed who have not booked
-- ARG token        16 raw bytes
-- ARG own          '1': the person's own poll, which claims an admitted place (their
--                  coming back); '': someone else asks (the notify-me sender), and
--                  nothing is written
--
-- Returns these, in this order (queue_app/line.py: PollReply), or {'EVENT_NOT_FOUND'}:
-- REPLY state     PRE_QUEUE (before the start of an event with a scheduled start),
--                 DRAWING (its start passed, the draw not done), WAITING (detail =
--                 rank), ACTIVE (detail = window end, ms), BOOKED (detail =
--                 reservation id), NOT_SAVED (detail = the reservation id that was
--                 not saved, and ':' and the window end while the window is on: the
--                 person may book again), UNCLAIMED (admitted, and its claim time ran
--                 out before it came back: its slot went on; detail = the window end),
--                 EXPIRED or NOT_FOUND (left, or a token of another generation of the line)
-- REPLY waiting   totalWaiting
-- REPLY seats     seats left
-- REPLY status    the event's status
-- REPLY detail    as the state says, or false
-- REPLY rate      admitRate
-- REPLY opens_at  the scheduled start (ms) or false
-- REPLY prequeue  1 when the token's number is of the pre-queue
-- REPLY position  its drawn position once drawn, else 0
-- REPLY held      seats held by buyers paying now (lua/held_note.lua), which may come back
-- REPLY message   the operator's message to the crowd (JSON, queue_app/events.py), or ''
-- REPLY lane_rate laneRate: the priority lane's admitRate (the caller of a token of the
--                 lane reads it instead; lua/admit.lua)
-- Writes only an admitted person's claim (lua/lib/line.lua: claim_of, and claim_regain
-- for a late one on an event with a grace), and only on their own poll (`own`): this
-- poll is them coming back. Validates
-- what it reads before that write: a key of the wrong type or a counter that is not a
-- number fails the script.
-- needs: line
local fields = redis.call('HMGET', meta, 'status', 'admitRate', 'opensAt', 'draw', 'drawSize', 'gen', 'held',
  'message', 'claimGrace', 'maxActive', 'laneRate')
local status = fields[1]
if not status then return {'EVENT_NOT_FOUND'} end

local head = counter(popped)
local waiting = counter(seq) - head - counter(holes)
local seats_left = counter(seats)
local n = number_of(token)
local draw, size = fields[4], tonumber(fields[5] or '')
local prequeue = (draw == 'PENDING' or draw == 'DONE') and (not size or n <= size) and 1 or 0
local position = 0
if draw == 'DONE' and prequeue == 1 then position = drawn_place(drawpos, n) end
local function answer(state, detail)
  return {state, waiting, seats_left, status, detail or false, fields[2] or '0', fields[3] or false, prequeue,
    position, tonumber(fields[7] or 0) or 0, fields[8] or '', fields[11] or '0'}
end

local mark = redis.call('GET', booked)
local not_saved
if mark then
  if mark:sub(1, 1) ~= '-' then return answer('BOOKED', mark) end
  not_saved = mark:sub(2)
end
if n > counter(seq) or not issued(nonces, generation(fields[6]), token, n) then
  return answer('NOT_FOUND')  -- not a place of this line
end
if status == 'CLOSED' then return answer('EXPIRED') end

local now = now_ms()
if draw == 'PENDING' and prequeue == 1 then
  if is_set(leftpre, n) then return answer('NOT_FOUND') end
  -- Before the start, or drawing: the pre-queue has no order yet. (With drawSize not
  -- yet written, the start closes the pre-queue at the numbers issued so far.)
  local opens = tonumber(fields[3])
  if not opens then error(meta .. ': opensAt is not a number') end
  if not size and now < opens then return answer('PRE_QUEUE') end
  return answer('DRAWING')
end
local place = position > 0 and position or n
if is_set(left, place) then return answer('NOT_FOUND') end
if place <= head then
  local ends, to = window_of(windows, place)
  local open = ends and ends > now and not is_set(booked_places, place)
  if open then
    local claim = claim_of(claims, claimed, to, place, now)
    if claim == 'PASSED' and not (own == '1' and fields[9] == '1'
        and claim_regain(claims, claimed, active, to, place, tonumber(fields[10] or 0) or 0)) then
      return answer('UNCLAIMED', ends)
    end
    if claim == 'CLAIM' and own == '1' then redis.call('SETBIT', claimed, place, 1) end
  end
  if not_saved then return answer('NOT_SAVED', open and (not_saved .. ':' .. ends) or not_saved) end
  if open then return answer('ACTIVE', ends) end
  return answer('EXPIRED')  -- admitted, and the window passed (or a booking was cancelled)
end
local ahead = place - 1 - head - ones(left, head + 1, place - 1)
return answer('WAITING', ahead + 1)
