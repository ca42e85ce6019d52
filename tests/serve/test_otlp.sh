#!/usr/bin/env bash
# OpenTelemetry spans over OTLP/HTTP JSON, received by a minimal collector
# (otlp_receiver.py): an HTTP inference's server span with its queue,
# compute and answer children, parented on the request's traceparent (a
# new trace without one); a Kafka record's consumer span, parented on its
# traceparent header; resource and span attributes; sampling by [trace]
# rate and Triton's trace extension (GET|POST /v2[/models/{m}]/trace/setting)
# changed live: rate 0 exports nothing, rate "2" every second request, a
# model's level OFF; bad settings refused; a full queue drops spans and
# counts them without slowing a request, and stopping sends what is queued.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
REQ=$SRC/tests/py/make_request.py
SPANS=$WORK/spans.jsonl
TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
make_repo "$WORK/repo"
check "a trained version to serve" test -s "$WORK/repo/fashion-mlp/1/model.safetensors"
$PY "$REQ" 0 2 --id traced > "$WORK/req.json"

$PY "$SRC/tests/serve/otlp_receiver.py" "$WORK/rport" "$SPANS" &
RPID=$!
trap 'kill -9 ${PID:-} $RPID 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
for _ in $(seq 100); do [ -s "$WORK/rport" ] && break; sleep 0.1; done
check "the OTLP receiver listens" test -s "$WORK/rport"
ENDPOINT=http://127.0.0.1:$(cat "$WORK/rport")/v1/traces
touch "$SPANS"

# infer TRACEPARENT|-: one request (with that traceparent); prints its code.
infer() {
    local h=()
    [ "$1" != - ] && h=(-H "traceparent: $1")
    code POST /v2/models/fashion-mlp/infer "${h[@]}" --data-binary @"$WORK/req.json"
}
# tp N: a traceparent whose trace id ends in N (16 hex digits of its own).
tp() { printf '00-%032x-%016x-01' "$1" "$((0x1000 + $1))"; }
# arrived TRACE_ID [COUNT]: waits (10 s at most) for COUNT (1) root spans of the trace.
arrived() {
    for _ in $(seq 100); do
        [ "$(roots "$1")" -ge "${2:-1}" ] && return 0
        sleep 0.1
    done
    return 1
}
# roots TRACE_ID: how many server or consumer spans of the trace arrived.
roots() {
    $PY -c 'import json,sys
n = sum(1 for l in open(sys.argv[1]) for s in [json.loads(l)["span"]]
        if s["traceId"] == sys.argv[2] and s["kind"] in (2, 5))
print(n)' "$SPANS" "$1"
}
tid() { echo "$1" | cut -d- -f2; }

check "the mock cluster is up" start_mock in:2 out:2 dlq:2
check "daemon exports to the receiver (and reads Kafka)" start_kafka_daemon trace \
    --set trace.otlp_endpoint="$ENDPOINT" --set trace.flush_ms=50 --set models.watch=false \
    --set kafka.input_topics=in --set kafka.output_topic=out --set kafka.dead_letter_topic=dlq

# ---- an HTTP inference: its spans, ids and attributes --------------------------
check "a traced request: 200" test "$(infer "$TP")" = 200
check "... its spans arrive" arrived "$(tid "$TP")"
check "a request without traceparent: 200" test "$(infer -)" = 200
# others: root spans of traces other than TRACE_ID that arrived
others() {
    $PY -c 'import json,sys
print(sum(1 for l in open(sys.argv[1]) for s in [json.loads(l)["span"]]
          if s["traceId"] != sys.argv[2] and s["kind"] == 2))' "$SPANS" "$1"
}
# its spans come within a flush (50 ms); waited for, 10 s at most
for _ in $(seq 100); do [ "$(others "$(tid "$TP")")" -ge 1 ] && break; sleep 0.1; done
check "spans: names, parents, ids, attributes" $PY - "$SPANS" "$TP" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tp = sys.argv[2]
trace_id, parent_id = tp.split("-")[1], tp.split("-")[2]
mine = [r["span"] for r in rows if r["span"]["traceId"] == trace_id]
names = sorted(s["name"] for s in mine)
assert names == ["POST /v2/models/{model}/infer", "answer", "compute", "queue"], names
[root] = [s for s in mine if s["kind"] == 2]
assert root["parentSpanId"] == parent_id, root
assert len(root["spanId"]) == 16 and root["spanId"] != parent_id, root
for s in mine:
    if s is not root:
        assert s["parentSpanId"] == root["spanId"] and s["kind"] == 1, s
        assert int(root["startTimeUnixNano"]) <= int(s["startTimeUnixNano"]) \
            <= int(s["endTimeUnixNano"]) <= int(root["endTimeUnixNano"]), (root, s)
