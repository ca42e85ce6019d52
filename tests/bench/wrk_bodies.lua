-- wrk_bodies.lua: wrk script for tests/bench/text_serve: POSTs request
-- bodies in turn, one a line of WRK_BODIES (each thread starts at its own
-- line), as JSON.
--
--   WRK_BODIES=bodies.txt wrk -s tests/bench/wrk_bodies.lua URL
--
-- done() prints one machine-readable line after wrk's report:
--
--   WRKSTAT requests=N duration_us=D rps=R status=.. timeout=..

local bodies = {}
local path = os.getenv("WRK_BODIES")
assert(path, "WRK_BODIES is unset")
for line in assert(io.open(path)):lines() do
    bodies[#bodies + 1] = line
end
assert(#bodies > 0, "no bodies")
local threads, at = 0, 1

function setup(thread)
    threads = threads + 1
    thread:set("at", 1 + (threads - 1) * 997 % #bodies)
end

function init(args)
    at = tonumber(at) or 1
end

function request()
    local b = bodies[at]
    at = at % #bodies + 1
    return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, b)
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("WRKSTAT requests=%d duration_us=%d rps=%.1f status=%d timeout=%d\n",
                           summary.requests, summary.duration,
                           summary.requests / summary.duration * 1e6, e.status, e.timeout))
end
