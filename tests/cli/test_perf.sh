#!/usr/bin/env bash
# dlserve-perf against a real daemon: a concurrency sweep over HTTP JSON and
# the binary tensor data extension (CSV rows and columns, throughput, p50 <=
# p99, no errors), a request-rate run near its rate, an --input-data file,
# refusals (server unreachable, unknown model, bad range); gRPC (-i grpc)
# against a daemon with a bearer token: a closed-loop sweep, an --input-data
# file, a request rate, refusals (no token, unknown model), or, in a build
# without libgrpc, its refusal; with KAFKA_TOOL, the Kafka mode through a
# mock cluster. ~30 s.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
PERF=${DLSERVE_PERF:?set DLSERVE_PERF to the dlserve-perf binary}
PY=/usr/bin/python3

make_repo "$WORK/repo"
check "daemon starts" start_daemon perf --models "$WORK/repo" --set models.watch=false
trap 'kill -9 ${PID:-} ${KPID:-} 2>/dev/null; [ -n "${MOCK_PID:-}" ] && stop_mock;
      [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

# csv_ok FILE FIRST_COLUMN VALUES...: the header, one row a value in order,
# every row with throughput > 0, 0 < p50 <= p90 <= p95 <= p99, no errors.
csv_ok() {
    $PY - "$@" <<'PY'
import csv, sys
path, first, values = sys.argv[1], sys.argv[2], [float(v) for v in sys.argv[3:]]
rows = list(csv.DictReader(open(path)))
want = [first, "Inferences/Second", "p50 latency", "p90 latency", "p95 latency",
        "p99 latency", "Avg latency", "Requests", "Errors", "Stable"]
cols = list(rows[0].keys()) if rows else []
ok = cols == want and [float(r[first]) for r in rows] == values
for r in rows:
    p = [float(r[k]) for k in want[2:6]]
    ok = ok and float(r["Inferences/Second"]) > 0 and 0 < p[0] <= p[1] <= p[2] <= p[3]
    ok = ok and int(r["Errors"]) == 0 and int(r["Requests"]) > 0
if not ok:
    print(cols, rows, file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}

for mode in json binary; do
    flag=(); [ $mode = binary ] && flag=(--binary)
    "$PERF" -m fashion-mlp -u "127.0.0.1:$PORT" "${flag[@]}" --concurrency-range 1:4:3 \
        -p 300 --max-trials 6 -f "$WORK/$mode.csv" > "$WORK/$mode.out" 2> "$WORK/$mode.err"
    check "$mode: exits 0" [ $? -eq 0 ]
    check "$mode: CSV of concurrency 1 and 4, throughput, p50 <= p99, no errors" \
        csv_ok "$WORK/$mode.csv" Concurrency 1 4
    check "$mode: the table's summary lines" \
        grep -q '^Concurrency: 4, throughput: [0-9.]* infer/sec, latency p50' "$WORK/$mode.out"
done
check "binary: the request is the binary extension's" \
    grep -q 'HTTP binary tensor data' "$WORK/binary.out"

# Open loop: 200 requests a second over 1 s windows come back at about that rate.
"$PERF" -m fashion-mlp -u "http://127.0.0.1:$PORT" --request-rate-range 200 -p 1000 \
    --max-trials 4 -f "$WORK/rate.csv" > "$WORK/rate.out" 2>&1
check "request rate: exits 0" [ $? -eq 0 ]
check "request rate: CSV" csv_ok "$WORK/rate.csv" "Request Rate" 200
check "request rate: about 200 infer/sec" $PY -c '
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
sys.exit(0 if 170 <= float(r["Inferences/Second"]) <= 230 else 1)' "$WORK/rate.csv"

# A request body from a file, batch 2 (JSON and converted to binary).
$PY - "$WORK/req.json" <<'PY'
import json, sys
json.dump({"inputs": [{"name": "input", "datatype": "UINT8", "shape": [2, 784],
                       "data": [[i % 256 for i in range(784)], [0] * 784]}]}, open(sys.argv[1], "w"))
PY
for flag in "" --binary; do
    "$PERF" -m fashion-mlp -u "127.0.0.1:$PORT" $flag --input-data "$WORK/req.json" -b 2 -p 200 \
        --max-trials 4 -f "$WORK/file.csv" > "$WORK/file.out" 2>&1
    check "--input-data FILE ${flag:-json}: exits 0, answers" \
        csv_ok "$WORK/file.csv" Concurrency 1
done

# Refusals: a clear message and a nonzero exit.
"$PERF" -m fashion-mlp -u 127.0.0.1:1 -p 100 > /dev/null 2> "$WORK/unreach.err"
rc=$?
check "unreachable: exits nonzero, says so" \
    fails_with "$WORK/unreach.err" $rc 'cannot connect to 127.0.0.1:1'
"$PERF" -m nosuch -u "127.0.0.1:$PORT" -p 100 > /dev/null 2> "$WORK/nomodel.err"
rc=$?
check "unknown model: exits nonzero with the server's answer" \
    fails_with "$WORK/nomodel.err" $rc "answered 404.*nosuch"
bad_in=$WORK/bad.json
echo '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}' \
    > "$bad_in"
"$PERF" -m fashion-mlp -u "127.0.0.1:$PORT" --input-data "$bad_in" -p 100 > /dev/null \
    2> "$WORK/refused.err"
rc=$?
check "a refused request: exits nonzero with the server's answer" \
    fails_with "$WORK/refused.err" $rc "answered 400"
"$PERF" -m fashion-mlp --concurrency-range 4:1 > /dev/null 2> "$WORK/range.err"
check "a bad range: usage error" [ $? -eq 2 ]
"$PERF" --help | grep -q -- '--request-rate-range'
check "--help lists the options" [ $? -eq 0 ]
stop_daemon
check "daemon stops cleanly" [ $? -eq 0 ]

# gRPC: ModelInfer with the inputs in raw_input_contents, the token as
# authorization metadata.
"$PERF" -i grpc -m fashion-mlp -u 127.0.0.1:1 -p 100 > /dev/null 2> "$WORK/g.err"
rc=$?
if grep -q 'not built in' "$WORK/g.err"; then
    check "grpc not built in: exits 1, says so" \
        fails_with "$WORK/g.err" $rc '-i grpc is not built in'
else
    check "grpc: unreachable, exits nonzero, says so" \
        fails_with "$WORK/g.err" $rc 'UNAVAILABLE.*is the server running'
    check "gRPC daemon starts" start_grpc gperf --models "$WORK/repo" --set models.watch=false \
        --set http.token=s3cret
    auth=(-H 'Authorization: Bearer s3cret')
    "$PERF" -i grpc -m fashion-mlp -u "127.0.0.1:$GPORT" "${auth[@]}" --concurrency-range 1:4:3 \
        -p 300 --max-trials 4 -f "$WORK/grpc.csv" > "$WORK/grpc.out" 2> "$WORK/grpc.err"
    check "grpc: exits 0" [ $? -eq 0 ]
    check "grpc: CSV of concurrency 1 and 4, throughput, p50 <= p99, no errors" \
        csv_ok "$WORK/grpc.csv" Concurrency 1 4
    lat='latency p50 [0-9]* / p90 [0-9]* / p95 [0-9]* / p99 [0-9]* usec, errors 0'
    check "grpc: the summary line, p50 and p99 printed" \
        grep -q "^Concurrency: 4, throughput: [0-9.]* infer/sec, $lat" "$WORK/grpc.out"
    check "grpc: the request is ModelInfer's" grep -q 'gRPC ModelInfer to 127.0.0.1' \
        "$WORK/grpc.out"
    "$PERF" -i grpc -m fashion-mlp -u "127.0.0.1:$GPORT" "${auth[@]}" \
        --input-data "$WORK/req.json" -b 2 -p 200 --max-trials 3 -f "$WORK/gfile.csv" \
        > "$WORK/gfile.out" 2>&1
    check "grpc: --input-data FILE (UINT8, batch 2)" csv_ok "$WORK/gfile.csv" Concurrency 1
    "$PERF" -i grpc -m fashion-mlp -u "127.0.0.1:$GPORT" "${auth[@]}" \
        --request-rate-range 200 -p 500 --max-trials 4 -f "$WORK/grate.csv" \
        > "$WORK/grate.out" 2>&1
    check "grpc: request rate, CSV" csv_ok "$WORK/grate.csv" "Request Rate" 200
    "$PERF" -i grpc -m fashion-mlp -u "127.0.0.1:$GPORT" -p 100 > /dev/null \
        2> "$WORK/gnotoken.err"
    rc=$?
    check "grpc: no token, exits 1 with the server's status" \
        fails_with "$WORK/gnotoken.err" $rc 'UNAUTHENTICATED.*bearer token'
    check "grpc: no token, exit status 1" test $rc -eq 1
    "$PERF" -i grpc -m nosuch -u "127.0.0.1:$GPORT" "${auth[@]}" -p 100 > /dev/null \
        2> "$WORK/gnomodel.err"
    rc=$?
    check "grpc: unknown model, exits 1 with the server's message" \
        fails_with "$WORK/gnomodel.err" $rc 'NOT_FOUND.*nosuch'
    check "grpc: unknown model, exit status 1" test $rc -eq 1
    stop_daemon
    check "gRPC daemon stops cleanly" [ $? -eq 0 ]
fi

# Kafka: records through the daemon over a mock cluster, matched by key.
if [ -n "${KAFKA_TOOL:-}" ]; then
    . "$SRC/tests/lib/lib_kafka.sh"
    check "mock cluster up" start_mock in:2 out:2 dlq:2
    check "Kafka daemon joins" start_kafka_daemon kperf --set kafka.input_topics=in \
        --set kafka.output_topic=out --set kafka.dead_letter_topic=dlq \
        --set kafka.group_id=perf --set models.watch=false
    KPID=$PID
    "$PERF" -i kafka -u "$BOOT" -m fashion-mlp --input-data "$WORK/req.json" \
        --input-topic in --output-topic out --dead-letter-topic dlq --concurrency-range 2 \
        -p 500 --max-trials 4 -b 2 -f "$WORK/kafka.csv" > "$WORK/kafka.out" 2>&1
    check "kafka: exits 0" [ $? -eq 0 ]
    check "kafka: CSV, throughput, p50 <= p99, no errors" csv_ok "$WORK/kafka.csv" Concurrency 2
    echo '{"inputs": [{"name": "nope", "datatype": "FP32", "shape": [1], "data": [1]}]}' \
        > "$WORK/dead.json"
    "$PERF" -i kafka -u "$BOOT" -m fashion-mlp --input-data "$WORK/dead.json" \
        --input-topic in --output-topic out --dead-letter-topic dlq -p 200 \
        > /dev/null 2> "$WORK/dead.err"
    rc=$?
    check "kafka: a dead-lettered request exits nonzero, says so" \
        fails_with "$WORK/dead.err" $rc "went to dlq"
    stop_daemon
fi
finish