a = root["attributes"]
assert a["dlserve.model"] == "fashion-mlp" and a["dlserve.model_version"] == 1, a
assert a["http.response.status_code"] == 200 and a["http.request.method"] == "POST", a
assert root["status"]["code"] == 0, root
import time
assert abs(int(root["startTimeUnixNano"]) / 1e9 - time.time()) < 60, root
for r in rows:
    assert r["resource"]["service.name"] == "dlserve", r["resource"]
# the request without traceparent: a trace of its own, a root without parent
other = [r["span"] for r in rows if r["span"]["traceId"] != trace_id and r["span"]["kind"] == 2]
assert len(other) == 1 and "parentSpanId" not in other[0], other
assert len(other[0]["traceId"]) == 32 and other[0]["traceId"] != "0" * 32, other
PYEOF

# ---- Kafka: a record's consumer span ------------------------------------------
KTP=$(tp 77)
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count 1 --header "traceparent=$KTP" > /dev/null
check "a traced Kafka record's span arrives" arrived "$(tid "$KTP")"
check "... consumer span: topic, partition, offset, model; queue/compute/answer" \
    $PY - "$SPANS" "$KTP" <<'PYEOF'
import json, sys
tp = sys.argv[2]
mine = [json.loads(l)["span"] for l in open(sys.argv[1])]
mine = [s for s in mine if s["traceId"] == tp.split("-")[1]]
[root] = [s for s in mine if s["kind"] == 5]
assert root["name"] == "in process" and root["parentSpanId"] == tp.split("-")[2], root
a = root["attributes"]
assert a["messaging.system"] == "kafka" and a["messaging.destination.name"] == "in", a
assert a["messaging.destination.partition.id"] in ("0", "1"), a
assert a["messaging.kafka.offset"] == 0, a
assert a["dlserve.model"] == "fashion-mlp" and a["dlserve.model_version"] == 1, a
assert sorted(s["name"] for s in mine if s is not root) == ["answer", "compute", "queue"], mine
PYEOF

# ---- Triton's trace extension -------------------------------------------------
check "GET /v2/trace/setting: 200" test "$(code GET /v2/trace/setting)" = 200
check "... TIMESTAMPS, every request, no count limit" test "$(jq_get '(d["trace_level"],
    d["trace_rate"], d["trace_count"], d["trace_mode"], "log_frequency" in d)')" \
    = "(['TIMESTAMPS'], '1', '-1', 'opentelemetry', True)"
check "server metadata lists the trace extension" \
    test "$(code GET /v2)" = 200 -a "$(jq_get '"trace" in d["extensions"]')" = True
check "POST trace_rate 0: 200, reported" \
    test "$(code POST /v2/trace/setting -d '{"trace_rate":"0"}')" = 200 -a \
         "$(jq_get 'd["trace_rate"]')" = 0
for i in 1 2 3; do infer "$(tp 100)" > /dev/null; done
code POST /v2/trace/setting -d '{"trace_rate":"2"}' > /dev/null
check "... trace_rate 2 reported" test "$(jq_get 'd["trace_rate"]')" = 2
for i in 1 2 3 4; do infer "$(tp 200)" > /dev/null; done
code POST /v2/trace/setting -d '{"trace_rate":"1"}' > /dev/null
infer "$(tp 300)" > /dev/null
check "rate 1 again: the next request is traced" arrived "$(tid "$(tp 300)")"
check "rate 0 exported nothing" test "$(roots "$(tid "$(tp 100)")")" = 0
check "rate 2 exported every second request (2 of 4)" test "$(roots "$(tid "$(tp 200)")")" = 2

check "a model's level OFF: 200" \
    test "$(code POST /v2/models/fashion-mlp/trace/setting -d '{"trace_level":["OFF"]}')" = 200 -a \
         "$(jq_get 'd["trace_level"]')" = "['OFF']"
check "... the global level stays TIMESTAMPS" \
    test "$(code GET /v2/trace/setting)" = 200 -a "$(jq_get 'd["trace_level"]')" = "['TIMESTAMPS']"
infer "$(tp 400)" > /dev/null
check "a model setting null follows the global one again" \
    test "$(code POST /v2/models/fashion-mlp/trace/setting -d '{"trace_level":null}')" = 200 -a \
         "$(jq_get 'd["trace_level"]')" = "['TIMESTAMPS']"
check "trace_count 1: one more trace, then none" \
    test "$(code POST /v2/trace/setting -d '{"trace_count":"1"}')" = 200
