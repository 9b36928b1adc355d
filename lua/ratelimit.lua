-- Count requests against a fixed window (the seed's per-IP, per-second limit), in
-- each unit the client counts as (ticketing/ratelimit.py: client_units), each with
-- its limit: up to `count` requests are granted, as many as every counter has room
-- for, and only those are counted in each. A refused request counts nowhere, so
-- that a client past its own limit does not use up what its /48's other clients may
-- do. A process asks for more than one (`count`) to hold a lease it lets through
-- itself (ticketing/ratelimit.py: Leases); a lease never exceeds the limit.
-- Counting and arming the expiry happen together, so a crash between the two
-- cannot leave a counter that never resets.
--
-- KEY counter     STRING  the client's requests in the current window (an IPv4
--                          address, an IPv6 /64, or whatever else is counted: a token)
-- KEY site?       STRING  an IPv6 client: its /48's requests; absent otherwise
-- ARG limit       requests `counter` may make per window
-- ARG window      length in ms
-- ARG count       requests asked for (1 but for a lease)
-- ARG site_limit? requests `site` may make per window (with `site`)
--
-- Returns these, in this order (ticketing/ratelimit.py: Verdict):
-- REPLY granted   requests granted (and counted), 0 to `count`
-- REPLY reset_ms  ms until the window ends: of the counter that refused when none
--                 is granted, else the soonest of the counters'
-- Validates its arguments and reads every counter before its first write: a counter
-- of the wrong type or not a whole number fails the script with nothing counted.
local ms, want = tonumber(window), tonumber(count)
local counters, limits = {counter}, {tonumber(limit)}
if site then counters[2], limits[2] = site, tonumber(site_limit) end
if not ms or ms ~= math.floor(ms) or ms <= 0 then
  error('window must be a positive whole number of ms')
end
if not want or want ~= math.floor(want) or want <= 0 then
  error('count must be a positive whole number')
end
local counts = {}
for i, key in ipairs(counters) do
  if not limits[i] then error('limit ' .. i .. ' must be a number') end
  local n = redis.call('GET', key) or '0'
  if not n:match('^-?%d+$') then error(key .. ' is not a count') end  -- INCRBY would refuse it
  counts[i] = tonumber(n)
end
local grant = want
for i, key in ipairs(counters) do
  if counts[i] >= limits[i] then
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then
      -- A counter without an expiry (restored from a snapshot, or set by hand) would
      -- refuse this client forever: arm it now.
      redis.call('PEXPIRE', key, ms)
      ttl = ms
    end
    return {0, ttl}
  end
  grant = math.min(grant, limits[i] - counts[i])
end
local reset = ms
for i, key in ipairs(counters) do
  redis.call('INCRBY', key, grant)
  -- A new counter's window starts now; an old one without an expiry is armed too.
  local ttl = counts[i] == 0 and -1 or redis.call('PTTL', key)
  if ttl < 0 then redis.call('PEXPIRE', key, ms) else reset = math.min(reset, ttl) end
end
return {grant, reset}
