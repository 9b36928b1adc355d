-- Count a request against a fixed window (the seed's per-IP, per-second limit).
-- Counting and arming the expiry happen together, so a crash between the two
-- cannot leave a counter that never resets.
--
-- KEYS[1] counter  STRING  requests in the current window
-- ARGV[1] limit    requests allowed per window
-- ARGV[2] window   length in ms
--
-- Returns {allowed (1/0), ms until the window resets}.
-- Validates its arguments before its one write, INCR, which itself refuses a counter
-- of the wrong type or not an integer before changing it.
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
-- Checked first: a bad one would fail the comparison or PEXPIRE after INCR counted.
if not limit or not window or window ~= math.floor(window) or window <= 0 then
  error('limit must be a number and window a positive whole number of ms')
end
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], window) end
if n > limit then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then
    -- A counter without an expiry (restored from a snapshot, or set by hand) would
    -- refuse this client forever: arm it now.
    redis.call('PEXPIRE', KEYS[1], window)
    ttl = window
  end
  return {0, ttl}
end
return {1, 0}
