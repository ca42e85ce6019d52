#!/usr/bin/env bash
# The daemon over real HTTP on 127.0.0.1 with curl: every endpoint and
# error code, predictions equal to `dlserve --predict`, the binary tensor
# data extension (oip_binary_client.py), dynamic batching, metrics
# (promtool), bearer token, bad config, SIGTERM.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
REQ=$SRC/tests/py/make_request.py
REPO=$WORK/models
make_repo "$REPO"
check "a trained version to serve" test -s "$REPO/fashion-mlp/1/model.safetensors"

# Answers of this daemon are compared bit for bit (the request forms below,
# the binary client's): batch_invariant makes each the same bits whichever
# batch it ran in; set here because the checks rely on it. The delay (20 ms, eager off: every request waits it out) is the
# window in which the 32 concurrent clients below must meet in batches: on
# a machine with a core kept busy curl sends them within a few ms.
start_daemon main --models "$REPO" --set batching.max_queue_delay_us=20000 --set batching.eager=false \
    --set batching.batch_invariant=true
check "daemon starts and logs its port" test -n "$PORT"

# ---- health and metadata ----
check "GET /v2/health/live is 200" test "$(code GET /v2/health/live)" = 200
check "live says true" test "$(jq_get 'd["live"]')" = True
check "GET /v2/health/ready is 200" test "$(code GET /v2/health/ready)" = 200
check "GET /v2 names the server" test "$(code GET /v2)" = 200 -a "$(jq_get 'd["name"]')" = dlserve
check "GET /v2/models/fashion-mlp is 200" test "$(code GET /v2/models/fashion-mlp)" = 200
check "model metadata lists version 1" test "$(jq_get 'd["versions"]')" = "['1']"
check "model metadata input shape" test "$(jq_get 'd["inputs"][0]["shape"]')" = "[-1, 1, 28, 28]"
check "model metadata output shape" test "$(jq_get 'd["outputs"][0]["shape"]')" = "[-1, 10]"
check "GET /v2/models/fashion-mlp/versions/1 is 200" test "$(code GET /v2/models/fashion-mlp/versions/1)" = 200
check "GET .../ready is 200" test "$(code GET /v2/models/fashion-mlp/ready)" = 200
check "GET .../versions/1/ready is 200" test "$(code GET /v2/models/fashion-mlp/versions/1/ready)" = 200
check "POST /v2/repository/index lists the model" \
    test "$(code POST /v2/repository/index)" = 200 -a "$(jq_get 'd[0]["name"]')" = fashion-mlp
check "GET /status is 200 with models" test "$(code GET /status)" = 200 -a "$(jq_get 'len(d["models"])')" = 1
cores=$(getconf _NPROCESSORS_ONLN)   # as the daemon counts them (sysconf)
check "one instance computes on the cores less one (/status inference_threads)" \
    test "$(jq_get 'd["inference_threads"]')" = $(( cores > 1 ? cores - 1 : 1 ))

# ---- inference: the same answers as dlserve --predict ----
# agrees_with_predict PRED ANSWER:FIRST...: each OIP JSON answer (of
# consecutive images from image FIRST) gives every image the class that
# `dlserve --predict` printed for it (PRED, a line an image) and its
# score. Not to the bit: --predict computes on every core, the daemon on
# the cores less one, and sums taken in another order differ in their last
# bits; so --predict's class must be the answer's top class or tie it
# within tests/py/tolerance.py's bound (1e-5 + 1e-4 relative), and its
# score (4 decimals) the top probability within that bound and the
# rounding. Within the answer itself, exactly: its class is the argmax of
# its probabilities, its label --predict's for that class.
agrees_with_predict() {
    PYTHONPATH=$SRC/tests/py /usr/bin/python3 - "$@" <<'PY'
import json, sys
from tolerance import ABS, REL, near_top
pred = [json.loads(l) for l in open(sys.argv[1])]
labels = {p["class"]: p["label"] for p in pred}
for arg in sys.argv[2:]:
    path, first = arg.rsplit(":", 1)
    outs = {o["name"]: o for o in json.load(open(path))["outputs"]}
    probs = outs["probabilities"]["data"]
    n = outs["probabilities"]["shape"][0]
    assert outs["probabilities"]["shape"] == [n, 10] and len(probs) == n * 10, outs["probabilities"]
    for i in range(n):
        row, p = probs[i * 10:(i + 1) * 10], pred[int(first) + i]
        best = max(range(10), key=lambda k: row[k])
        got = (outs["class"]["data"][i], outs["label"]["data"][i])
        assert got[0] == best and labels.get(best, got[1]) == got[1], (path, i, got, row)
        assert near_top(row, p["class"]), (path, i, "--predict", p, "answer", row)
        assert abs(row[best] - p["score"]) <= 5e-5 + ABS + REL * row[best], (path, i, row, p)
PY
}
"$DLSERVE" --predict "$REPO/fashion-mlp" --model-version 1 "$DATA/t10k-images-idx3-ubyte.gz" --limit 8 \
    > "$WORK/predict.jsonl"
