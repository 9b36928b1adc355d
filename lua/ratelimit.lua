-- Count a request against a fixed window (the seed's per-IP, per-second limit), in
-- each unit the client counts as (ticketing/ratelimit.py: client_units), each with
-- its limit: the request is allowed when every counter is under its limit, and
-- only then counted in each. A refused request counts nowhere, so that a client
-- past its own limit does not use up what its /48's other clients may do.
-- Counting and arming the expiry happen together, so a crash between the two
-- cannot leave a counter that never resets.
--
-- KEYS[1] counter  STRING  the client's requests in the current window (an IPv4
--                          address, an IPv6 /64, or whatever else is counted: a token)
-- KEYS[2] site     STRING  an IPv6 client: its /48's requests; absent otherwise
-- ARGV[1] limit    requests KEYS[1] may make per window
-- ARGV[2] window   length in ms
-- ARGV[3] limit    requests KEYS[2] may make per window (with KEYS[2])
--
-- Returns {allowed (1/0), ms until the window of the counter that refused resets}.
-- Validates its arguments and reads every counter before its first write: a counter
-- of the wrong type or not a whole number fails the script with nothing counted.
local window = tonumber(ARGV[2])
local limits = {tonumber(ARGV[1]), tonumber(ARGV[3])}
if not window or window ~= math.floor(window) or window <= 0 then
  error('window must be a positive whole number of ms')
end
local counts = {}
for i = 1, #KEYS do
  if not limits[i] then error('limit ' .. i .. ' must be a number') end
  local n = redis.call('GET', KEYS[i]) or '0'
  if not n:match('^-?%d+$') then error(KEYS[i] .. ' is not a count') end  -- INCR would refuse it
  counts[i] = tonumber(n)
end
for i = 1, #KEYS do
  if counts[i] >= limits[i] then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      -- A counter without an expiry (restored from a snapshot, or set by hand) would
      -- refuse this client forever: arm it now.
      redis.call('PEXPIRE', KEYS[i], window)
      ttl = window
    end
    return {0, ttl}
  end
end
for i = 1, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], window) end
end
return {1, 0}
