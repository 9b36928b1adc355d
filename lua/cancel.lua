-- Return a cancelled reservation's seats, exactly once however often it is retried
-- (the request, then the periodic retry after a Redis outage).
--
-- KEYS[1] seats     STRING  seats left
-- KEYS[2] booked    STRING  reservation id of the token
-- KEYS[3] returned  STRING  set once this reservation's seats are back
-- ARGV[1] reservation id
-- ARGV[2] seats
--
-- Returns seats left, or -1 when the seats had already been returned.
if not redis.call('SET', KEYS[3], '1', 'NX', 'EX', 604800) then return -1 end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return redis.call('INCRBY', KEYS[1], ARGV[2])