/usr/bin/python3 "$REQ" 0 8 --id req-42 > "$WORK/req8.json"
check "POST infer (FP32, flat, batch 8) is 200" \
    test "$(code POST /v2/models/fashion-mlp/infer -H 'Content-Type: application/json' --data-binary @"$WORK/req8.json")" = 200
cp "$WORK/body" "$WORK/resp8.json"
check "the request id is echoed" test "$(jq_get 'd["id"]')" = req-42
check "the answer names model and version" test "$(jq_get 'd["model_name"] + "/" + d["model_version"]')" = fashion-mlp/1
check "HTTP predictions equal dlserve --predict (classes, scores within the tolerance)" \
    agrees_with_predict "$WORK/predict.jsonl" "$WORK/resp8.json:0"
for form in "--nested" "--datatype UINT8" "--nested --datatype UINT8"; do
    /usr/bin/python3 "$REQ" 0 8 $form > "$WORK/req-form.json"
    code POST /v2/models/fashion-mlp/versions/1/infer --data-binary @"$WORK/req-form.json" > /dev/null
    # the same pixels in another form: the same bits (one daemon, batch_invariant)
    check "infer with $form gives the same probabilities, bit for bit" /usr/bin/python3 - "$WORK/body" "$WORK/resp8.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["outputs"][0]["data"] for f in sys.argv[1:3])
sys.exit(not (len(a) == len(b) == 80 and a == b))
PY
done
/usr/bin/python3 "$REQ" 3 1 > "$WORK/req1.json"
check "a single image (batch 1) is 200" test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 200
check "batch 1 answers image 3 as dlserve --predict does" agrees_with_predict "$WORK/predict.jsonl" "$WORK/body:3"

# ---- the binary tensor data extension, by a client written from its documentation ----
check "binary tensors both ways equal the JSON answers; bad sizes and names are 400" \
    /usr/bin/python3 "$SRC/tests/serve/oip_binary_client.py" "$URL" --data "$DATA"

# ---- errors ----
errcase() {  # description expected-code method path [curl args]
    local desc=$1 want=$2; shift 2
    local got; got=$(code "$@")
    check "$desc: $want (got $got)" test "$got" = "$want"
    check "$desc: body is {\"error\": ...}" /usr/bin/python3 -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1]))["error"])' "$WORK/body"
}
errcase "bad JSON" 400 POST /v2/models/fashion-mlp/infer --data-binary '{"inputs": ['
errcase "wrong shape" 400 POST /v2/models/fashion-mlp/infer \
    --data-binary '{"inputs":[{"name":"input","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}'
errcase "data length does not match the shape" 400 POST /v2/models/fashion-mlp/infer \
    --data-binary '{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[1,2,3]}]}'
errcase "wrong datatype" 400 POST /v2/models/fashion-mlp/infer \
    --data-binary '{"inputs":[{"name":"input","shape":[1,784],"datatype":"BYTES","data":["x"]}]}'
errcase "missing inputs" 400 POST /v2/models/fashion-mlp/infer --data-binary '{"id":"x"}'
errcase "unknown model" 404 POST /v2/models/nope/infer --data-binary @"$WORK/req1.json"
errcase "unknown version" 404 POST /v2/models/fashion-mlp/versions/9/infer --data-binary @"$WORK/req1.json"
errcase "unknown model metadata" 404 GET /v2/models/nope
errcase "unknown path" 404 GET /v3/nothing
errcase "wrong method on infer" 405 GET /v2/models/fashion-mlp/infer
errcase "wrong method on health" 405 POST /v2/health/live
head -c 9000000 /dev/zero | tr '\0' '1' > "$WORK/big.json"
errcase "body over the limit" 413 POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/big.json"

