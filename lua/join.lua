-- Give a person a place at the back of the waiting line, unless they have one.
-- join passes no token: a new person. rejoin passes the token the client kept, so
-- F5 keeps the place (or the active window); an expired or unknown place goes to
-- the back with a new token, and the old token stays what it was.
-- Arrival order is one counter (KEYS[2]) and Redis' own clock: no app server's
-- wall clock takes part, and two arrivals never share a number.
-- A new token is a UUIDv8 that carries the line's generation (meta gen), its
-- arrival number and an HMAC-SHA1 over the event, the generation and that number
-- (layout: queue_app/tokens.py); the number is only known here, so it is signed
-- here, with the pads of the app's key. Nothing is stored for the new place: the
-- line is counters (lua/lib/line.lua), and the token is the place.
--
-- An event may ask more of a new place (docs/fairness.md), each read from meta:
-- requireAccount: a signed-in account, which holds one live place (asking again
-- answers that place, HELD); maxPerAddress (events without accounts): at most that
-- many live places per client address (an IPv4 address or an IPv6 /64), and
-- ARGV[12] times that per IPv6 /48 (TOO_MANY_PLACES); proofOfWork: a solved
-- challenge, used once, issued when the event asked no less than it asks now
-- (PROOF_OF_WORK; a payload sent that did not verify is refused there too, after
-- the event and the cap, so that it never hides an unknown event). Only these
-- events keep something per place: an owner's tokens, in the small hash its id
-- picks (token -> owner). An owner's live places are those of its tokens still
-- waiting or in their active window (a place booked in its window still counts:
-- its holder has it).
--
-- KEYS[1] meta    HASH    status, gen, requireAccount, proofOfWork, maxPerAddress, draw,
--                         opensAt, drawSize (written when this join closes the pre-queue)
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] left    STRING  bitmap of the places whose person left
-- KEYS[4] leftpre STRING  bitmap of the pre-queue numbers whose person left before the draw
-- KEYS[5] windows ZSET    the admission log (lua/lib/line.lua)
-- KEYS[6] booked  STRING  rejoin: reservation id, once the old token has booked ('-'
--                         and an id: a booking that was not saved, which is no booking)
-- KEYS[7] popped  STRING  places already taken off the head of the line
-- KEYS[8] accountbucket HASH the owner hash of the account's tokens
-- KEYS[9] addressbucket HASH the owner hash of the client address's tokens
-- KEYS[10] proofs SET     marks of the proof-of-work solutions used (integers, so
--                         Redis keeps them 4 bytes each; the set expires with them)
-- KEYS[11] drawpos STRING drawn positions of the pre-queue's numbers, 4 bytes each
--                         (queue_app/draw.py)
-- KEYS[12] pre    STRING  the pre-queue's tokens, 16 bytes each, by arrival number
-- KEYS[13] bookedplaces STRING bitmap of the places whose token booked
-- KEYS[14] nonces STRING  the random bytes of each number's token, 2 bytes a number
-- KEYS[15] sitebucket HASH the owner hash of the client's IPv6 /48's tokens
-- ARGV[1] rejoin: the old token, 16 raw bytes; join: ''
-- ARGV[2] event id
-- ARGV[3] the key's inner HMAC pad, 64 bytes
-- ARGV[4] the key's outer HMAC pad, 64 bytes
-- ARGV[5] the signed-in account's id, or ''
-- ARGV[6] the client's address (packed IPv4, or the IPv6 /64), or ''
-- ARGV[7] the verified solution's mark (an integer), '' when none was sent, or '-'
--         when the payload sent did not verify (queue_app/proof.py says why)
-- ARGV[8] when KEYS[10] may expire (unix ms)
-- ARGV[9] two random bytes for the new token
-- ARGV[10] the difficulty the event asked when the solution's challenge was issued
--          (signed in the challenge), or '' when none was sent
-- ARGV[11] an IPv6 client's /48 (packed, 6 bytes), or ''
-- ARGV[12] how many times the places per address a /48 may hold
-- ARGV[13] '1': only ask whether the cap lets this client in (the challenge
--          endpoint's advice, before a proof of work is spent): {'MAY_JOIN'} where
--          the proof would be checked, nothing written; else ''
--
-- An event with a scheduled start (meta opensAt, draw = PENDING; docs/draw.md): a
-- join before the start enters the pre-queue, numbers 1..drawSize, drawn into the
-- line at the start; its token goes to KEYS[12], where the draw reads it. The first
-- join after the start closes the pre-queue (sets drawSize to the numbers issued so
-- far), and takes the next number, behind it. Once the draw is DONE, a pre-queue
-- number's place is its drawn position.
--
-- Returns {outcome, ...}: {'JOINED', joinedAtMs, token, prequeue}; a rejoin that
-- keeps its place {'WAITING'|'ACTIVE', 0, prequeue}; an account's live place {'HELD',
-- 'WAITING'|'ACTIVE', token, prequeue}, where prequeue is 1 for a place of the
-- pre-queue, else 0; {'ALREADY_BOOKED', 0, reservationId}; {'TOO_MANY_PLACES', cap};
-- {'PROOF_OF_WORK', 'invalid'|'missing'|'used'|'easier'}; {'ACCOUNT_REQUIRED'}; {'EVENT_NOT_FOUND'};
-- {'EVENT_CLOSED'}; asking only, {'MAY_JOIN'}.
-- Validates every key before its first write (Redis keeps the writes done before an
-- error): a bad key fails the script with nothing changed.
-- needs: line
local old = ARGV[1]
local meta = redis.call('HMGET', KEYS[1], 'status', 'requireAccount', 'proofOfWork', 'maxPerAddress',
  'draw', 'opensAt', 'drawSize', 'gen')
