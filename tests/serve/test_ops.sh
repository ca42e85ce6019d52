#!/usr/bin/env bash
# The operator's endpoints and request handling over real HTTP with curl:
# Triton's statistics and model configuration extensions, W3C trace
# context (traceparent / tracestate) echoed and logged, request deadlines
# (the "timeout" parameter and batching.default_timeout_us: Triton's queue
# policy with REJECT), and JSON log lines read back with python3's json.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
REQ=$SRC/tests/py/make_request.py
PY=/usr/bin/python3
REPO=$WORK/models
TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
make_repo "$REPO"
check "a trained version to serve" test -s "$REPO/fashion-mlp/1/model.safetensors"
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

# ---- one daemon with JSON logs, HTTP answers logged (debug) ----
start_daemon json --models "$REPO" --set batching.max_queue_delay_us=2000 \
    --set log.format=json --set log.debug=http
check "daemon starts (JSON logs)" test -n "$PORT"

/usr/bin/python3 "$REQ" 0 8 --id req-stats > "$WORK/req8.json"
check "stats before any request: 200, the served version with zero counts" \
    test "$(code GET /v2/models/fashion-mlp/stats)" = 200 -a \
         "$(jq_get '[(m["version"], m["inference_count"], m["inference_stats"]["success"]["count"]) for m in d["model_stats"]]')" = "[('1', 0, 0)]"
for i in 1 2 3; do
    code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req8.json" > /dev/null
done
check "a bad request is 400" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary '{"inputs":[]}')" = 400
check "GET .../stats is 200" test "$(code GET /v2/models/fashion-mlp/stats)" = 200
check "stats: Triton's fields and counts" $PY - "$WORK/body" <<'PYEOF'
import json, sys, time
d = json.load(open(sys.argv[1]))
[m] = d["model_stats"]
assert m["name"] == "fashion-mlp" and m["version"] == "1", m
assert m["inference_count"] == 24, m["inference_count"]
assert 1 <= m["execution_count"] <= 3, m["execution_count"]
s = m["inference_stats"]
for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
          "cache_hit", "cache_miss"):
    assert set(s[k]) == {"count", "ns"}, (k, s[k])
assert s["success"]["count"] == 3 and s["success"]["ns"] > 0, s["success"]
assert s["fail"]["count"] == 1, s["fail"]
assert s["queue"]["count"] == 3 and s["compute_infer"]["count"] == 3, s
assert s["compute_infer"]["ns"] > 0, s["compute_infer"]
assert s["success"]["ns"] >= s["compute_infer"]["ns"], s
assert abs(m["last_inference"] / 1000 - time.time()) < 600, m["last_inference"]
b = m["batch_stats"]
assert b and sum(e["compute_infer"]["count"] for e in b) == m["execution_count"], b
assert sum(e["batch_size"] * e["compute_infer"]["count"] for e in b) == 24, b
assert all(e["compute_infer"]["ns"] > 0 for e in b), b
PYEOF
check "GET .../versions/1/stats names version 1" \
    test "$(code GET /v2/models/fashion-mlp/versions/1/stats)" = 200 -a \
         "$(jq_get '[m["version"] for m in d["model_stats"]]')" = "['1']"
check "stats of an unknown model: 404 with an error" \
    test "$(code GET /v2/models/nosuch/stats)" = 404 -a -n "$(jq_get 'd["error"]')"
check "stats of an unknown version: 404" test "$(code GET /v2/models/fashion-mlp/versions/9/stats)" = 404
check "stats is GET only (405)" test "$(code POST /v2/models/fashion-mlp/stats)" = 405

check "GET .../config is 200" test "$(code GET /v2/models/fashion-mlp/config)" = 200
check "config: Triton's model configuration" $PY - "$WORK/body" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["name"] == "fashion-mlp" and c["max_batch_size"] == 64, c
[i] = c["input"]
assert i["data_type"] == "TYPE_FP32" and i["dims"] == [1, 28, 28], i
o = {x["name"]: x for x in c["output"]}
assert o["probabilities"]["data_type"] == "TYPE_FP32" and o["probabilities"]["dims"] == [10], o
assert o["label"]["data_type"] == "TYPE_STRING" and o["class"]["data_type"] == "TYPE_INT64", o
db = c["dynamic_batching"]
assert db["max_queue_delay_microseconds"] == 2000, db
q = db["default_queue_policy"]
assert q["timeout_action"] == "REJECT" and q["default_timeout_microseconds"] == 0, q
assert q["max_queue_size"] == 4096, q
PYEOF
check "config of an unknown model: 404" test "$(code GET /v2/models/nosuch/config)" = 404
check "config of an unknown version: 404" \
    test "$(code GET /v2/models/fashion-mlp/versions/7/config)" = 404
check "server metadata lists the statistics and model_configuration extensions" \
    test "$(code GET /v2)" = 200 -a \
         "$(jq_get '"statistics" in d["extensions"] and "model_configuration" in d["extensions"]')" = True