# ---- metrics ----
check "GET /metrics is 200" test "$(code GET /metrics)" = 200
cp "$WORK/body" "$WORK/metrics.txt"
check "promtool check metrics passes" "$SRC/tests/serve/promtool_check.sh" "$WORK/metrics.txt"
for name in nv_inference_request_success nv_inference_request_failure nv_inference_count \
    nv_inference_exec_count nv_inference_request_duration_us nv_inference_queue_duration_us \
    nv_inference_compute_infer_duration_us nv_inference_compute_input_duration_us \
    nv_inference_compute_output_duration_us dlserve_batch_size_bucket \
    process_resident_memory_bytes; do
    check "metrics has $name" grep -q "^$name" "$WORK/metrics.txt"
done
check "HTTP answers by method, handler and code" grep -qE \
    '^dlserve_http_responses_total\{method="POST",handler="infer",code="200"\} [1-9]' \
    "$WORK/metrics.txt"
check "... the health checks under their own handler" grep -qE \
    '^dlserve_http_responses_total\{method="GET",handler="health_(live|ready)",code="200"\} [1-9]' \
    "$WORK/metrics.txt"

# ---- dynamic batching: 32 concurrent clients, each gets its own answer ----
for i in $(seq 0 31); do
    /usr/bin/python3 "$REQ" "$i" 1 --id "c$i" > "$WORK/c$i.json"
    [ "$i" -gt 0 ] && echo "next" >> "$WORK/parallel.cfg"
    echo "url = \"$URL/v2/models/fashion-mlp/infer\"" >> "$WORK/parallel.cfg"
    echo "data-binary = \"@$WORK/c$i.json\"" >> "$WORK/parallel.cfg"
    echo "output = \"$WORK/r$i.json\"" >> "$WORK/parallel.cfg"
done
"$DLSERVE" --predict "$REPO/fashion-mlp" --model-version 1 "$DATA/t10k-images-idx3-ubyte.gz" --limit 32 \
    > "$WORK/predict32.jsonl"
# own_answers: each of the 32 answers (r0..r31.json) has its client's id
# and answers its image as dlserve --predict does (agrees_with_predict).
own_answers() {
    /usr/bin/python3 - "$WORK" <<'PY' || return 1
import json, sys
w = sys.argv[1]
for i in range(32):
    r = json.load(open("%s/r%d.json" % (w, i)))
    assert r["id"] == "c%d" % i, r.get("id")
PY
    agrees_with_predict "$WORK/predict32.jsonl" $(for i in $(seq 0 31); do echo "$WORK/r$i.json:$i"; done)
}
# counters: inferences, batches, direct runs and held batches so far, as
# /metrics (nv_inference_count, nv_inference_exec_count) and /status say.
counters() {
    code GET /metrics > /dev/null && cp "$WORK/body" "$WORK/counters.txt" &&
        code GET /status > /dev/null &&
        /usr/bin/python3 - "$WORK/counters.txt" "$WORK/body" <<'PY'
import json, re, sys
t = open(sys.argv[1]).read()
s = json.load(open(sys.argv[2]))["batcher"]
count = sum(float(v) for v in re.findall(r'^nv_inference_count\{[^}]*\} (\S+)', t, re.M))
execs = sum(float(v) for v in re.findall(r'^nv_inference_exec_count\{[^}]*\} (\S+)', t, re.M))
print(int(count), int(execs), s["direct_runs"], s["held_batches"])
PY
}
# burst COUNT CONFIG: sends the curl CONFIG's requests (COUNT of them) at
# once, sets b_count, b_batches, b_direct to what this burst alone added
# (inferences, batches, runs alone on an event loop), b_mean to its mean
# batch, and held to the held batches so far.
burst() {
    local c0 e0 d0 h0 c1 e1 d1
    read -r c0 e0 d0 h0 < <(counters)
    curl -s -S --no-progress-meter --parallel --parallel-immediate --parallel-max "$1" -K "$2"
    read -r c1 e1 d1 held < <(counters)
    b_count=$((c1 - c0)) b_batches=$((e1 - e0)) b_direct=$((d1 - d0))
    b_mean=$(/usr/bin/python3 -c 'import sys; print("%.2f" % (int(sys.argv[1]) / max(1, int(sys.argv[2]))))' \
        "$b_count" "$b_batches")
}
# The 32 clients meet in batches within the 20 ms delay. A burst in which
# every request came more than 20 ms after the one before (curl descheduled
# throughout, on a loaded machine) would run them one by one, so up to 3
# bursts are sent; without dynamic batching all three run 32 batches of 1.
rounds=0
while [ $rounds -lt 3 ]; do
    rounds=$((rounds + 1))
    rm -f "$WORK"/r[0-9]*.json
    burst 32 "$WORK/parallel.cfg"
    own_answers || break
    [ "$b_batches" -lt 32 ] && break
