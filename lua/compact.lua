-- Take the run of holes at the head of the line off it: people who left while
-- everyone ahead of them was still waiting. Runs before each admission tick, in
-- calls of at most ARGV[1] holes, so that the tick (lua/admit.lua) finds someone
-- to admit at the head however many left, and stays O(batch).
-- The head of the line is always place popped + 1; a hole is a place in
-- `left`. Passing m holes moves `popped` by m and takes them out of `left`, so
-- waiting (seq - popped - |left|) and every rank stay what they were.
--
-- KEYS[1] popped  STRING  places already taken off the head of the line
-- KEYS[2] line    LIST    tokens (16 raw bytes) in arrival order
-- KEYS[3] left    ZSET    places of people who left the line (score = place)
-- KEYS[4] meta    HASH    draw, drawSize: nothing is compacted while a pre-queue waits
--                         for its draw; after it, places 1..drawSize are the drawn
--                         pre-queue (lua/admit.lua), not in `line`
-- ARGV[1] the most holes to pass in this call
--
-- Returns the holes passed (fewer than ARGV[1]: the head is now a person, or empty).
-- Validates every key before its first write.
local budget = tonumber(ARGV[1])
if not budget or budget < 1 then error('the budget must be a positive number') end
local meta = redis.call('HMGET', KEYS[4], 'draw', 'drawSize')
if meta[1] == 'PENDING' then return 0 end
local drawn = meta[1] == 'DONE' and tonumber(meta[2]) or 0
local popped = tonumber(redis.call('GET', KEYS[1]) or 0)
if not popped then error(KEYS[1] .. ' is not a number') end
local run = redis.call('ZRANGEBYSCORE', KEYS[3], popped + 1, popped + budget)
local passed = 0
for i, place in ipairs(run) do
  if tonumber(place) ~= popped + i then break end
  passed = i
end
if passed == 0 then return 0 end
local from_list = popped + passed - math.max(popped, drawn)
local length = redis.call('LLEN', KEYS[2])
if length < from_list then error(KEYS[2] .. ' is shorter than its holes') end
if from_list > 0 then redis.call('LTRIM', KEYS[2], from_list, -1) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], popped + 1, popped + passed)
redis.call('SET', KEYS[1], popped + passed)
return passed
