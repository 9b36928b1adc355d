-- POST /api/booking with ACTIVE tokens, each token once: thread n of N takes every
-- N-th line of the file. A thread that runs out stops (and says so in BENCH_JSON).
--   wrk ... -s bench/wrk/booking.lua URL -- <tokens file> <eventId> <wrk threads>
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")

local mine, event_id, pos = {}, nil, 0

setup = common.setup
done = common.done

function init(args)
  local all = common.read_lines(args[1])
  event_id = args[2]
  local n = tonumber(args[3])
  for k, token in ipairs(all) do
    if (k - 1) % n == id then mine[#mine + 1] = token end
  end
end

function request()
  pos = pos + 1
  if pos > #mine then
    -- Out of tokens: stop this thread; the request returned here is never counted.
    exhausted = 1
    wrk.thread:stop()
    pos = #mine
  end
  local body = '{"token":"' .. mine[pos] .. '","seatCount":1,"eventId":"' .. event_id .. '"}'
  return wrk.format("POST", "/api/booking", {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  if exhausted == 0 then common.count(status, body) end
end
