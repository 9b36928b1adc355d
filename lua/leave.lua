-- Take a waiting person out of the line: their place becomes a hole, a bit of
-- `left`, which ranks and admission skip. Also appended to `leftlog`, 5 bytes a
-- leaver, which the web processes' caches read on (queue_app/line.py).
-- Before a scheduled start's draw (meta draw = PENDING), a pre-queue leaver is
-- marked by number in `leftpre` (logged with the top bit of the 5 bytes set); the
-- draw moves them to their drawn position (lua/draw_done.lua).
--
-- KEYS[1] meta    HASH    status, gen, draw, drawSize
-- KEYS[2] left    STRING  bitmap of the places whose person left
-- KEYS[3] leftpre STRING  bitmap of the pre-queue numbers left before the draw
-- KEYS[4] leftlog STRING  5 bytes per leaver, big-endian, in the order they left
-- KEYS[5] holes   STRING  how many places after `popped` were left
-- KEYS[6] popped  STRING  places already taken off the head of the line
-- KEYS[7] drawpos STRING  drawn positions of the pre-queue's numbers, 4 bytes each
-- KEYS[8] nonces  STRING  the random bytes of each number's token, 2 bytes a number
-- ARGV[1] token, 16 raw bytes
--
-- Returns 1 when removed, 0 when the token was not waiting, -1 for an unknown event.
-- Validates every key and value before its first write.
-- needs: line
local meta = redis.call('HMGET', KEYS[1], 'status', 'gen', 'draw', 'drawSize')
if not meta[1] then return -1 end
local popped = counter(KEYS[6])
counter(KEYS[5])
redis.call('STRLEN', KEYS[4])
local n = number_of(ARGV[1])
if not issued(KEYS[8], generation(meta[2]), ARGV[1], n) then return 0 end  -- not a place of this line
local size = tonumber(meta[4] or '')
local prequeue = (meta[3] == 'PENDING' or meta[3] == 'DONE') and (not size or n <= size)

local logged
if meta[3] == 'PENDING' and prequeue then
  if redis.call('SETBIT', KEYS[3], n, 1) == 1 then return 0 end  -- left before
  logged = n + 549755813888  -- 2^39: a number, not a place
else
  local place = n
  if meta[3] == 'DONE' and prequeue then place = drawn_place(KEYS[7], n) end
  if place <= popped then return 0 end  -- admitted already: not waiting
  if redis.call('SETBIT', KEYS[2], place, 1) == 1 then return 0 end  -- left before
  logged = place
end
redis.call('INCR', KEYS[5])
redis.call('APPEND', KEYS[4], string.char(math.floor(logged / 4294967296) % 256,
  math.floor(logged / 16777216) % 256, math.floor(logged / 65536) % 256, math.floor(logged / 256) % 256,
  logged % 256))
return 1