done
check "32 concurrent clients each get their own answer" own_answers
check "32 concurrent clients ran in batches (burst $rounds: 32 in $b_batches batches)" \
    test "$b_count" = 32 -a "$b_batches" -lt 32

check "SIGTERM: exit 0 within 10 s" stop_daemon

# ---- one event loop under load: requests arriving back to back are batched ----
# A lone request runs on the event loop that read it (batcher_run_now).
# With one event loop nothing is ever queued while it computes, so only
# the loop's own sign of load (it did not sleep between two requests)
# stops those runs: without it, once one ran on the loop, all the rest
# could too, one by one (test_registry checks the rule itself). The
# requests the loop then reads in one pass run together as a held batch
# on the loop (within direct_max_us), or go to the batcher's worker. The
# model is fashion-cnn (~0.1 ms a sample on one core), so that the loop
# computes more slowly than curl sends.
mkdir -p "$WORK/cnn/fashion-cnn" "$WORK/oneloop"
cp "$SRC/models/fashion-cnn/model.json" "$WORK/cnn/fashion-cnn/"
"$DLSERVE" --train "$WORK/cnn/fashion-cnn" --epochs 1 --limit 256 --threads 1 --no-progress \
    > /dev/null 2>&1
"$DLSERVE" --predict "$WORK/cnn/fashion-cnn" "$DATA/t10k-images-idx3-ubyte.gz" --limit 4 \
    > "$WORK/predict-cnn.jsonl"
# all_class3: each of the 640 answers in $WORK/oneloop is image 3's, the
# same bits whether it ran alone or in a batch (batch_invariant), and
# answers image 3 as dlserve --predict does (within the tolerance:
# agrees_with_predict).
all_class3() {
    /usr/bin/python3 - "$WORK" <<'PY' || return 1
import json, sys
w = sys.argv[1]
got = [json.load(open("%s/oneloop/r%d.json" % (w, i)))["outputs"] for i in range(1, 641)]
sys.exit(not all(g == got[0] for g in got))
PY
    agrees_with_predict "$WORK/predict-cnn.jsonl" "$WORK/oneloop/r1.json:3"
}
# direct_max_us: a held batch's bound, out of the way of a slow (sanitizer) build.
# batch_invariant: the 640 answers are compared bit for bit (all_class3).
start_daemon oneloop --models "$WORK/cnn" --set http.threads=1 --set batching.max_batch_size=64 \
    --set batching.direct_max_us=100000 --set batching.batch_invariant=true
# curl opens its 128 connections all at once (--parallel-immediate): 128
# or more sockets turning ready together once stalled libmicrohttpd's own
# event loop until its 60-s connection timeout closed them all
# (http_loop.c says why); each transfer gives up after 20 s, so that such
# a stall fails the checks below rather than waiting it out.
for i in $(seq 640); do
    [ "$i" -gt 1 ] && echo next
    echo "url = \"$URL/v2/models/fashion-cnn/infer\""
    echo "data-binary = \"@$WORK/req1.json\""
    echo "output = \"$WORK/oneloop/r$i.json\""
    echo "max-time = 20"
done > "$WORK/oneloop.cfg"
# How many of a burst run alone depends on the machine: curl has to send
# faster than the loop computes. With a core kept busy a burst ran 32 to
# 128 of its 640 alone, once 384: the load can starve curl for a whole
# burst. A loop without its sign of load runs nearly every request alone,
# burst after burst. So up to 3 bursts are sent; one must run fewer than
# half alone and average over 1.2 a batch.
rounds=0
while [ $rounds -lt 3 ]; do
    rounds=$((rounds + 1))
    burst 128 "$WORK/oneloop.cfg"
    [ $rounds = 1 ] && { all_class3; first=$?; }
    echo "# one event loop, burst $rounds: $b_direct of $b_count ran alone, $b_batches batches (mean $b_mean)"
    [ "$b_direct" -lt 320 ] && /usr/bin/python3 -c "import sys; sys.exit(not $b_mean > 1.2)" && break
