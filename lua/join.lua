-- Give a person a place at the back of the waiting line, unless they have one.
-- join passes no token: a new person. rejoin passes the token the client kept, so
-- F5 keeps the place (or the active window); an expired or unknown place goes to
-- the back with a new token, and the old token stays what it was.
-- Arrival order is one counter (`seq`) and Redis' own clock: no app server's
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
-- site_factor times that per IPv6 /48 (TOO_MANY_PLACES); proofOfWork: a solved
-- challenge, used once, issued when the event asked no less than it asks now
-- (PROOF_OF_WORK; a payload sent that did not verify is refused there too, after
-- the event and the cap, so that it never hides an unknown event). Only these
-- events keep something per place: an owner's tokens, in the small hash its id
-- picks (token -> owner). An owner's live places are those of its tokens still
-- waiting or in their active window (a place booked in its window still counts:
-- its holder has it).
--
-- KEY meta        HASH    status, gen, requireAccount, proofOfWork, maxPerAddress, draw,
--                         opensAt, drawSize (written when this join closes the pre-queue),
--                         mode, admitPerSecond, windowSeconds, maxActive, claimSeconds,
--                         presaleUntil, priorityShare
-- KEY seq         STRING  last arrival number issued
-- KEY left        STRING  bitmap of the places whose person left
-- KEY leftpre     STRING  bitmap of the pre-queue numbers whose person left before the draw
-- KEY windows     ZSET    the admission log (lua/lib/line.lua)
-- KEY booked      STRING  rejoin: reservation id, once the old token has booked ('-'
--                         and an id: a booking that was not saved, which is no booking)
-- KEY popped      STRING  places already taken off the head of the line
-- KEY account_bucket HASH  the owner hash of the account's tokens
-- KEY address_bucket HASH  the owner hash of the client address's tokens
-- KEY proofs      SET     marks of the proof-of-work solutions used (integers, so
--                         Redis keeps them 4 bytes each; the set expires with them)
-- KEY drawpos     STRING  drawn positions of the pre-queue's numbers, 4 bytes each
--                         (queue_app/draw.py)
-- KEY pre         STRING  the pre-queue's tokens, 16 bytes each, by arrival number
-- KEY booked_places STRING bitmap of the places whose token booked
-- KEY nonces      STRING  the random bytes of each number's token, 2 bytes a number
-- KEY site_bucket HASH    the owner hash of the client's IPv6 /48's tokens
-- KEY holes       STRING  how many places after `popped` were left
-- KEY per_window  HASH    `to` of a window -> bookings made in it
-- KEY active      STRING  people in a window not yet passed who have not booked
-- KEY seats       STRING  seats left
-- KEY claims      HASH    per admission log entry, the time its people must come back by
-- KEY claimed     STRING  bitmap of the admitted places that came back
-- KEY codes       HASH    a presale's codes: the first 16 bytes of a code's hash -> uses left
--                         (queue_app/presale.py)
-- KEY lane_seq?   STRING  the priority lane's `seq`; and its other keys of a line, as the
-- KEY lane_nonces? STRING general line's of the same name (without lane_) are. Left out
-- KEY lane_popped? STRING on an event that never had a lane: the script answers
-- KEY lane_left?  STRING  {'LANE'} (ask again with them) if it needs them then
-- KEY lane_holes? STRING
-- KEY lane_windows? ZSET
-- KEY lane_per_window? HASH
-- KEY lane_claims? HASH
-- KEY lane_claimed? STRING
-- KEY lane_booked_places? STRING
-- ARG old  rejoin: the old token, 16 raw bytes; join: ''
-- ARG event_id  event id (a place of the priority lane is signed for event_id .. '~p')
-- ARG ipad  the key's inner HMAC pad, 64 bytes
-- ARG opad  the key's outer HMAC pad, 64 bytes
-- ARG account  the signed-in account's id, or ''
-- ARG address  the client's address (packed IPv4, or the IPv6 /64), or ''
-- ARG solution  the verified solution's mark (an integer), '' when none was sent, or '-'
--         when the payload sent did not verify (queue_app/proof.py says why)
-- ARG proofs_until  when `proofs` may expire (unix ms)
-- ARG nonce  two random bytes for the new token
-- ARG difficulty  the difficulty the event asked when the solution's challenge was issued
--          (signed in the challenge), or '' when none was sent
-- ARG site  an IPv6 client's /48 (packed, 6 bytes), or ''
-- ARG site_factor  how many times the places per address a /48 may hold
-- ARG ask  '1': only ask whether the cap lets this client in (the challenge
--          endpoint's advice, before a proof of work is spent): {'MAY_JOIN'} where
--          the proof would be checked, nothing written; else ''
-- ARG code  a presale code's field in `codes` (16 bytes), or '' when none was sent
-- ARG presale_pass  whether the signed-in account is on the event's presale allow-list:
--          '1' yes, '0' no, '' not asked yet (the script asks, with PRESALE_PASS)
--
-- An event with a scheduled start (meta opensAt, draw = PENDING; docs/draw.md): a
-- join before the start enters the pre-queue, numbers 1..drawSize, drawn into the
-- line at the start; its token goes to `pre`, where the draw reads it. The first
-- join after the start closes the pre-queue (sets drawSize to the numbers issued so
-- far), and takes the next number, behind it. Once the draw is DONE, a pre-queue
-- number's place is its drawn position.
--
-- A presale (meta presaleUntil, ms; docs/presale.md): until then a new place needs
-- the account on the allow-list or a code with a use left, spent with the place's
-- writes. A place kept (a rejoin, an account's live place) needs neither; after the
-- presale a code sent is ignored, unless the event has a priority lane.
--
-- The priority lane (meta priorityShare > 0, never with a scheduled start;
-- docs/modes.md): a second line of the event, with keys of its own (lane_*), that
-- the tick admits from ahead of the general line at that share of the rate
-- (lua/admit.lua). A presale's holders join it, in the presale and after it: an
-- account on the allow-list, or a code with a use left (a code that is not, sent
-- then, is refused as in the presale). Its tokens carry the top bit of their random
-- bytes set (the general line's, clear), and their random bytes are the lane's (a
-- token issued before the event had a lane may have the bit set too); an owner's
-- live places are counted over both lines. An event that has had a lane (meta
-- hasLane, kept once set) is joined with the lane's keys; without them the script
-- answers {'LANE'} first, having written nothing.
--
-- The event's mode (meta mode; docs/modes.md) decides whether a new place waits
-- for the tick. `queue` (or none): it does. `safety-net`: while nobody waits (every
-- number before it admitted or left), the event is OPEN with seats left, its active
-- people are under maxActive (0: no cap) and fewer than admitPerSecond were
-- admitted in this second's window entry, the new place is admitted here, as the
-- tick would admit it; as soon as one person waits, everyone after waits behind
-- them. `pass-through`: an OPEN event with seats left admits the whole line up to
-- and including the new place, in order, whatever the cap. `reject`: new places are
-- refused (EVENT_REJECTING, with the operator's message to the crowd); a rejoin
-- that keeps its place keeps it. Admitting here writes what a tick writes: `popped`,
-- `holes`, `active` and the admission log, in the newest entry when it is contiguous
-- and from this second (its window end, at most a second shorter than a full
-- window), else in a new entry. The new place
-- has come back already; on an event with a claim time (meta claimSeconds), the
-- others a pass-through admits must come back within it. A rejoin in the active
-- window is its person coming back (lua/lib/line.lua: claim_of); one whose claim
-- time ran out goes to the back.
--
-- Returns {outcome, ...}: {'JOINED', joinedAtMs, token, prequeue, admitted} (admitted
-- 1 when the place is ACTIVE already, else 0); a rejoin that
-- keeps its place {'WAITING'|'ACTIVE', 0, prequeue}; an account's live place {'HELD',
-- 'WAITING'|'ACTIVE', token, prequeue}, where prequeue is 1 for a place of the
-- pre-queue, else 0; {'ALREADY_BOOKED', 0, reservationId}; {'TOO_MANY_PLACES', cap};
-- {'PROOF_OF_WORK', 'invalid'|'missing'|'used'|'easier'}; {'ACCOUNT_REQUIRED'}; {'EVENT_NOT_FOUND'};
-- {'EVENT_CLOSED'}; {'EVENT_REJECTING', the operator's message (JSON, or '')}; {'PRESALE_CODE_REQUIRED'}, {'PRESALE_CODE_INVALID'},
-- {'PRESALE_CODE_USED_UP'}; {'PRESALE_PASS'} (say whether the account is on the
-- allow-list, and ask again); {'LANE'} (ask again with the lane's keys); asking
-- only, {'MAY_JOIN'}.
-- Validates every key before its first write (Redis keeps the writes done before an
-- error): a bad key fails the script with nothing changed.
-- needs: line
local fields = redis.call('HMGET', meta, 'status', 'requireAccount', 'proofOfWork', 'maxPerAddress',
  'draw', 'opensAt', 'drawSize', 'gen', 'mode', 'admitPerSecond', 'windowSeconds', 'maxActive', 'claimSeconds',
  'presaleUntil', 'priorityShare', 'hasLane')
local status = fields[1]
if not status then return {'EVENT_NOT_FOUND'} end
if not lane_seq and (fields[16] == '1' or (tonumber(fields[15] or 0) or 0) > 0) then return {'LANE'} end
local gen = generation(fields[8])
if old ~= '' then
  local booking = redis.call('GET', booked)
  if booking and booking:sub(1, 1) ~= '-' then return {'ALREADY_BOOKED', 0, booking} end
end
if status == 'CLOSED' then return {'EVENT_CLOSED'} end

local now = now_ms()

-- The two lines' keys; a token's line is told by the top bit of its byte 3.
local general = {seq = seq, nonces = nonces, popped = popped, left = left, holes = holes, windows = windows,
  per_window = per_window, claims = claims, claimed = claimed, booked_places = booked_places}
local priority  -- the lane's, made when a token of the lane or a join into it needs it
local function lane_line()
  priority = priority or {seq = lane_seq, nonces = lane_nonces, popped = lane_popped, left = lane_left,
    holes = lane_holes, windows = lane_windows, per_window = lane_per_window, claims = lane_claims,
    claimed = lane_claimed, booked_places = lane_booked_places, lane = true}
  return priority
end
local function line_of(token)
  if token:byte(3) >= 128 and lane_seq then
    local L = lane_line()
    if issued(L.nonces, gen, token, number_of(token)) then return L end
  end
  return general
end
local function head_of(L)
  L.head = L.head or counter(L.popped)
  return L.head
end
local function waiting(L)
  return counter(L.seq) - head_of(L) - counter(L.holes)
end

-- The pre-queue: open (before the start, nothing closed it yet), or its size.
local draw, size = fields[5], tonumber(fields[7] or '')
local closing = false
if draw == 'PENDING' and not size then
  local opens = tonumber(fields[6])
  if not opens then error(meta .. ': opensAt is not a number') end
  if now >= opens then
    closing = true
    size = counter(seq)
  end
end
local function prequeue(n, L)
  if L.lane or (draw ~= 'PENDING' and draw ~= 'DONE') then return 0 end
  if not size or n <= size then return 1 end
  return 0
end

-- A token of this line is 'WAITING', 'ACTIVE' (in its window, not booked, and
-- not past its claim time unclaimed), or nil: of another generation, left, or
-- admitted and its window passed. 'ACTIVE' comes with its place when this is the
-- person coming back (claim_of: CLAIM).
local function live(token)
  local n, L = number_of(token), line_of(token)
  if not issued(L.nonces, gen, token, n) then return nil end
  if draw == 'PENDING' and prequeue(n, L) == 1 then
    if is_set(leftpre, n) then return nil end
    return 'WAITING'
  end
  local place = (draw == 'DONE' and prequeue(n, L) == 1) and drawn_place(drawpos, n) or n
  if is_set(L.left, place) then return nil end
  if place > head_of(L) then return 'WAITING' end
  local ends, to = window_of(L.windows, place)
  if ends and ends > now and not is_set(L.booked_places, place) then
    local claim = claim_of(L.claims, L.claimed, to, place, now)
    if claim == 'PASSED' then return nil end  -- a grace is taken by a poll (the page's first)
    return 'ACTIVE', claim == 'CLAIM' and place or nil
  end
  return nil
end

if old ~= '' then
  local state, claiming = live(old)
  local mine = line_of(old)
  if claiming then redis.call('SETBIT', mine.claimed, claiming, 1) end
  if state then return {state, 0, prequeue(number_of(old), mine)} end
end
local mode = fields[9] or 'queue'
if mode == 'reject' then return {'EVENT_REJECTING', redis.call('HGET', meta, 'message') or ''} end

-- The live places of an owner, in the owner hash `bucket`.
local function held(bucket, owner)
  local entries, kept = redis.call('HGETALL', bucket), {}
  for j = 1, #entries, 2 do
    if entries[j + 1] == owner and live(entries[j]) then kept[#kept + 1] = entries[j] end
  end
  return kept
end

-- Whose the new place is, and the owner hash it goes to (none: nil); an IPv6
-- client's place goes to its /48's owner hash too (site_owner).
local owner, bucket, site_owner = '', nil, ''
if fields[2] == '1' then
  if account == '' then return {'ACCOUNT_REQUIRED'} end
  owner, bucket = 'u' .. account, account_bucket
  local place = held(bucket, owner)[1]
  if place then return {'HELD', live(place), place, prequeue(number_of(place), line_of(place))} end
else
  local cap = tonumber(fields[4] or 0) or 0
  if cap > 0 and address ~= '' then
    owner, bucket = 'a' .. address, address_bucket
    if #held(bucket, owner) >= cap then return {'TOO_MANY_PLACES', cap} end
    if site ~= '' then
      site_owner = 'a' .. site
      local site_cap = cap * (tonumber(site_factor) or 1)
      if #held(site_bucket, site_owner) >= site_cap then return {'TOO_MANY_PLACES', site_cap} end
    end
  end
end
if ask == '1' then return {'MAY_JOIN'} end
-- A payload that is no solution is refused whether or not the event asks for one.
if solution == '-' then return {'PROOF_OF_WORK', 'invalid'} end
local asked = tonumber(fields[3] or 0) or 0
local proof = asked > 0
if proof then
  if solution == '' then return {'PROOF_OF_WORK', 'missing'} end
  if (tonumber(difficulty) or 0) < asked then return {'PROOF_OF_WORK', 'easier'} end
  if redis.call('SISMEMBER', proofs, solution) == 1 then return {'PROOF_OF_WORK', 'used'} end
end

-- --- Presale and the priority lane: a pass, or a code with a use left (spent below,
-- with the writes) ---
local spend, L = false, general
local presale_until = tonumber(fields[14] or '')
local in_presale = presale_until and now < presale_until
local share = tonumber(fields[15] or 0) or error(meta .. ': priorityShare is not a number')
if share > 0 and draw then share = 0 end  -- no lane with a scheduled start
if (in_presale or share > 0) and presale_pass ~= '1' then
  -- An account on the allow-list spends no code: ask the caller first.
  if presale_pass == '' and account ~= '' then return {'PRESALE_PASS'} end
  if code ~= '' then
    local uses = redis.call('HGET', codes, code)
    if not uses then return {'PRESALE_CODE_INVALID'} end
    -- HINCRBY's own rule (an integer), checked here: it runs after the writes.
    if not uses:match('^%-?%d+$') or #uses > 18 then error(codes .. ': uses left is not a number') end
    if tonumber(uses) <= 0 then return {'PRESALE_CODE_USED_UP'} end
    spend = true
  elseif in_presale then
    return {'PRESALE_CODE_REQUIRED'}
  end
end
if share > 0 and (spend or presale_pass == '1') then L = lane_line() end
local head = head_of(L)
-- --- end of presale ---

-- The keys about to be written, checked first: a write that fails after INCR
-- would leave a number issued to nobody. The pattern is INCR's own rule (an integer
-- without leading zeros), kept within the token's 40 bits.
local last = redis.call('GET', L.seq)
if last and not (last == '0' or (#last <= 12 and last:match('^[1-9]%d*$'))) then
  error(L.seq .. ' is not a number a token can carry')
end
if #ipad ~= 64 or #opad ~= 64 or #nonce ~= 2 then error('key pads or nonce of the wrong size') end
redis.call('STRLEN', L.nonces)
local into_pre = draw == 'PENDING' and not size
if into_pre and redis.call('STRLEN', pre) ~= (tonumber(last) or 0) * 16 then
  error(pre .. ' does not hold one token per number issued')
end
if bucket then redis.call('HLEN', bucket) end
if site_owner ~= '' then redis.call('HLEN', site_bucket) end
if proof then redis.call('SCARD', proofs) end

-- Admitted here (safety-net, pass-through): read and checked before the first write.
local through, newest
if (mode == 'safety-net' or mode == 'pass-through') and status == 'OPEN' and draw ~= 'PENDING'
    and counter(seats) > 0 then
  local active_count = counter(active)
  local before = waiting(L)  -- waiting ahead of the new place
  -- Safety-net admits only while nobody waits in either line (lua/admit.lua admits the
  -- lane first, at its share).
  if mode == 'safety-net' and lane_seq and waiting(L == general and lane_line() or general) > 0 then
    before = -1
  end
  local window_ms = (tonumber(fields[11] or '') or error(meta .. ': windowSeconds is not a number')) * 1000
  local rate = tonumber(fields[10] or '') or error(meta .. ': admitPerSecond is not a number')
  local cap = tonumber(fields[12] or 0) or error(meta .. ': maxActive is not a number')
  local claim_ms = (tonumber(fields[13] or 0) or error(meta .. ': claimSeconds is not a number')) * 1000
  redis.call('HLEN', L.per_window)
  redis.call('HLEN', L.claims)
  redis.call('STRLEN', L.claimed)
  local entry = redis.call('ZRANGE', L.windows, -1, -1)[1]
  if entry then
    local to, from, ends, admitted = entry:match('^(%d+):(%d+):(%d+):(%d+)$')
    if not to then error(L.windows .. ' holds an entry that is not to:from:end:admitted') end
    if tonumber(to) == head and tonumber(ends) > now + window_ms - 1000 then
      newest = {entry = entry, to = to, from = from, ends = ends, admitted = tonumber(admitted)}
    end
  end
  local this_second = newest and newest.admitted or 0
  if mode == 'pass-through' then
    through = {admitted = before + 1, active = active_count, window_ms = window_ms, claim_ms = claim_ms}
  elseif before == 0 and (cap == 0 or active_count < cap) and this_second < rate then
    through = {admitted = 1, active = active_count, window_ms = window_ms, claim_ms = claim_ms}
  end
end

if closing then redis.call('HSET', meta, 'drawSize', size) end
local arrival = redis.call('INCR', L.seq)
local number = string.char(math.floor(arrival / 4294967296) % 256, math.floor(arrival / 16777216) % 256,
  math.floor(arrival / 65536) % 256, math.floor(arrival / 256) % 256, arrival % 256)
-- HMAC-SHA1 = SHA1(opad .. SHA1(ipad .. message)); sha1hex answers hex, turned into
-- bytes 4 at a time (8 hex digits): half the cost of a byte at a time.
local first = L.lane and bit.bor(nonce:byte(1), 128) or bit.band(nonce:byte(1), 127)
local prefix = gen .. string.char(first) .. nonce:sub(2)
local line = L.lane and event_id .. '~p' or event_id
local inner, h, k = {}, redis.sha1hex(ipad .. line .. '\0' .. prefix .. number), 0
for j = 1, 33, 8 do
  local n = tonumber(h:sub(j, j + 7), 16)
  inner[k + 1], inner[k + 2] = math.floor(n / 16777216), math.floor(n / 65536) % 256
  inner[k + 3], inner[k + 4] = math.floor(n / 256) % 256, n % 256
  k = k + 4
end
local mac = redis.sha1hex(opad .. string.char(unpack(inner)))
local m = {}
for j = 1, 7 do m[j] = tonumber(mac:sub(2 * j - 1, 2 * j), 16) end
local token = prefix .. string.char(m[1], m[2], 0x80 + m[3] % 16, m[4], 0x80 + m[5] % 64) .. number
  .. string.char(m[6], m[7])
redis.call('SETRANGE', L.nonces, arrival * 2 - 2, prefix:sub(3, 4))
if into_pre then redis.call('APPEND', pre, token) end
if bucket then redis.call('HSET', bucket, token, owner) end
if site_owner ~= '' then redis.call('HSET', site_bucket, token, site_owner) end
if proof then
  redis.call('SADD', proofs, solution)
  redis.call('PEXPIREAT', proofs, proofs_until)
end
if through then
  -- Places head+1..arrival: the waiting ones (pass-through) and this one, in order.
  local from, ends, admitted = head + 1, now + through.window_ms, through.admitted
  local claim_by = through.claim_ms > 0 and now + through.claim_ms or nil
  if newest then
    from, ends, admitted = newest.from, newest.ends, newest.admitted + admitted
    redis.call('ZREM', L.windows, newest.entry)
    local booked_in = redis.call('HGET', L.per_window, newest.to)
    if booked_in then
      redis.call('HDEL', L.per_window, newest.to)
      redis.call('HSET', L.per_window, arrival, booked_in)
    end
    claim_by = redis.call('HGET', L.claims, newest.to) or claim_by
    redis.call('HDEL', L.claims, newest.to)
  end
  log_admission(L.windows, L.claims, arrival, from, ends, admitted, claim_by)
  if claim_by then redis.call('SETBIT', L.claimed, arrival, 1) end
  redis.call('SET', L.popped, arrival)
  redis.call('SET', L.holes, 0)
  redis.call('SET', active, through.active + through.admitted)
end
if spend then redis.call('HINCRBY', codes, code, -1) end  -- presale
return {'JOINED', now, token, prequeue(arrival, L), through and 1 or 0}
