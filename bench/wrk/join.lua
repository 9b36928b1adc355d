-- POST /api/queue/join: every request a new person.  wrk ... -s bench/wrk/join.lua URL -- <eventId>
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")

setup = common.setup
done = common.done

function init(args)
  wrk.method = "POST"
  wrk.path = "/api/queue/join"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = '{"eventId":"' .. args[1] .. '"}'
end

function response(status, headers, body)
  common.count(status, body)
end