done
check "one event loop: 640 requests from 128 clients all answered with image 3's class" test "$first" = 0
check "one event loop: fewer than half of a burst's requests ran alone on it (burst $rounds: direct_runs $b_direct of $b_count)" \
    test "$b_count" = 640 -a "$b_direct" -lt 320
check "one event loop: they ran in batches (burst $rounds: mean batch $b_mean, over 1.2)" \
    /usr/bin/python3 -c "import sys; sys.exit(not $b_mean > 1.2)"
# A held batch needs requests that one pass of the loop reads together; a
# slow (sanitizer) or loaded build can miss that in a burst, so up to three
# more are sent. Without held batches none of them holds one.
for _ in 1 2 3; do
    [ "$held" -gt 0 ] && break
    burst 128 "$WORK/oneloop.cfg"
done
check "one event loop: it batched requests it read in one pass itself (held_batches $held)" \
    test "$held" -gt 0
code GET /metrics > /dev/null
check "one event loop: /metrics counts the held batches (dlserve_batcher_held_batches_total $held)" \
    grep -qx "dlserve_batcher_held_batches_total $held" "$WORK/body"
# Ten more bursts, each on 128 new connections: such a stall came in about
# one burst of ten (tests/serve/burst_rounds.sh measures it).
sed 's|^output = .*|output = "/dev/null"\nwrite-out = "%{http_code}\\n"|' "$WORK/oneloop.cfg" \
    > "$WORK/bursts.cfg"
short=0
for _ in $(seq 10); do
    n=$(curl -s --parallel --parallel-immediate --parallel-max 128 -K "$WORK/bursts.cfg" |
        grep -c '^200$')
    [ "$n" -eq 640 ] || short=$((short + 1))
done
check "one event loop: 10 more bursts of 640 on 128 new connections all answered ($short not)" \
    test "$short" = 0
# The same load again, while 16 clients send 480 requests and reset their
# connections unread: some while the loop holds or queues their request.
rm -f "$WORK"/oneloop/r*.json
/usr/bin/python3 "$SRC/tests/serve/vanish.py" "$PORT" /v2/models/fashion-cnn/infer "$WORK/req1.json" \
    480 16 > "$WORK/vanish.out" 2>&1 &
vanish=$!
curl -s -S --no-progress-meter --parallel --parallel-immediate --parallel-max 128 \
    -K "$WORK/oneloop.cfg"
vrc=0
wait $vanish || vrc=$?
check "one event loop: 480 requests sent on connections reset unread ($(cat "$WORK/vanish.out"))" \
    test $vrc = 0
check "one event loop: beside them, 640 requests all answered with image 3's class" all_class3
check "one event loop: SIGTERM, exit 0 (no request left in flight)" stop_daemon

# ---- two instances: two workers, each on its own copy of the model ----
start_daemon inst --models "$REPO" --set models.instances=2 --set batching.max_batch_size=4
code GET /status > /dev/null
check "two instances: /status says 2" test "$(jq_get 'd["batcher"]["instances"]')" = 2
check "two instances: each on its half of the cores" \
    test "$(jq_get 'd["inference_threads"]')" = $(( cores > 2 ? cores / 2 : 1 ))
# instances_used: 32 concurrent clients (up to 5 rounds) until both workers
# have run batches; every answer is its own and equals dlserve --predict.
instances_used() {
    sed "s|^url = \"[^\"]*/v2/|url = \"$URL/v2/|" "$WORK/parallel.cfg" > "$WORK/parallel2.cfg"
    for _ in 1 2 3 4 5; do
        rm -f "$WORK"/r[0-9]*.json
        curl -s -S --no-progress-meter --parallel --parallel-immediate --parallel-max 32 \
            -K "$WORK/parallel2.cfg"
        own_answers || return 1
        code GET /status > /dev/null
        [ "$(jq_get 'min(d["batcher"]["batches_by_instance"]) > 0')" = True ] && return 0
    done
    return 1
}
check "two instances: both run batches, every answer its own and right" instances_used
check "two instances: SIGTERM, exit 0" stop_daemon
"$DLSERVE" --models "$REPO" --set http.port=0 --set models.device=cuda \
    --set models.instances=2 > /dev/null 2> "$WORK/inst-cuda.err"; rc=$?
