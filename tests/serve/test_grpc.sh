#!/usr/bin/env bash
# The gRPC transport end to end: a real daemon and a real Python gRPC
# client whose stubs grpc_tools.protoc generates here from
# proto/grpc_service.proto and proto/health.proto
# (tests/serve/grpc_client.py). Every method of
# inference.GRPCInferenceService and grpc.health.v1.Health/Check; infer
# answers bit for bit the HTTP binary extension's for the same inputs
# (fashion-mlp with raw and typed FP32 and UINT8, two-tower's two inputs,
# tagger's BYTES texts), requested outputs and classification; the status
# codes of bad requests; a stream of 1,000 requests in flight answered
# once each; clients killed mid-stream while the daemon serves on;
# statistics, the repository, /status and /metrics (promtool). A second
# daemon with a token, a small grpc.max_message_bytes and a slow batcher:
# UNAUTHENTICATED, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED counted as a
# timeout, and health NOT_SERVING during the shutdown grace. Generation:
# text_input to a generating model, whole and streamed as HTTP's generate
# answers, cancelled when its client goes. TLS with [http]'s certificate.
# Spans of traced requests reach an OTLP collector. Every daemon exits 0
# with nothing from the sanitizers in its log (the
# ASan build reports leaks at exit, killed streams included).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
PY=/usr/bin/python3
if ! $PY -c 'import grpc, grpc_tools.protoc' 2> /dev/null; then
    echo "SKIP: no python3-grpcio and python3-grpc-tools"
    exit 77
fi
REPO=$WORK/models
export GRPC_STUBS=$WORK/stubs
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

make_repo "$REPO"
check "a trained version of fashion-mlp" test -s "$REPO/fashion-mlp/1/model.safetensors"

# tagger (make_tagger): a BYTES text model; two-tower
# (models/two-tower): an INT64 id and 16 features, two outputs. Random
# fixed weights: answers are compared, not judged.
make_tagger "$REPO/tagger"
mkdir -p "$REPO/two-tower/1"
cp "$SRC/models/two-tower/model.json" "$REPO/two-tower/"
$PY "$SRC/tests/py/random_weights.py" "$REPO/two-tower/1/model.safetensors" 6 \
    user_emb.weight=100x8 feat_fc.weight=16x16 feat_fc.bias=16 fc1.weight=64x24 fc1.bias=64 \
    click.weight=1x64 click.bias=1 rating.weight=1x64 rating.bias=1

# gc CHECK [ARGS...]: a group of checks of tests/serve/grpc_client.py on
# the daemon last started.
gc() { $PY "$SRC/tests/serve/grpc_client.py" ${TOKEN:+--token "$TOKEN"} \
           "127.0.0.1:$GPORT" "$URL" "$@"; }

# clean_exit: the daemon stops with exit code 0 and no sanitizer report.
clean_exit() {
    check "the daemon stops cleanly (exit 0)" stop_daemon 30
    check "... and no AddressSanitizer, LeakSanitizer or UBSan report in its log" \
        sh -c "! grep -Eq 'ERROR: AddressSanitizer|LeakSanitizer|runtime error:' '$LOG'"
}

TOKEN=""
GPORT=0 URL=-
check "client stubs generated from proto/ by grpc_tools.protoc" gc gen

# An OTLP collector: gRPC requests are traced as HTTP's are.
SPANS=$WORK/spans.jsonl
touch "$SPANS"
$PY "$SRC/tests/serve/otlp_receiver.py" "$WORK/rport" "$SPANS" &
RPID=$!
trap 'kill -9 ${PID:-} $RPID 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
for _ in $(seq 100); do [ -s "$WORK/rport" ] && break; sleep 0.1; done

# ---- one daemon for most checks -----------------------------------------------
# batch_invariant: answers are compared bit for bit whatever batch each
# request ran in (stream requests batch together; HTTP ones run alone).
check "the daemon serves gRPC" start_grpc grpc --models "$REPO" --set models.watch=false \
    --set batching.batch_invariant=true --set grpc.threads=2 \
    --set trace.otlp_endpoint="http://127.0.0.1:$(cat "$WORK/rport")/v1/traces" \
    --set trace.flush_ms=50
check "its log says where gRPC listens" \
    grep -q "grpc: listening on 127.0.0.1 port $GPORT, 2 threads" "$LOG"

