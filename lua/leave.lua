-- Take a waiting person out of the line: their place becomes a hole, a bit of
-- `left`, which ranks and admission skip. Also appended to `leftlog`, 5 bytes a
-- leaver, which the web processes' caches read on (queue_app/line.py).
-- Before a scheduled start's draw (meta draw = PENDING), a pre-queue leaver is
-- marked by number in `leftpre` (logged with the top bit of the 5 bytes set); the
-- draw moves them to their drawn position (lua/draw_done.lua).
--
-- KEY meta        HASH    status, gen, draw, drawSize
-- KEY left        STRING  bitmap of the places whose person left
-- KEY leftpre     STRING  bitmap of the pre-queue numbers left before the draw
-- KEY leftlog     STRING  5 bytes per leaver, big-endian, in the order they left
-- KEY holes       STRING  how many places after `popped` were left
-- KEY popped      STRING  places already taken off the head of the line
-- KEY drawpos     STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEY nonces      STRING  the random bytes of each number's token, 2 bytes a number
-- ARG token    16 raw bytes
--
-- Returns 1 when removed, 0 when the token was not waiting, -1 for an unknown event.
-- Validates every key and value before its first write.
-- needs: line
local fields = redis.call('HMGET', meta, 'status', 'gen', 'draw', 'drawSize')
if not fields[1] then return -1 end
local head = counter(popped)
counter(holes)
redis.call('STRLEN', leftlog)
local n = number_of(token)
if not issued(nonces, generation(fields[2]), token, n) then return 0 end  -- not a place of this line
local size = tonumber(fields[4] or '')
local prequeue = (fields[3] == 'PENDING' or fields[3] == 'DONE') and (not size or n <= size)

local logged
if fields[3] == 'PENDING' and prequeue then
  if redis.call('SETBIT', leftpre, n, 1) == 1 then return 0 end  -- left before
  logged = n + 549755813888  -- 2^39: a number, not a place
else
  local place = n
  if fields[3] == 'DONE' and prequeue then place = drawn_place(drawpos, n) end
  if place <= head then return 0 end  -- admitted already: not waiting
  if redis.call('SETBIT', left, place, 1) == 1 then return 0 end  -- left before
  logged = place
end
redis.call('INCR', holes)
redis.call('APPEND', leftlog, log_entry(logged))
return 1
