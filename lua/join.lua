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
-- KEYS[1] meta    HASH    event status
-- KEYS[2] seq     STRING  last arrival number issued
-- KEYS[3] line    LIST    tokens in arrival order
-- KEYS[4] bucket  HASH    token -> arrival number, for the new token (its nonce's bucket)
-- KEYS[5] active  ZSET    rejoin: token -> end of its active window (ms)
-- KEYS[6] booked  STRING  rejoin: reservation id, once the old token has booked
-- KEYS[7] popped  STRING  arrival numbers already taken off the head of the line
-- KEYS[8] oldbucket HASH  rejoin: the old token's bucket
-- ARGV[1] rejoin: the old token, 16 raw bytes; join: ''
-- ARGV[2] nonce for a new token, 4 raw bytes
-- ARGV[3] event id
-- ARGV[4] the key's inner HMAC pad, 64 bytes
-- ARGV[5] the key's outer HMAC pad, 64 bytes
--
-- Returns {outcome, joinedAtMs, token or reservationId}; outcome is one of
-- JOINED (with the new token), WAITING, ACTIVE, ALREADY_BOOKED, EVENT_NOT_FOUND,
-- EVENT_CLOSED.
-- Validates every key before its first write (Redis keeps the writes done before an
-- error): a bad key fails the script with nothing changed.
local old = ARGV[1]
local status = redis.call('HGET', KEYS[1], 'status')
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
if old ~= '' then
  local state = redis.call('HGET', KEYS[8], old)
  if state then
    local number = tonumber(state)
    if not number then error(KEYS[8] .. ': the place is not a number') end
    if number > popped then return {'WAITING', 0} end
  end
  local expires = redis.call('ZSCORE', KEYS[5], old)
  if expires and tonumber(expires) > now then return {'ACTIVE', 0} end
end

-- The keys about to be written, checked first: RPUSH into a line that is not a list
-- would fail after INCR, leaving a number issued to nobody. The pattern is INCR's
-- own rule (an integer without leading zeros), kept within the token's 40 bits.
local last = redis.call('GET', KEYS[2])
if last and not (last == '0' or (#last <= 12 and last:match('^[1-9]%d*$'))) then
  error(KEYS[2] .. ' is not a number a token can carry')
end
if #ARGV[2] ~= 4 or #ARGV[4] ~= 64 or #ARGV[5] ~= 64 then error('nonce or key pads of the wrong size') end
redis.call('LLEN', KEYS[3])
redis.call('HLEN', KEYS[4])

local seq = redis.call('INCR', KEYS[2])
local number = string.char(math.floor(seq / 4294967296) % 256, math.floor(seq / 16777216) % 256,
  math.floor(seq / 65536) % 256, math.floor(seq / 256) % 256, seq % 256)
-- HMAC-SHA1 = SHA1(opad .. SHA1(ipad .. message)); sha1hex answers hex, turned into
-- bytes 4 at a time (8 hex digits): half the cost of a byte at a time.
local inner, h, k = {}, redis.sha1hex(ARGV[4] .. ARGV[3] .. '\0' .. ARGV[2] .. number), 0
for j = 1, 33, 8 do
  local n = tonumber(h:sub(j, j + 7), 16)
  inner[k + 1], inner[k + 2] = math.floor(n / 16777216), math.floor(n / 65536) % 256
  inner[k + 3], inner[k + 4] = math.floor(n / 256) % 256, n % 256
  k = k + 4
end
local mac = redis.sha1hex(ARGV[5] .. string.char(unpack(inner)))
local m = {}
for j = 1, 7 do m[j] = tonumber(mac:sub(2 * j - 1, 2 * j), 16) end
local token = ARGV[2] .. string.char(m[1], m[2], 0x80 + m[3] % 16, m[4], 0x80 + m[5] % 64) .. number
  .. string.char(m[6], m[7])
redis.call('RPUSH', KEYS[3], token)
redis.call('HSET', KEYS[4], token, seq)
return {'JOINED', now, token}