check "live, ready, metadata, config, health, unknown methods" gc basics
check "ModelInfer as HTTP's binary answers: raw, typed, outputs, classification" gc infer
check "two inputs (two-tower), BYTES texts (tagger)" gc multi
check "error codes of bad requests" gc errors
check "a stream of 1,000 requests, each answered once, as unary calls" gc stream 1000
check "ModelStatistics counts gRPC requests" gc stats
check "RepositoryIndex, unload, ModelReady, load" gc repository
check "clients gone mid-stream: the daemon serves on, no stream left open" gc killed
check "/status' grpc object, /metrics' gRPC families" gc status "$GPORT"
check "/status grpc.port is the port chosen" \
    test "$(code GET /status)" = 200 -a "$(jq_get 'd["grpc"]["port"]')" = "$GPORT"
TP=00-5af7183fb1d4cf5f1b3e4a2d0c9e8f71-00f067aa0ba902b7-01
check "requests with a traceparent in their metadata" gc traced "$TP"
traced() {   # the server spans of trace TP's id, each parented on TP's span
    $PY -c 'import json, sys
tid, parent = sys.argv[2].split("-")[1:3]
spans = [json.loads(l)["span"] for l in open(sys.argv[1])]
print(sum(1 for s in spans if s["traceId"] == tid and s["kind"] == 2
          and s.get("parentSpanId") == parent))' "$SPANS" "$TP"
}
for _ in $(seq 100); do [ "$(traced)" -ge 2 ] && break; sleep 0.1; done
check "... both traced: server spans of its trace, parented on it" test "$(traced)" = 2
curl -s "$URL/metrics" > "$WORK/metrics.txt"
check "/metrics: dlserve_grpc_requests_total of ModelInfer OK" \
    grep -Eq '^dlserve_grpc_requests_total\{method="ModelInfer",code="OK"\} [1-9]' \
    "$WORK/metrics.txt"
check "promtool check metrics passes" "$SRC/tests/serve/promtool_check.sh" "$WORK/metrics.txt"
clean_exit

# ---- a token, a small message bound, a slow batcher, a shutdown grace ----------
# eager off and 1.5 s of queue delay: a lone request waits 1.5 s for its
# batch to fill, and a stream's 1,000 requests all wait together.
TOKEN=grpc-secret-7
check "a daemon with a token, max_message_bytes 4096 and a slow batcher" \
    start_grpc grpc-token --models "$REPO" --set models.watch=false \
    --set http.token="$TOKEN" --set grpc.max_message_bytes=4096 \
    --set batching.eager=false --set batching.max_queue_delay_us=1500000 \
    --set batching.max_batch_size=1024 --set batching.batch_invariant=true \
    --set http.shutdown_grace_s=5
check "its log says a token is required" \
    grep -q "grpc: listening on 127.0.0.1 port $GPORT, .*token required" "$LOG"
check "the token: UNAUTHENTICATED without it, health open" gc auth
check "a message over grpc.max_message_bytes: RESOURCE_EXHAUSTED" gc oversize 4096
check "a deadline that passes in the queue: DEADLINE_EXCEEDED, counted" gc deadline
check "a stream of 1,000 requests in flight at once, each answered once" gc stream 1000 queued
check "/status grpc: auth true" \
    test "$(code GET /status -H "Authorization: Bearer $TOKEN")" = 200 -a \
         "$(jq_get '(d["grpc"]["auth"], d["grpc"]["port"])')" = "(True, $GPORT)"
kill -TERM "$PID"
for _ in $(seq 50); do grep -q "not ready: serving for" "$LOG" && break; sleep 0.1; done
check "SIGTERM: health NOT_SERVING during the shutdown grace, calls answered" gc grace
clean_exit   # a second SIGTERM ends the grace
check "... before the grace's 5 s were over" grep -q "not ready: serving for 5 s" "$LOG"

# ---- generation (lm, endless: make_lm_repo) ------------------------------------
TOKEN=""
make_lm_repo "$REPO"
check "a daemon with generating models" start_grpc grpc-gen --models "$REPO" \
    --set models.watch=false
check "text_input: the whole text, each piece on a stream, cancelled when gone" gc generate
clean_exit

# ---- TLS: [http]'s certificate serves gRPC too ---------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
    -days 1 -subj /CN=localhost > /dev/null 2>&1
check "a daemon with TLS" start_grpc grpc-tls --models "$REPO" --set models.watch=false \
    --set http.tls_cert="$WORK/cert.pem" --set http.tls_key="$WORK/key.pem"
check "its log says gRPC serves TLS" grep -q "grpc: listening on 127.0.0.1 (TLS) port" "$LOG"
check "ModelInfer over TLS as HTTPS's answer; plaintext refused" \
    $PY "$SRC/tests/serve/grpc_client.py" --tls "$WORK/cert.pem" "localhost:$GPORT" \
    "https://localhost:$PORT" tls
clean_exit
finish
