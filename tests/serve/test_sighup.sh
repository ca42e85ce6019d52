#!/usr/bin/env bash
# SIGHUP applies what can change live and names what cannot: a daemon
# started with --config FILE; [trace] rate and level changed in the file
# show in GET /v2/trace/setting; [models] policy versions:1 -> latest with
# versions 1 and 2 on disk moves serving to version 2; [models] control
# watch -> poll with poll_interval_s = 1 picks up version 3 without another
# signal; a changed http.port is logged by name as applying at restart
# while the daemon keeps its port; a bad file keeps everything; a new
# [trace] otlp_endpoint starts the span exporter. The Kafka
# side (new clients on a rotated ${file:} value) is
# tests/kafka/test_kafka_reload.sh. ~10 s.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
REPO=$WORK/models
M=$REPO/fashion-mlp
make_repo "$REPO"
mkdir -p "$M/2" && cp "$M/1/model.safetensors" "$M/2/"

# A free port of our own in the file: start_daemon's --set http.port=0
# would override the file's at every reload.
P1=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
P2=$((P1 == 65535 ? P1 - 1 : P1 + 1))
CONF=$WORK/dlserve.conf
# conf PORT POLICY RATE LEVEL CONTROL [OTLP_ENDPOINT [FLUSH_MS]]: the file
conf() {
    cat > "$CONF" <<EOF
[http]
port = $1
[models]
dir = $REPO
policy = $2
control = $5
poll_interval_s = 1
[trace]
rate = $3
level = $4
otlp_endpoint = ${6:-}
flush_ms = ${7:-100}
EOF
}
conf "$P1" versions:1 1 timestamps watch
LOG=$WORK/sighup.log
"$DLSERVE" --config "$CONF" > "$WORK/sighup.out" 2> "$LOG" &
PID=$!
URL=http://127.0.0.1:$P1
# wait_for SECONDS COMMAND...: until the command succeeds
wait_for() {
    local end=$((SECONDS + $1)); shift
    while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done
    return 1
}
check "daemon up on the file's port" wait_for 30 grep -q "listening on http://127.0.0.1:$P1" "$LOG"
versions() { code GET /v2/models/fashion-mlp > /dev/null && jq_get 'd["versions"]'; }
setting() { code GET /v2/trace/setting > /dev/null && jq_get "$1"; }
served1() { [ "$(versions)" = "['1']" ]; }
check "versions:1 serves version 1" wait_for 30 served1
check "trace rate 1 (every request)" test "$(setting 'd["trace_rate"]')" = 1
check "trace level TIMESTAMPS" test "$(setting 'd["trace_level"]')" = "['TIMESTAMPS']"

# ---- [trace] and [models] policy live, http.port at restart ----
conf "$P2" latest 0.25 off watch
kill -HUP $PID
check "the reload is done" wait_for 30 grep -q "daemon: reloaded" "$LOG"
check "trace rate 0.25: every 4th request" test "$(setting 'd["trace_rate"]')" = 4
check "trace level OFF" test "$(setting 'd["trace_level"]')" = "['OFF']"
check "the log names trace.rate, applied" grep -q "conf: trace.rate changed (1 -> 0.25): applied" "$LOG"
served2() { [ "$(versions)" = "['2']" ]; }
check "policy latest: version 2 served instead of 1" wait_for 30 served2
check "the model's configuration says latest" sh -c \
    "curl -s $URL/v2/models/fashion-mlp/config | grep -q '\"latest\"'"
check "the log names http.port as applying at restart" \
    grep -q "conf: http.port changed ($P1 -> $P2): applies at restart" "$LOG"
check "the port is unchanged" test "$(code GET /v2/health/ready)" = 200
check "nothing listens on the new port" sh -c "! curl -s -o /dev/null http://127.0.0.1:$P2/v2/health/ready"

# ---- [models] control watch -> poll: version 3 without a signal ----
conf "$P2" latest 0.25 off poll
kill -HUP $PID
check "the log says control = poll" wait_for 30 grep -q "control = poll: rescanning" "$LOG"
mkdir -p "$M/3" && cp "$M/1/model.safetensors" "$M/3/.tmp" && mv "$M/3/.tmp" "$M/3/model.safetensors"
served3() { [ "$(versions)" = "['3']" ]; }
check "the poll serves version 3" wait_for 30 served3

# ---- a bad file keeps the running configuration ----
conf "$P2" latest 7 timestamps poll
kill -HUP $PID
check "a bad file is refused" wait_for 30 grep -q "reload refused, keeping the running" "$LOG"
check "trace rate still 0.25" test "$(setting 'd["trace_rate"]')" = 4
check "trace level still OFF" test "$(setting 'd["trace_level"]')" = "['OFF']"

# ---- [trace] otlp_endpoint set: the exporter starts ----
/usr/bin/python3 "$SRC/tests/serve/otlp_receiver.py" "$WORK/rport" "$WORK/spans" &
RECV=$!
trap 'kill -9 ${PID:-} ${RECV:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "OTLP receiver up" wait_for 30 test -s "$WORK/rport"
conf "$P2" latest 1 timestamps poll "http://127.0.0.1:$(cat "$WORK/rport")/v1/traces"
kill -HUP $PID
check "the log says the export started" wait_for 30 grep -q "trace: exporting spans to" "$LOG"
/usr/bin/python3 "$SRC/tests/py/make_request.py" 0 1 > "$WORK/req.json"
check "an inference answers" test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req.json")" = 200
check "its spans reach the collector" wait_for 30 test -s "$WORK/spans"
# flush_ms changed: the exporter restarts on the same endpoint
conf "$P2" latest 1 timestamps poll "http://127.0.0.1:$(cat "$WORK/rport")/v1/traces" 200
: > "$WORK/spans"
kill -HUP $PID
check "the exporter restarted" wait_for 30 \
    sh -c "[ \$(grep -c 'trace: exporting spans to' '$LOG') = 2 ]"
check "an inference answers" test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req.json")" = 200
check "its spans reach the collector" wait_for 30 test -s "$WORK/spans"

check "SIGTERM: exit 0" stop_daemon
finish
