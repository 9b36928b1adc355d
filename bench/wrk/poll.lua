-- GET /api/status/poll for real tokens, cycling through them (each thread from its
-- own offset).  wrk ... -s bench/wrk/poll.lua URL -- <tokens file> <eventId>
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")

local tokens, event_id, i

setup = common.setup
done = common.done

function init(args)
  tokens = common.read_lines(args[1])
  event_id = args[2]
  i = (id * 7919) % #tokens
end

function request()
  i = i % #tokens + 1
  return wrk.format("GET", "/api/status/poll?token=" .. tokens[i] .. "&eventId=" .. event_id)
end

function response(status, headers, body)
  common.count(status, body)
end