# ---- trace context ----
/usr/bin/python3 "$REQ" 0 1 --id req-trace > "$WORK/req1.json"
curl -s -D "$WORK/hdrs" -o "$WORK/body" "$URL/v2/models/fashion-mlp/infer" \
    -H "traceparent: $TP" -H "tracestate: congo=t61rcWkgMzE" --data-binary @"$WORK/req1.json"
check "the answer carries traceparent back" grep -qix "traceparent: $TP"$'\r' "$WORK/hdrs"
check "... and tracestate" grep -qix "tracestate: congo=t61rcWkgMzE"$'\r' "$WORK/hdrs"
curl -s -D "$WORK/hdrs2" -o /dev/null "$URL/v2/models/fashion-mlp/infer" \
    -H "traceparent: ${TP^^}" -H "tracestate: a=b" --data-binary @"$WORK/req1.json"
check "an invalid (uppercase) traceparent is ignored, tracestate with it" \
    sh -c "! grep -qi '^trace' '$WORK/hdrs2'"
curl -s -D "$WORK/hdrs3" -o /dev/null "$URL/v2/models/nosuch/stats" -H "traceparent: $TP"
check "an error answer carries it too" grep -qix "traceparent: $TP"$'\r' "$WORK/hdrs3"

# ---- JSON log lines ----
check "daemon stops cleanly" stop_daemon
check "every log line is a JSON object with time, level, subsystem, message" \
    $PY - "$LOG" <<'PYEOF'
import json, sys
n = 0
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert {"time", "level", "priority", "subsystem", "message"} <= set(o), o
    assert o["time"].endswith("Z") and o["level"] in ("err", "warning", "notice", "info", "debug"), o
    n += 1
assert n > 5, n
PYEOF
check "the traced request's line names its request id, model and trace id" $PY - "$LOG" <<'PYEOF'
import json, sys
hits = [o for o in map(json.loads, open(sys.argv[1]))
        if o.get("request_id") == "req-trace" and o.get("trace_id") == "4bf92f3577b34da6a3ce929d0e0e4736"]
assert hits and all(h["model"] == "fashion-mlp" and h["subsystem"] == "http" for h in hits), hits
PYEOF

# ---- deadlines: batches wait 2 s to fill (not eager: a lone request waits
# too); the default timeout is 20 ms ----
start_daemon deadline --models "$REPO" --set batching.max_queue_delay_us=2000000 \
    --set batching.eager=false --set batching.default_timeout_us=20000
check "daemon starts (deadlines)" test -n "$PORT"
/usr/bin/python3 - "$WORK/req1.json" "$WORK/req-t.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); r["id"] = "req-late"; r["parameters"] = {"timeout": 1000}
json.dump(r, open(sys.argv[2], "w"))
PYEOF
check "a request with timeout 1000 us queued past it: 503" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req-t.json" -H "traceparent: $TP")" = 503
check "... saying its timeout expired" sh -c "grep -q 'timeout expired' '$WORK/body'"
check "a request under the default timeout (20 ms) queued past it: 503" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 503
/usr/bin/python3 - "$WORK/req1.json" "$WORK/req-long.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); r["parameters"] = {"timeout": 60000000}
json.dump(r, open(sys.argv[2], "w"))
PYEOF
check "a request's own timeout (60 s) overrides the default: 200 once its batch runs" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req-long.json")" = 200
check "/metrics counts the two timeouts" \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_request_timeouts_total{model=\"fashion-mlp\",version=\"1\"} 2'"
check "... as failures too" \
    sh -c "curl -s $URL/metrics | grep -qx 'nv_inference_request_failure{model=\"fashion-mlp\",version=\"1\"} 2'"
check "stats: fail count 2, success 1" test "$(code GET /v2/models/fashion-mlp/stats)" = 200 -a \
    "$(jq_get '(d["model_stats"][0]["inference_stats"]["fail"]["count"], d["model_stats"][0]["inference_stats"]["success"]["count"])')" = "(2, 1)"
check "a timeout that is not an integer: 400" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary '{"parameters":{"timeout":"soon"},"inputs":[]}')" = 400
check "config shows the default timeout" test "$(code GET /v2/models/fashion-mlp/config)" = 200 -a \
    "$(jq_get 'd["dynamic_batching"]["default_queue_policy"]["default_timeout_microseconds"]')" = 20000
check "daemon stops cleanly" stop_daemon
check "a text log line names the request id and trace of the timed-out request" \
    grep -q "503.*timeout expired.*(id=req-late, trace=4bf92f3577b34da6a3ce929d0e0e4736)" "$LOG"

# ---- build info, model readiness, http.metrics_port ----
REPO2=$WORK/models2
mkdir -p "$REPO2/broken/1"
cp -r "$REPO/fashion-mlp" "$REPO2/"
sed 's/"name": *"fashion-mlp"/"name": "broken"/' "$SRC/models/fashion-mlp/model.json" \
    > "$REPO2/broken/model.json"
