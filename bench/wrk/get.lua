-- A plain GET (the baseline view, /health), counted like the others.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local common = dofile(dir .. "common.lua")

setup = common.setup
done = common.done

function response(status, headers, body)
  common.count(status, body)
end
