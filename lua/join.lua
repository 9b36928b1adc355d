-- Give a person a place at the back of the waiting line, unless they have one.
-- join passes no token: a new person. rejoin passes the token the client kept, so
-- F5 keeps the place (or the active window); an expired or unknown place goes to
-- the back with a new token, and the old token stays what it was.
-- Arrival order is one counter (KEYS[2]) and Redis' own clock: no app server's
-- wall clock takes part, and two arrivals never share a number.
-- A new token is a UUIDv8 that carries its arrival number and an HMAC-SHA1 over
-- the event, its nonce and that number (layout: queue_app/tokens.py); the number is
-- only known here, so it is signed here, with the pads of the app's key.
--
-- An event may ask more of a new place (docs/fairness.md), each read from meta:
-- requireAccount: a signed-in account, which holds one live place (asking again
-- answers that place, HELD); maxPerAddress (events without accounts): at most that
-- many live places per client address (TOO_MANY_PLACES); proofOfWork: a solved
-- challenge, used once (PROOF_OF_WORK). Nothing is kept per place for it: a token's
-- index entry names its owner (the account, or the address when capped; '' on
-- other events), and an owner's tokens share one index hash, the one its id picks
-- (the new token's nonce begins with that hash's two bytes). An owner's places are
-- the entries of that hash that name it; live ones are waiting (the number the
-- token carries is past `popped`: in the index means not left) or active.
--
-- KEYS[1] meta    HASH    status, requireAccount, proofOfWork, maxPerAddress, draw,
--                         opensAt, drawSize (written when this join closes the pre-queue)
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] line    LIST    tokens in arrival order
-- KEYS[4] bucket  HASH    token index (token -> owner) of the new token's random nonce
-- KEYS[5] active  ZSET    token -> end of its active window (ms)
-- KEYS[6] booked  STRING  rejoin: reservation id, once the old token has booked
-- KEYS[7] popped  STRING  arrival numbers already taken off the head of the line
-- KEYS[8] oldbucket HASH  rejoin: the old token's index hash
-- KEYS[9] accountbucket HASH the index hash of the account's tokens
-- KEYS[10] addressbucket HASH the index hash of the client address's tokens
-- KEYS[11] proofs SET     marks of the proof-of-work solutions used (integers, so
--                         Redis keeps them 4 bytes each; the set expires with them)
-- KEYS[12] drawpos STRING drawn positions of the pre-queue's numbers, 4 bytes each
--                         (queue_app/draw.py)
-- KEYS[13] pre    STRING  the pre-queue's tokens, 16 bytes each, by arrival number
-- ARGV[1] rejoin: the old token, 16 raw bytes; join: ''
-- ARGV[2] nonce for a new token, 4 raw bytes
-- ARGV[3] event id
-- ARGV[4] the key's inner HMAC pad, 64 bytes
-- ARGV[5] the key's outer HMAC pad, 64 bytes
-- ARGV[6] the signed-in account's id, or ''
-- ARGV[7] the client's address (packed IPv4, or the IPv6 /64), or ''
-- ARGV[8] the verified solution's mark (an integer), or '' when none was sent
-- ARGV[9] when KEYS[11] may expire (unix ms)
-- ARGV[10] the two bytes that name KEYS[9] (a nonce's first two)
-- ARGV[11] the two bytes that name KEYS[10]
--
-- An event with a scheduled start (meta opensAt, draw = PENDING; docs/draw.md): a
-- join before the start enters the pre-queue, numbers 1..drawSize, drawn into the
-- line at the start; its token goes to KEYS[13] (where the draw reads it and
-- admission finds it by number), not to the LIST. The first join after the start closes the pre-queue (sets
-- drawSize to the numbers issued so far), and takes the next number, behind it.
-- Once the draw is DONE, a pre-queue number's place is its drawn position.
--
-- Returns {outcome, ...}: {'JOINED', joinedAtMs, token, prequeue}; a rejoin that
-- keeps its place {'WAITING'|'ACTIVE', 0, prequeue}; an account's live place {'HELD',
-- 'WAITING'|'ACTIVE', token, prequeue}, where prequeue is 1 for a place of the
-- pre-queue, else 0; {'ALREADY_BOOKED', 0, reservationId}; {'TOO_MANY_PLACES', cap};
-- {'PROOF_OF_WORK', 'missing'|'used'}; {'ACCOUNT_REQUIRED'}; {'EVENT_NOT_FOUND'};
-- {'EVENT_CLOSED'}.
-- Validates every key before its first write (Redis keeps the writes done before an
-- error): a bad key fails the script with nothing changed.
local old = ARGV[1]
local meta = redis.call('HMGET', KEYS[1], 'status', 'requireAccount', 'proofOfWork', 'maxPerAddress',
  'draw', 'opensAt', 'drawSize')