local status = meta[1]
if not status then return {'EVENT_NOT_FOUND'} end
local gen = generation(meta[8])
if old ~= '' then
  local booked = redis.call('GET', KEYS[6])
  if booked and booked:sub(1, 1) ~= '-' then return {'ALREADY_BOOKED', 0, booked} end
end
if status == 'CLOSED' then return {'EVENT_CLOSED'} end

local popped = counter(KEYS[7])
local now = now_ms()

-- The pre-queue: open (before the start, nothing closed it yet), or its size.
local draw, size = meta[5], tonumber(meta[7] or '')
local closing = false
if draw == 'PENDING' and not size then
  local opens = tonumber(meta[6])
  if not opens then error(KEYS[1] .. ': opensAt is not a number') end
  if now >= opens then
    closing = true
    size = counter(KEYS[2])
  end
end
local function prequeue(n)
  if draw ~= 'PENDING' and draw ~= 'DONE' then return 0 end
  if not size or n <= size then return 1 end
  return 0
end

-- A token of this line is 'WAITING', 'ACTIVE' (in its window, booked or not), or
-- nil: of another generation, left, or admitted and its window passed.
local function live(token)
  local n = number_of(token)
  if not issued(KEYS[14], gen, token, n) then return nil end
  if draw == 'PENDING' and prequeue(n) == 1 then
    if is_set(KEYS[4], n) then return nil end
    return 'WAITING'
  end
  local place = (draw == 'DONE' and prequeue(n) == 1) and drawn_place(KEYS[11], n) or n
  if is_set(KEYS[3], place) then return nil end
  if place > popped then return 'WAITING' end
  local ends = window_of(KEYS[5], place)
  if ends and ends > now and not is_set(KEYS[13], place) then return 'ACTIVE' end
  return nil
end

if old ~= '' then
  local state = live(old)
  if state then return {state, 0, prequeue(number_of(old))} end
end

