-- Shared by the wrk scripts of bench/run.py: counts answers by HTTP status and by
-- error code (each thread), and prints one machine-readable line at the end:
--   BENCH_JSON {"requests":..,"duration_us":..,"latency_us":{..},"statuses":{..},..}
-- wrk runs setup() and done() in its main Lua state and the rest in one state per
-- thread; done() reads each thread's counters through thread:get().
local M = {}

local threads = {}

statuses = {}
codes = {}
exhausted = 0

function M.read_lines(path)
  local lines = {}
  local file = assert(io.open(path, "r"))
  for line in file:lines() do
    if line ~= "" then lines[#lines + 1] = line end
  end
  file:close()
  return lines
end

function M.setup(thread)
  thread:set("id", #threads)
  threads[#threads + 1] = thread
end

function M.count(status, body)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
  if status ~= 200 and body then
    local code = body:match('"code"%s*:%s*"([%w_]+)"') or "other"
    codes[code] = (codes[code] or 0) + 1
  end
end

local function object(tbl)
  local parts = {}
  for k, v in pairs(tbl) do parts[#parts + 1] = string.format('"%s":%s', k, tostring(v)) end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function merge(into, from)
  for k, v in pairs(from or {}) do into[k] = (into[k] or 0) + v end
end

function M.done(summary, latency, requests)
  local all_statuses, all_codes, all_exhausted = {}, {}, 0
  for _, thread in ipairs(threads) do
    merge(all_statuses, thread:get("statuses"))
    merge(all_codes, thread:get("codes"))
    all_exhausted = all_exhausted + (thread:get("exhausted") or 0)
  end
  local lat = {
    p50 = latency:percentile(50), p90 = latency:percentile(90), p99 = latency:percentile(99),
    mean = latency.mean, max = latency.max,
  }
  local errors = summary.errors
  io.write("BENCH_JSON {",
    string.format('"requests":%d,"duration_us":%d,"bytes":%d,', summary.requests, summary.duration,
      summary.bytes),
    '"latency_us":', object(lat), ",",
    '"errors":', object({connect = errors.connect, read = errors.read, write = errors.write,
      status = errors.status, timeout = errors.timeout}), ",",
    '"statuses":', object(all_statuses), ",",
    '"codes":', object(all_codes), ",",
    string.format('"exhausted_threads":%d', all_exhausted),
    "}\n")
end

return M
