#!/usr/bin/env bash
# The response cache end to end ([cache] bytes, a model's "serving":
# {"cache": true}): the same binary request twice, the second answered
# from the cache with the same bytes and counted as Triton's cache_hit
# (statistics) and in dlserve_cache_* (metrics); a model without the key
# never looked up; a new version through the folder watch answering its
# own computed answer, never version 1's entries, which go with it; a
# cache too small for two answers evicting the older; over gRPC (when
# python3-grpcio is there), gRPC and HTTP sharing the entries.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
REQ=$SRC/tests/py/make_request.py
PY=/usr/bin/python3
REPO=$WORK/models
M=$REPO/fashion-mlp
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

make_repo "$REPO"
check "a trained version to serve" test -s "$M/1/model.safetensors"
# plain: the same model and weights without the cache
mkdir -p "$REPO/plain/1"
sed 's/"name": "fashion-mlp"/"name": "plain"/' "$M/model.json" > "$REPO/plain/model.json"
cp "$M/1/model.safetensors" "$REPO/plain/1/"
$PY - "$M/model.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["serving"] = {"cache": True}
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY

# binary requests of Fashion-MNIST test images: NAME FIRST COUNT
request() {
    $PY "$REQ" "$2" "$3" --binary --binary-output --json-length "$WORK/$1.len" > "$WORK/$1.bin"
}
request a 0 2
request b 2 2
# infer MODEL REQUEST OUT: POSTs request REQUEST, the answer's bytes to
# $WORK/OUT; prints the status code.
infer() {
    curl -s -o "$WORK/$3" -w '%{http_code}' -X POST "$URL/v2/models/$1/infer" \
        -H "Inference-Header-Content-Length: $(cat "$WORK/$2.len")" \
        -H 'Content-Type: application/octet-stream' --data-binary @"$WORK/$2.bin"
}
# stats MODEL VERSION: "hits misses successes inferences" of that version
stats() {
    code GET "/v2/models/$1/versions/$2/stats" > /dev/null &&
        jq_get '" ".join(str(x) for x in (lambda s, m: (s["cache_hit"]["count"],
            s["cache_miss"]["count"], s["success"]["count"], m["inference_count"]))(
            d["model_stats"][0]["inference_stats"], d["model_stats"][0]))'
}
metric() {  # NAME{LABELS}: its value in /metrics, or "none"
    curl -s "$URL/metrics" | awk -v k="$1" '$1 == k { v = $2 } END { print v == "" ? "none" : v }'
}
served_version() {
    code GET /v2/models/fashion-mlp > /dev/null && jq_get 'd["versions"][0]'
}
wait_version() {  # V: until version V is served (30 s)
    for _ in $(seq 300); do
        [ "$(served_version 2>/dev/null)" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# ---- hits, misses, statistics and metrics ----
start_daemon cache --models "$REPO" --set cache.bytes=1M
check "daemon starts with a 1 MiB cache" test -n "$PORT"
check "the model's serving block says cache" \
    test "$(code GET /status)" = 200 -a \
         "$(jq_get '[m["serving"].get("cache") for m in d["models"]
                    if m["name"] == "fashion-mlp"]')" = "[True]"
check "first request: 200" test "$(infer fashion-mlp a a1.out)" = 200
check "same request again: 200" test "$(infer fashion-mlp a a2.out)" = 200
check "... answered with the same bytes" cmp -s "$WORK/a1.out" "$WORK/a2.out"
check "stats: a miss, then a hit; both successes, the samples of the one computed" \
    test "$(stats fashion-mlp 1)" = "1 1 2 2"
IS='d["model_stats"][0]["inference_stats"]'
check "stats: the hit's and the miss's durations" \
    test "$(jq_get "[$IS[k]['ns'] > 0 for k in ('cache_hit', 'cache_miss')]")" = "[True, True]"
check "stats: queue and compute count the computed request only" \
    test "$(jq_get "[$IS[k]['count'] for k in ('queue', 'compute_infer')]")" = "[1, 1]"
check "metrics: dlserve_cache_hits_total and _misses_total of version 1" \
    test "$(metric 'dlserve_cache_hits_total{model="fashion-mlp",version="1"}')" = 1 -a \
         "$(metric 'dlserve_cache_misses_total{model="fashion-mlp",version="1"}')" = 1
check "metrics: one entry, its bytes (name, version and load, 2 images, 20 floats)" \
    test "$(metric dlserve_cache_entries)" = 1 -a \
         "$(metric dlserve_cache_bytes)" = $((11 + 16 + 2 * 784 * 4 + 20 * 4))
check "metrics: the capacity" test "$(metric dlserve_cache_capacity_bytes)" = 1048576
curl -s "$URL/metrics" > "$WORK/metrics.txt"
check "promtool check metrics passes" "$SRC/tests/serve/promtool_check.sh" "$WORK/metrics.txt"
check "other inputs: a miss" test "$(infer fashion-mlp b b1.out)" = 200 -a \
    "$(stats fashion-mlp 1)" = "1 2 3 4"
check "... another answer" sh -c "! cmp -s '$WORK/a1.out' '$WORK/b1.out'"

check "the model without the cache: 200 twice" \
    test "$(infer plain a p1.out)" = 200 -a "$(infer plain a p2.out)" = 200
check "... the same tensors as the cached model's (same weights)" \
    test "$(tail -c 118 "$WORK/a1.out" | od -An -tx1)" = \
         "$(tail -c 118 "$WORK/p1.out" | od -An -tx1)"   # 2x10 FP32, 2 labels, 2 INT64
check "... never looked up: no hit, no miss" test "$(stats plain 1)" = "0 0 2 4"
check "... no cache series in the metrics" \
    test "$(metric 'dlserve_cache_hits_total{model="plain",version="1"}')" = none -a \
         "$(metric 'dlserve_cache_misses_total{model="plain",version="1"}')" = none
check "... and nothing stored" test "$(metric dlserve_cache_entries)" = 2

# ---- a new version: its own answers ----
mkdir -p "$WORK/v2"
$PY - "$M/1/model.safetensors" "$WORK/v2/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack_from("<Q", raw)
head = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
for name, t in head.items():
    if name == "__metadata__" or t["dtype"] != "F32" or not name.startswith("fc3"):
        continue
    a, b = t["data_offsets"]
    vals = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    data[a:b] = struct.pack("<%df" % len(vals), *[v * 1.5 + 0.01 for v in vals])
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
mv "$WORK/v2" "$M/2"
check "the folder watch serves version 2" wait_version 2
check "version 2: 200" test "$(infer fashion-mlp a v2a.out)" = 200
check "... its own answer, not version 1's cached one" \
    sh -c "! cmp -s '$WORK/a1.out' '$WORK/v2a.out'"
check "... named version 2" \
    sh -c "head -c $(cat "$WORK/a.len") '$WORK/v2a.out' | grep -q '\"model_version\":\"2\"'"
check "... a miss of version 2" test "$(stats fashion-mlp 2)" = "0 1 1 2"
check "version 2 again: the same bytes, a hit" \
    test "$(infer fashion-mlp a v2b.out)" = 200 -a "$(stats fashion-mlp 2)" = "1 1 2 2"
check "... bit for bit" cmp -s "$WORK/v2a.out" "$WORK/v2b.out"
check "version 1's entries went with it: one entry left" \
    test "$(metric dlserve_cache_entries)" = 1
check "/status shows the cache" \
    test "$(code GET /status)" = 200 -a "$(jq_get 'd["cache"]["entries"]')" = 1
check "the daemon stops cleanly" stop_daemon

# ---- eviction: room for one answer ----
start_daemon small --models "$REPO" --set cache.bytes=10000
check "daemon starts with a 10000-byte cache" test -n "$PORT"
check "... serving version 2" wait_version 2
infer fashion-mlp a e1.out > /dev/null
infer fashion-mlp b e2.out > /dev/null
check "a, b, a: b evicted a, a computed again (three misses)" \
    test "$(infer fashion-mlp a e3.out)" = 200 -a "$(stats fashion-mlp 2)" = "0 3 3 6"
check "... and a again is a hit" \
    test "$(infer fashion-mlp a e4.out)" = 200 -a "$(stats fashion-mlp 2)" = "1 3 4 6"
check "... the first computed answer each time, bit for bit" \
    sh -c "cmp -s '$WORK/e1.out' '$WORK/e3.out' && cmp -s '$WORK/e1.out' '$WORK/e4.out' &&
           cmp -s '$WORK/e1.out' '$WORK/v2a.out'"
check "metrics: one entry, two evictions" \
    test "$(metric dlserve_cache_entries)" = 1 -a "$(metric dlserve_cache_evictions_total)" = 2
check "the daemon stops cleanly" stop_daemon

# ---- gRPC: the same cache ----
if $PY -c 'import grpc, grpc_tools.protoc' 2> /dev/null; then
    export GRPC_STUBS=$WORK/stubs
    check "a daemon serving gRPC with the cache" start_grpc grpc --models "$REPO" \
        --set cache.bytes=1M
    check "gRPC: a miss then a hit, the same bits; HTTP's request hits what gRPC stored" \
        $PY "$SRC/tests/serve/grpc_client.py" "127.0.0.1:$GPORT" "$URL" cache
    check "the daemon stops cleanly" stop_daemon
else
    echo "# no python3-grpcio and python3-grpc-tools: gRPC not checked"
fi
finish