-- The live places of an owner, in the owner hash KEYS[i].
local function held(i, owner)
  local entries, kept = redis.call('HGETALL', KEYS[i]), {}
  for j = 1, #entries, 2 do
    if entries[j + 1] == owner and live(entries[j]) then kept[#kept + 1] = entries[j] end
  end
  return kept
end

-- Whose the new place is, and the owner hash it goes to (KEYS[index]; none: 0);
-- an IPv6 client's place goes to its /48's owner hash too (site).
local owner, index, site = '', 0, ''
if meta[2] == '1' then
  if ARGV[5] == '' then return {'ACCOUNT_REQUIRED'} end
  owner, index = 'u' .. ARGV[5], 8
  local place = held(8, owner)[1]
  if place then return {'HELD', live(place), place, prequeue(number_of(place))} end
else
  local cap = tonumber(meta[4] or 0) or 0
  if cap > 0 and ARGV[6] ~= '' then
    owner, index = 'a' .. ARGV[6], 9
    if #held(9, owner) >= cap then return {'TOO_MANY_PLACES', cap} end
    if ARGV[11] ~= '' then
      site = 'a' .. ARGV[11]
      local site_cap = cap * (tonumber(ARGV[12]) or 1)
      if #held(15, site) >= site_cap then return {'TOO_MANY_PLACES', site_cap} end
    end
  end
end
if ARGV[13] == '1' then return {'MAY_JOIN'} end
-- A payload that is no solution is refused whether or not the event asks for one.
if ARGV[7] == '-' then return {'PROOF_OF_WORK', 'invalid'} end
local difficulty = tonumber(meta[3] or 0) or 0
local proof = difficulty > 0
if proof then
  if ARGV[7] == '' then return {'PROOF_OF_WORK', 'missing'} end
  if (tonumber(ARGV[10]) or 0) < difficulty then return {'PROOF_OF_WORK', 'easier'} end
  if redis.call('SISMEMBER', KEYS[10], ARGV[7]) == 1 then return {'PROOF_OF_WORK', 'used'} end
end

-- The keys about to be written, checked first: a write that fails after INCR
-- would leave a number issued to nobody. The pattern is INCR's own rule (an integer
-- without leading zeros), kept within the token's 40 bits.
local last = redis.call('GET', KEYS[2])
if last and not (last == '0' or (#last <= 12 and last:match('^[1-9]%d*$'))) then
  error(KEYS[2] .. ' is not a number a token can carry')
end
if #ARGV[3] ~= 64 or #ARGV[4] ~= 64 or #ARGV[9] ~= 2 then error('key pads or nonce of the wrong size') end
redis.call('STRLEN', KEYS[14])
local into_pre = draw == 'PENDING' and not size
if into_pre and redis.call('STRLEN', KEYS[12]) ~= (tonumber(last) or 0) * 16 then
  error(KEYS[12] .. ' does not hold one token per number issued')
end
if index > 0 then redis.call('HLEN', KEYS[index]) end
if site ~= '' then redis.call('HLEN', KEYS[15]) end
if proof then redis.call('SCARD', KEYS[10]) end

if closing then redis.call('HSET', KEYS[1], 'drawSize', size) end
local seq = redis.call('INCR', KEYS[2])
local number = string.char(math.floor(seq / 4294967296) % 256, math.floor(seq / 16777216) % 256,
  math.floor(seq / 65536) % 256, math.floor(seq / 256) % 256, seq % 256)
-- HMAC-SHA1 = SHA1(opad .. SHA1(ipad .. message)); sha1hex answers hex, turned into
-- bytes 4 at a time (8 hex digits): half the cost of a byte at a time.
local nonce = gen .. ARGV[9]
local inner, h, k = {}, redis.sha1hex(ARGV[3] .. ARGV[2] .. '\0' .. nonce .. number), 0
for j = 1, 33, 8 do
  local n = tonumber(h:sub(j, j + 7), 16)
  inner[k + 1], inner[k + 2] = math.floor(n / 16777216), math.floor(n / 65536) % 256
  inner[k + 3], inner[k + 4] = math.floor(n / 256) % 256, n % 256
  k = k + 4
end
local mac = redis.sha1hex(ARGV[4] .. string.char(unpack(inner)))
local m = {}
for j = 1, 7 do m[j] = tonumber(mac:sub(2 * j - 1, 2 * j), 16) end
local token = nonce .. string.char(m[1], m[2], 0x80 + m[3] % 16, m[4], 0x80 + m[5] % 64) .. number
  .. string.char(m[6], m[7])
redis.call('SETRANGE', KEYS[14], seq * 2 - 2, ARGV[9])
if into_pre then redis.call('APPEND', KEYS[12], token) end
if index > 0 then redis.call('HSET', KEYS[index], token, owner) end
if site ~= '' then redis.call('HSET', KEYS[15], token, site) end
if proof then
  redis.call('SADD', KEYS[10], ARGV[7])
  redis.call('PEXPIREAT', KEYS[10], ARGV[8])
end
return {'JOINED', now, token, prequeue(seq)}
