-- Count a request against a fixed window (the seed's per-IP, per-second limit).
-- Counting and arming the expiry happen together, so a crash between the two
-- cannot leave a counter that never resets.
--
-- KEYS[1] counter  STRING  requests in the current window
-- ARGV[1] limit    requests allowed per window
-- ARGV[2] window   length in ms
--
-- Returns {allowed (1/0), ms until the window resets}.
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n > tonumber(ARGV[1]) then return {0, redis.call('PTTL', KEYS[1])} end
return {1, 0}