infer "$(tp 500)" > /dev/null
infer "$(tp 501)" > /dev/null
check "... trace_count reported 0 once used" \
    test "$(code GET /v2/trace/setting)" = 200 -a "$(jq_get 'd["trace_count"]')" = 0
code POST /v2/trace/setting -d '{"trace_count":"-1"}' > /dev/null
infer "$(tp 600)" > /dev/null
check "the next traced request arrives" arrived "$(tid "$(tp 600)")"
check "level OFF for the model exported nothing" test "$(roots "$(tid "$(tp 400)")")" = 0
check "trace_count 1 traced one request" \
    test "$(roots "$(tid "$(tp 500)")")" = 1 -a "$(roots "$(tid "$(tp 501)")")" = 0

for body in '{"trace_level":["TENSORS"]}' '{"trace_file":"/tmp/t.json"}' '{"trace_mode":"triton"}' \
            '{"nosuch":"1"}' '{"trace_rate":"-1"}' '{"trace_rate":"x"}' '{"trace_count":"-2"}' \
            '{"trace_level":null}' '[]' 'not json'; do
    check "POST $body: 400 with an error" \
        test "$(code POST /v2/trace/setting -d "$body")" = 400 -a -n "$(jq_get 'd["error"]')"
done
check "a refused POST changed nothing" \
    test "$(code GET /v2/trace/setting)" = 200 -a "$(jq_get 'd["trace_rate"]')" = 1
check "trace settings of an unknown model: 404" \
    test "$(code GET /v2/models/nosuch/trace/setting)" = 404
check "PUT /v2/trace/setting: 405" test "$(code PUT /v2/trace/setting)" = 405

check "/metrics counts exported spans, none dropped" $PY - "$URL" <<'PYEOF'
import sys, urllib.request
m = {l.split()[0]: float(l.split()[1]) for l in urllib.request.urlopen(sys.argv[1] + "/metrics")
     .read().decode().splitlines() if l.startswith("dlserve_trace_")}
assert m["dlserve_trace_spans_exported_total"] >= 8, m
assert m["dlserve_trace_spans_dropped_total"] == 0, m
assert m["dlserve_trace_export_failures_total"] == 0, m
PYEOF
check "/status reports the exporter" \
    test "$(code GET /status)" = 200 -a "$(jq_get 'd["trace"]["endpoint"]')" = "$ENDPOINT"
check "daemon stops cleanly" stop_daemon

# ---- a full queue drops and counts; stopping sends what is queued --------------
: > "$SPANS"
# The 40 requests below take a second or two: well within the minute
# before the first flush, so nothing is exported before the stop.
check "daemon with a 16-span queue flushed once a minute" start_daemon small \
    --models "$WORK/repo" --set trace.otlp_endpoint="$ENDPOINT" --set trace.queue_size=16 \
    --set trace.flush_ms=60000 --set models.watch=false
ok200=0
for i in $(seq 40); do [ "$(infer "$(tp 900)")" = 200 ] && ok200=$((ok200 + 1)); done
check "every request answered 200" test "$ok200" = 40
check "24 dropped spans counted" \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_trace_spans_dropped_total 24'"
check "nothing exported yet" test "$(roots "$(tid "$(tp 900)")")" = 0
check "daemon stops cleanly" stop_daemon
check "stopping sent the 16 queued" test "$(roots "$(tid "$(tp 900)")")" = 16

# ---- an unreachable collector: counted, logged, requests unaffected ------------
check "daemon with a collector that refuses connections" start_daemon gone \
    --models "$WORK/repo" --set trace.otlp_endpoint=http://127.0.0.1:1/v1/traces \
    --set trace.flush_ms=50 --set models.watch=false
check "a request: 200" test "$(infer "$TP")" = 200
check "the failed export is counted and logged" wait_for 10 \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_trace_export_failures_total 1' &&
           grep -q 'spans of 1 requests lost' '$LOG'"
check "daemon stops cleanly" stop_daemon

"$DLSERVE" --models "$WORK/repo" --set trace.otlp_endpoint=127.0.0.1:4318 --set http.port=0 \
    > /dev/null 2> "$WORK/err"
check "an otlp_endpoint that is not an http(s) URL is refused at start" \
    fails_with "$WORK/err" $? "otlp_endpoint '127.0.0.1:4318' is not an http:// or https:// URL"
"$DLSERVE" --models "$WORK/repo" --set trace.rate=1.5 --set http.port=0 > /dev/null 2> "$WORK/err"
check "a [trace] rate over 1 is refused at start" fails_with "$WORK/err" $? "\[trace\] rate"
finish