echo "not safetensors" > "$REPO2/broken/1/model.safetensors"
MPORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_daemon metrics --models "$REPO2" --set http.token=s3cret --set http.metrics_port=$MPORT \
    --set batching.eager=false --set batching.max_queue_delay_us=10000000
check "daemon starts (a token, metrics_port $MPORT)" test -n "$PORT"
check "the log names the metrics port" grep -q "metrics on http://127.0.0.1:$MPORT/metrics" "$LOG"
check "the main port's /metrics wants the token" test "$(code GET /metrics)" = 401
check "the metrics port serves /metrics without it" \
    test "$(curl -s -o "$WORK/m2.txt" -w '%{http_code}' "http://127.0.0.1:$MPORT/metrics")" = 200
check "... and nothing else" \
    test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MPORT/v2/models/fashion-mlp")" = 404
check "... nor POST /metrics" \
    test "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$MPORT/metrics")" = 405
check "promtool passes the scrape" "$SRC/tests/serve/promtool_check.sh" "$WORK/m2.txt"
check "dlserve_build_info: version, commit and backend" grep -qE \
    '^dlserve_build_info\{version="[0-9]+\.[0-9]+\.[0-9]+",commit="[^"]+",backend="cpu"\} 1$' "$WORK/m2.txt"
check "dlserve_model_ready: 1 for the served version" \
    grep -qx 'dlserve_model_ready{model="fashion-mlp",version="1"} 1' "$WORK/m2.txt"
check "dlserve_model_ready: 0 with the reason for the refused one" \
    grep -qE '^dlserve_model_ready\{model="broken",version="1",reason="[^"]+"\} 0$' "$WORK/m2.txt"
check "/status lists the refused version" sh -c \
    "curl -s -H 'Authorization: Bearer s3cret' $URL/status | $PY -c 'import json, sys; m = {x[\"name\"]: x for x in json.load(sys.stdin)[\"models\"]}; assert m[\"broken\"][\"refused\"][0][\"version\"] == 1, m'"
# A lone request waits up to max_queue_delay_us (10 s) for its batch to fill.
curl -s -o "$WORK/pending.out" -w '%{http_code}' -H 'Authorization: Bearer s3cret' \
    --data-binary @"$WORK/req1.json" "$URL/v2/models/fashion-mlp/infer" > "$WORK/pending.code" &
CURL=$!
pending() {
    for _ in $(seq 90); do
        curl -s "http://127.0.0.1:$MPORT/metrics" |
            grep -qx 'nv_inference_pending_request_count{model="fashion-mlp",version="1"} 1' &&
            return 0
        sleep 0.1
    done
    return 1
}
check "nv_inference_pending_request_count: 1 while it waits" pending
wait $CURL
check "... then it is answered" test "$(cat "$WORK/pending.code")" = 200
check "... and nothing is pending" sh -c "curl -s http://127.0.0.1:$MPORT/metrics | \
    grep -qx 'nv_inference_pending_request_count{model=\"fashion-mlp\",version=\"1\"} 0'"
check "metrics_port equal to port: refused at start" \
    sh -c "! '$DLSERVE' --models '$REPO2' --set http.port=$MPORT --set http.metrics_port=$MPORT 2>/dev/null"
check "daemon stops cleanly" stop_daemon

# ---- SIGTERM's grace: not ready, still serving, then the drain ----
# The checks of the grace run within its 6 s: once ready turns 503 (polled,
# 2 s at most), three requests and a grep, well under a second even on a
# loaded machine.
start_daemon grace --models "$REPO" --set http.shutdown_grace_s=6
check "daemon starts (shutdown_grace_s 6)" test -n "$PORT"
check "ready before SIGTERM" test "$(code GET /v2/health/ready)" = 200
kill -TERM $PID
for _ in $(seq 20); do
    [ "$(code GET /v2/health/ready -D "$WORK/hdrs-ready")" = 503 ] && break
    sleep 0.1
done
check "during the grace: ready is 503" test "$(code GET /v2/health/ready -D "$WORK/hdrs-ready")" = 503
check "... with Retry-After" grep -qi '^retry-after: 1' "$WORK/hdrs-ready"
check "during the grace: live is 200" test "$(code GET /v2/health/live)" = 200
check "during the grace: an infer request is served" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 200
check "the log says so" grep -q "not ready: serving for 6 s before stopping" "$LOG"
check "exits 0 after the grace" stop_daemon 20
start_daemon nograce --models "$REPO"
check "daemon starts (the default grace, not under systemd)" test -n "$PORT"
kill -TERM $PID
check "not under systemd the default grace is 0: exits at once" stop_daemon 5
check "... without a grace line" sh -c "! grep -q 'not ready: serving' '$LOG'"
finish