check "instances on a GPU: refused at start" test $rc -ne 0
check "instances on a GPU: the error names models.instances" grep -q "models.instances" "$WORK/inst-cuda.err"

# ---- bearer token ----
start_daemon token --models "$REPO" --set http.token=s3cret
errcase "missing token" 401 POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json"
errcase "wrong token" 401 GET /v2/models/fashion-mlp -H "Authorization: Bearer nope"
check "right token is 200" test "$(code POST /v2/models/fashion-mlp/infer -H 'Authorization: Bearer s3cret' --data-binary @"$WORK/req1.json")" = 200
check "health needs no token" test "$(code GET /v2/health/live)" = 200
stop_daemon

# ---- [log] debug: one subsystem turned up, the others at [log] level ----
start_daemon debuglog --models "$REPO" --set log.level=warning --set log.debug=http
code GET /v2/health/live > /dev/null
stop_daemon
# Not under journald, a text line is "TIME LEVEL subsystem: message", the
# time ISO-8601 in UTC.
TS='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z'
check "log.debug=http: http logs its debug lines" \
    grep -qE "^$TS debug http: GET /v2/health/live: 200" "$LOG"
check "log.debug=http: the other subsystems log at warning and above only" \
    bash -c '! grep -v -E -e "^$2 (err|warning) " -e "^$2 [a-z]+ http: " "$1"' _ "$LOG" "$TS"
check "every line starts with its time and level" \
    bash -c '! grep -v -E "^$2 (err|warning|notice|info|debug) [a-z_-]+: " "$1"' _ "$LOG" "$TS"
# Under journald (JOURNAL_STREAM names stderr's device and inode, as
# systemd sets it), "<N>subsystem: message": journald stamps the time.
: > "$WORK/journal.log"
JOURNAL_STREAM=$(stat -c '%d:%i' "$WORK/journal.log") \
    "$DLSERVE" --set http.port=0 --models "$REPO" 2>> "$WORK/journal.log" > /dev/null &
PID=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/journal.log" && break; sleep 0.1; done
stop_daemon
check "under journald: <N> prefixes and no time" \
    grep -qE '^<5>http: listening on http://127\.0\.0\.1:[0-9]+' "$WORK/journal.log"
check "under journald: every line has its <N>" \
    bash -c '! grep -v -E "^<[0-7]>[a-z_-]+: " "$1"' _ "$WORK/journal.log"
JOURNAL_STREAM=1:1 "$DLSERVE" --set http.port=0 --models "$REPO" 2> "$WORK/other.log" \
    > /dev/null &
PID=$!
for _ in $(seq 100); do grep -q "listening on" "$WORK/other.log" && break; sleep 0.1; done
stop_daemon
check "JOURNAL_STREAM naming another file: time stamps" \
    grep -qE "^$TS notice http: listening on" "$WORK/other.log"

# ---- 503: a full queue ----
# A request of 4 fills the queue of 4 and waits there 5 s (eager off); the
# next is sent once /status shows those 4 queued, so it comes within the
# 5 s whatever the load (a poll and a curl: well under a second).
start_daemon full --models "$REPO" --set batching.max_queue_size=4 --set batching.eager=false \
    --set batching.max_queue_delay_us=5000000 --set batching.max_batch_size=64
/usr/bin/python3 "$REQ" 0 4 > "$WORK/req4.json"
curl -s -o /dev/null -w '%{http_code}' "$URL/v2/models/fashion-mlp/infer" \
    --data-binary @"$WORK/req4.json" > "$WORK/filler.code" &
filler=$!
queued4() { code GET /status > /dev/null && [ "$(jq_get 'd["batcher"]["queued_samples"].get("fashion-mlp", 0)')" = 4 ]; }
for _ in $(seq 100); do queued4 && break; sleep 0.1; done
check "the queue holds the 4 samples of the first request" queued4
errcase "queue full" 503 POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json"
wait $filler
check "... which is answered once its delay is over" test "$(cat "$WORK/filler.code")" = 200
code GET /status > /dev/null
check "eager=false: no request runs on the HTTP thread (direct_runs 0)" \
    test "$(jq_get 'd["batcher"]["direct_runs"]')" = 0
