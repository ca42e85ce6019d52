-- wrk_post.lua: wrk script for tests/bench/serve_http.
--
--   WRK_BODY_FILE=body.json wrk -s tests/bench/wrk_post.lua URL   POST the file as JSON
--   WRK_BODY_FILE=body.bin WRK_JSON_LEN=N \
--     WRK_CONTENT_TYPE=application/octet-stream wrk -s ...  URL   POST a binary request
--   WRK_BODY_FILE=body.json.gz WRK_CONTENT_ENCODING=gzip \
--     WRK_ACCEPT_ENCODING=gzip wrk -s ...  URL                    a gzip'ed body
--   wrk -s tests/bench/wrk_post.lua URL                           plain GET
--
-- With WRK_BODY_FILE set, every request is a POST with that file's bytes as
-- body and Content-Type: WRK_CONTENT_TYPE (default application/json); with
-- WRK_JSON_LEN set too, the header Inference-Header-Content-Length: N tells
-- the server that the body is the Open Inference Protocol's binary tensor
-- data extension (N bytes of JSON, raw tensors after them). The file is
-- sent byte for byte (a binary or compressed body too): WRK_CONTENT_ENCODING
-- names its Content-Encoding (e.g. gzip). WRK_ACCEPT_ENCODING, with or
-- without a body, sets Accept-Encoding (answers may come compressed). Without
-- WRK_BODY_FILE the requests are wrk's default GET. No request() /
-- response() hook is defined, so wrk's fast path is kept (the request is
-- built once, responses are not handed to Lua). done() prints one
-- machine-readable line after wrk's report:
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
    local ctype = os.getenv("WRK_CONTENT_TYPE")
    wrk.headers["Content-Type"] = (ctype and ctype ~= "") and ctype or "application/json"
    local json_len = os.getenv("WRK_JSON_LEN")
    if json_len and json_len ~= "" then
        wrk.headers["Inference-Header-Content-Length"] = json_len
    end
    local coding = os.getenv("WRK_CONTENT_ENCODING")
    if coding and coding ~= "" then
        wrk.headers["Content-Encoding"] = coding
    end
end
local accept = os.getenv("WRK_ACCEPT_ENCODING")
if accept and accept ~= "" then
    wrk.headers["Accept-Encoding"] = accept
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
