-- wrk_post.lua: wrk script for tests/bench/serve_http.
--
--   WRK_BODY_FILE=body.json wrk -s tests/bench/wrk_post.lua URL   POST the file as JSON
--   wrk -s tests/bench/wrk_post.lua URL                           plain GET
--
-- With WRK_BODY_FILE set, every request is a POST with that file's bytes as
-- body and Content-Type: application/json; without it the requests are
-- wrk's default GET. No request() / response() hook is defined, so wrk's
-- fast path is kept (the request is built once, responses are not handed
-- to Lua). done() prints one machine-readable line after wrk's report:
--
--   WRKSTAT requests=N duration_us=D rps=R p50_us=.. p90_us=.. p99_us=..
--           max_us=.. mean_us=.. connect=.. read=.. write=.. status=.. timeout=..
--
-- (one line; status = responses that were not 2xx/3xx.)

local path = os.getenv("WRK_BODY_FILE")
if path and path ~= "" then
    local f = assert(io.open(path, "rb"))
    wrk.method = "POST"
    wrk.body = f:read("*a")
    f:close()
    wrk.headers["Content-Type"] = "application/json"
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "WRKSTAT requests=%d duration_us=%d rps=%.1f p50_us=%d p90_us=%d p99_us=%d " ..
        "max_us=%d mean_us=%.1f connect=%d read=%d write=%d status=%d timeout=%d\n",
        summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
        latency:percentile(50), latency:percentile(90), latency:percentile(99),
        latency.max, latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