local status = meta[1]
if not status then return {'EVENT_NOT_FOUND'} end
if old ~= '' then
  local booked = redis.call('GET', KEYS[6])
  if booked then return {'ALREADY_BOOKED', 0, booked} end
end
if status == 'CLOSED' then return {'EVENT_CLOSED'} end

local popped = tonumber(redis.call('GET', KEYS[7]) or 0)
if not popped then error(KEYS[7] .. ' is not a number') end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

-- The arrival number a token carries (bytes 10-14).
local function number_of(token)
  local b1, b2, b3, b4, b5 = token:byte(10, 14)
  return (((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5
end

-- The pre-queue: open (before the start, nothing closed it yet), or its size.
local draw, size = meta[5], tonumber(meta[7] or '')
local closing = false
if draw == 'PENDING' and not size then
  local opens = tonumber(meta[6])
  if not opens then error(KEYS[1] .. ': opensAt is not a number') end
  if now >= opens then
    closing = true
    size = tonumber(redis.call('GET', KEYS[2]) or 0)
    if not size then error(KEYS[2] .. ' is not a number') end
  end
end
local function prequeue(n)
  if draw ~= 'PENDING' and draw ~= 'DONE' then return 0 end
  if not size or n <= size then return 1 end
  return 0
end
-- A number's place in line: a pre-queue number's drawn position once drawn.
local function place_of(n)
  if draw ~= 'DONE' or n > size then return n end
  local b1, b2, b3, b4 = redis.call('GETRANGE', KEYS[12], n * 4 - 4, n * 4 - 1):byte(1, 4)
  if not b4 then error(KEYS[12] .. ' holds no position for ' .. n) end
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end

-- A token of the index (so not left) is 'WAITING', 'ACTIVE', or nil: admitted and
-- its window passed, or booked.
local function live(token)
  if place_of(number_of(token)) > popped then return 'WAITING' end
  local expires = redis.call('ZSCORE', KEYS[5], token)
  if expires and tonumber(expires) > now then return 'ACTIVE' end
  return nil
end

if old ~= '' then
  local flag = prequeue(number_of(old))
  if redis.call('HGET', KEYS[8], old) and place_of(number_of(old)) > popped then return {'WAITING', 0, flag} end
  local expires = redis.call('ZSCORE', KEYS[5], old)
  if expires and tonumber(expires) > now then return {'ACTIVE', 0, flag} end
end

-- The live places of an owner, in the index hash KEYS[i]. (ZCARD: the active set
-- `live` may read is a sorted set, or the script fails here, before any write.)
local function held(i, owner)
  redis.call('ZCARD', KEYS[5])
  local entries, kept = redis.call('HGETALL', KEYS[i]), {}
  for j = 1, #entries, 2 do
    if entries[j + 1] == owner and live(entries[j]) then kept[#kept + 1] = entries[j] end
  end
  return kept
end

-- Whose the new place is, and the index hash it goes to (KEYS[index]).
local owner, index, nonce = '', 4, ARGV[2]
if meta[2] == '1' then
  if ARGV[6] == '' then return {'ACCOUNT_REQUIRED'} end
  owner, index, nonce = 'u' .. ARGV[6], 9, ARGV[10] .. ARGV[2]:sub(3)
  local place = held(9, owner)[1]
  if place then return {'HELD', live(place), place, prequeue(number_of(place))} end
else
  local cap = tonumber(meta[4] or 0) or 0
  if cap > 0 and ARGV[7] ~= '' then
    owner, index, nonce = 'a' .. ARGV[7], 10, ARGV[11] .. ARGV[2]:sub(3)
    if #held(10, owner) >= cap then return {'TOO_MANY_PLACES', cap} end
  end
end
local proof = (tonumber(meta[3] or 0) or 0) > 0
if proof then
  if ARGV[8] == '' then return {'PROOF_OF_WORK', 'missing'} end
  if redis.call('SISMEMBER', KEYS[11], ARGV[8]) == 1 then return {'PROOF_OF_WORK', 'used'} end
end

-- The keys about to be written, checked first: RPUSH into a line that is not a list
-- would fail after INCR, leaving a number issued to nobody. The pattern is INCR's
-- own rule (an integer without leading zeros), kept within the token's 40 bits.
local last = redis.call('GET', KEYS[2])
if last and not (last == '0' or (#last <= 12 and last:match('^[1-9]%d*$'))) then
  error(KEYS[2] .. ' is not a number a token can carry')
end
if #nonce ~= 4 or #ARGV[4] ~= 64 or #ARGV[5] ~= 64 then error('nonce or key pads of the wrong size') end
local into_pre = draw == 'PENDING' and not size
if into_pre then
  if redis.call('STRLEN', KEYS[13]) ~= (tonumber(last) or 0) * 16 then
    error(KEYS[13] .. ' does not hold one token per number issued')
  end
else
  redis.call('LLEN', KEYS[3])
end
redis.call('HLEN', KEYS[index])
if proof then redis.call('SCARD', KEYS[11]) end

if closing then redis.call('HSET', KEYS[1], 'drawSize', size) end
local seq = redis.call('INCR', KEYS[2])
local number = string.char(math.floor(seq / 4294967296) % 256, math.floor(seq / 16777216) % 256,
  math.floor(seq / 65536) % 256, math.floor(seq / 256) % 256, seq % 256)
-- HMAC-SHA1 = SHA1(opad .. SHA1(ipad .. message)); sha1hex answers hex, turned into
-- bytes 4 at a time (8 hex digits): half the cost of a byte at a time.
local inner, h, k = {}, redis.sha1hex(ARGV[4] .. ARGV[3] .. '\0' .. nonce .. number), 0
for j = 1, 33, 8 do
  local n = tonumber(h:sub(j, j + 7), 16)
  inner[k + 1], inner[k + 2] = math.floor(n / 16777216), math.floor(n / 65536) % 256
  inner[k + 3], inner[k + 4] = math.floor(n / 256) % 256, n % 256
  k = k + 4
end
local mac = redis.sha1hex(ARGV[5] .. string.char(unpack(inner)))
local m = {}
for j = 1, 7 do m[j] = tonumber(mac:sub(2 * j - 1, 2 * j), 16) end
local token = nonce .. string.char(m[1], m[2], 0x80 + m[3] % 16, m[4], 0x80 + m[5] % 64) .. number
  .. string.char(m[6], m[7])
if into_pre then
  redis.call('APPEND', KEYS[13], token)
else
  redis.call('RPUSH', KEYS[3], token)
end
redis.call('HSET', KEYS[index], token, owner)
if proof then
  redis.call('SADD', KEYS[11], ARGV[8])
  redis.call('PEXPIREAT', KEYS[11], ARGV[9])
end
return {'JOINED', now, token, prequeue(seq)}