stop_daemon

# ---- eager batching: a lone request does not wait out the delay ----
# With a 10 s delay, an answer within 5 s comes from the eager rule (no
# other request on its way), not from the delay.
# direct_max_us: the bound for running on the HTTP thread, out of the way of
# a slow (sanitizer) build; direct_max_us=0 below checks that it applies.
start_daemon eager --models "$REPO" --set batching.max_queue_delay_us=10000000 \
    --set batching.max_batch_size=64 --set batching.direct_max_us=100000
check "eager (default): a lone request runs before the 10 s delay" \
    curl -sf -o "$WORK/lone.json" --max-time 5 "$URL/v2/models/fashion-mlp/infer" --data-binary @"$WORK/req1.json"
code GET /status > /dev/null
check "/status shows eager batching" test "$(jq_get 'd["batcher"]["eager"]')" = True
check "eager: the lone request ran on the HTTP thread (direct_runs 1)" \
    test "$(jq_get 'd["batcher"]["direct_runs"]')" = 1
code GET /metrics > /dev/null
check "eager: /metrics counts it (dlserve_batcher_direct_runs_total 1)" \
    grep -qx 'dlserve_batcher_direct_runs_total 1' "$WORK/body"
check "eager: its answer is dlserve --predict's (image 3)" \
    agrees_with_predict "$WORK/predict.jsonl" "$WORK/lone.json:3"
stop_daemon
start_daemon nodirect --models "$REPO" --set batching.direct_max_us=0
check "direct_max_us=0: a lone request is answered" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 200
code GET /status > /dev/null
check "direct_max_us=0: it ran on the batcher's worker (direct_runs 0)" \
    test "$(jq_get 'd["batcher"]["direct_runs"]')" = 0
stop_daemon

# ---- version policy: latest:N and specific versions ----
mkdir -p "$REPO/fashion-mlp/2"
cp "$REPO/fashion-mlp/1/model.safetensors" "$REPO/fashion-mlp/2/"
start_daemon latest2 --models "$REPO" --set models.policy=latest:2
code GET /v2/models/fashion-mlp > /dev/null
check "policy latest:2 serves versions 1 and 2" test "$(jq_get 'd["versions"]')" = "['1', '2']"
check "version 1 still answers under latest:2" \
    test "$(code POST /v2/models/fashion-mlp/versions/1/infer --data-binary @"$WORK/req1.json")" = 200
check "the newest answers without a version" test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 200 -a "$(jq_get 'd["model_version"]')" = 2
stop_daemon
start_daemon pinned --models "$REPO" --set models.policy=versions:1
code GET /v2/models/fashion-mlp > /dev/null
check "policy versions:1 serves only version 1" test "$(jq_get 'd["versions"]')" = "['1']"
stop_daemon
rm -rf "$REPO/fashion-mlp/2"

# ---- TLS ----
if command -v openssl > /dev/null; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
        -days 1 -subj /CN=localhost > /dev/null 2>&1
    start_daemon tls --models "$REPO" --set http.tls_cert="$WORK/cert.pem" --set http.tls_key="$WORK/key.pem"
    check "TLS: the log says https" grep -q "listening on https://" "$LOG"
    check "TLS: infer over https is 200" test "$(curl -s -o "$WORK/body" -w '%{http_code}' --cacert "$WORK/cert.pem" \
        "https://localhost:$PORT/v2/models/fashion-mlp/infer" --data-binary @"$WORK/req1.json")" = 200
    check "TLS: plain http is not answered" sh -c "! curl -sf http://127.0.0.1:$PORT/v2/health/live"
    stop_daemon
fi

# ---- bad configuration: file and line ----
printf '[http]\nport = 8080\n[batching]\nmax_batch_size = zero\n' > "$WORK/bad.conf"
"$DLSERVE" --config "$WORK/bad.conf" > /dev/null 2> "$WORK/badconf.err"; rc=$?
check "bad config: exit non-zero" test $rc -ne 0
check "bad config: names file and line" grep -q "bad.conf:4" "$WORK/badconf.err"
"$DLSERVE" --check-config "$SRC/conf/dlserve.conf" > "$WORK/effective.conf"
check "--check-config prints the effective config" grep -q "max_batch_size" "$WORK/effective.conf"

finish
