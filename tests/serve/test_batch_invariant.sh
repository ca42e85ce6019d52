#!/usr/bin/env bash
# Batch-invariant inference ([batching] batch_invariant):
# fashion-mlp (dense), fashion-cnn (convolutions, pooling) and
# fashion-resnet (a graph: batchnorm, residual adds, global pooling),
# trained briefly, answer 256 Fashion-MNIST test images bit for bit the
# same (the float32 bytes of OIP binary answers, tests/serve/
# invariant_client.py) one request at a time, mixed into batches by the
# batcher from 32 concurrent clients (one image a request; the model's
# Triton statistics must show batches of several requests, else the phase
# runs again, up to 3 times), and in requests of 8 images; and over Kafka
# (mock cluster), one record at a time (each sent once the one before is
# answered) against all 256 at once (batches of several records, by the
# statistics): the answers' "scores" the same text, and the same float32
# as over HTTP. Batches wait 2 ms for requests (eager = false) and
# inference runs on 2 threads. First with the kernels whose results depend
# on a batch's number of rows on every CPU (OpenBLAS, im2col: without the
# setting nearly every answer moves), then over HTTP with the default
# kernels. Triton's model configuration shows the setting in force. With
# batch_invariant off, under both, the concurrent phase runs again and the
# answers that moved are reported ("# " lines), not judged.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
CLIENT=$SRC/tests/serve/invariant_client.py
MODELS=(fashion-mlp fashion-cnn fashion-resnet)
N=256

for m in "${MODELS[@]}"; do
    mkdir -p "$WORK/repo/$m" && cp "$SRC/models/$m/model.json" "$WORK/repo/$m/"
done
train() {
    "$DLSERVE" --train "$WORK/repo/$1" --epochs 1 --threads 1 --no-progress "${@:2}" \
        > /dev/null 2> "$WORK/train-$1.err" || tail -n 3 "$WORK/train-$1.err" | sed 's/^/# /'
}
# the three at once, a few hundred images each: the weights need only be
# a model's, not good
train fashion-mlp --limit 1000 &
train fashion-cnn --limit 500 &
train fashion-resnet --limit 500 --batch-size 32 --optimizer adam --lr 0.003 &
wait
check "the three models train briefly" test -f "$WORK/repo/fashion-mlp/1/model.safetensors" \
    -a -f "$WORK/repo/fashion-cnn/1/model.safetensors" \
    -a -f "$WORK/repo/fashion-resnet/1/model.safetensors"

check "mock cluster up" start_mock in:1 out:1 dlq:1
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# Batches wait 2 ms for requests to join them (no eager runs, none on the
# HTTP threads); inference on 2 threads, so that its loops split.
BATCH=(--models "$WORK/repo" --set models.watch=false --set models.threads=2
       --set batching.eager=false --set batching.max_queue_delay_us=2000)
BLAS="[OpenBLAS, im2col]"
DEFAULT="[default kernels]"
# kernels LABEL COMMAND...: COMMAND under LABEL's CPU kernels. $BLAS: those
# whose results depend on a batch's number of rows on every CPU (OpenBLAS
# for dense layers, im2col + OpenBLAS for convolutions); $DEFAULT: the
# default ones, under which answers may not move without batch_invariant
# at all (dlserve's thin GEMM on an AVX2 CPU, oneDNN).
kernels() {
    local label=$1; shift
    if [ "$label" = "$BLAS" ]; then
        DLSERVE_CPU_GEMM=openblas DLSERVE_CPU_CONV=im2col "$@"
    else
        "$@"
    fi
}

# invariant MODEL: prints the batch_invariant of MODEL's Triton config
invariant() {
    [ "$(code GET "/v2/models/$1/config")" = 200 ] &&
        jq_get 'd["dynamic_batching"]["batch_invariant"]'
}
# answers MODEL MODE FILE: the answers to the N images, as MODE groups them
# (invariant_client.py: one, clients:C, group:G)
answers() {
    $PY "$CLIENT" http "$URL" "$1" "$2" "$N" "$3" 2> "$WORK/client.err" ||
        { sed 's/^/# /' "$WORK/client.err"; return 1; }
}
# rows A [B]: of the answers (10 float32 an image) in A, how many differ
# from each other, or from those in B in any bit
rows() {
    $PY - "$@" <<'PY'
import sys
a, *b = (open(f, "rb").read() for f in sys.argv[1:])
r = lambda x: [x[i:i + 40] for i in range(0, len(x), 40)]
print(sum(x != y for x, y in zip(r(a), r(b[0]))) if b else len(set(r(a))))
PY
}
# same_floats SCORES ANSWERS: the float32 numbers of SCORES (JSON arrays, a
# line each) are the bytes of ANSWERS
same_floats() {
    $PY - "$1" "$2" <<'PY'
import json, struct, sys
f = [v for line in open(sys.argv[1]) for v in json.loads(line)]
sys.exit(struct.pack("<%df" % len(f), *f) != open(sys.argv[2], "rb").read())
PY
}
# stats MODEL FILE: the model's Triton statistics
stats() { curl -sf "$URL/v2/models/$1/stats" > "$2"; }
# several BEFORE AFTER: of the batches run between two statistics of a
# model, some held more than one sample (one-image requests or records:
# several of them); prints the batches run (samples x batches)
several() {
    $PY - "$1" "$2" <<'PY'
import json, sys
sizes = [{b["batch_size"]: b["compute_infer"]["count"]
          for b in json.load(open(f))["model_stats"][0]["batch_stats"]} for f in sys.argv[1:3]]
ran = {k: v - sizes[0].get(k, 0) for k, v in sorted(sizes[1].items()) if v > sizes[0].get(k, 0)}
print(" ".join("%dx%d" % kv for kv in ran.items()))
sys.exit(0 if any(k > 1 for k in ran) else 1)
PY
}
# mixed MODEL: the N images from 32 concurrent clients into
# $WORK/MODEL.mixed, again until a batch of several requests formed (3
# tries); MIXED_DIFFER: the tries whose answers differ from
# $WORK/MODEL.one; MIXED_SIZES: the batches of the last try
mixed() {
    local try
    MIXED_DIFFER=0 MIXED_SIZES=
    for try in 1 2 3; do
        stats "$1" "$WORK/before.json" && answers "$1" clients:32 "$WORK/$1.mixed" &&
            stats "$1" "$WORK/after.json" || return 1
        cmp -s "$WORK/$1.one" "$WORK/$1.mixed" || MIXED_DIFFER=$((MIXED_DIFFER + 1))
        if MIXED_SIZES=$(several "$WORK/before.json" "$WORK/after.json"); then
            [ "$try" -eq 1 ] || echo "# $1: batches of several requests at try $try"
            return 0
        fi
    done
    return 1
}
# on LABEL: every model of the daemon at $URL answers the same bits
# however its requests are grouped
on() {
    local m
    for m in "${MODELS[@]}"; do
        check "$1 $m: the config shows batch_invariant true" test "$(invariant "$m")" = True
        check "$1 $m: $N images, one request at a time" answers "$m" one "$WORK/$m.one"
        check "$1 $m: ... each image its own answer" test "$(rows "$WORK/$m.one")" -gt 200
        check "$1 $m: $N one-image requests from 32 clients at once, batched" mixed "$m"
        echo "# $1 $m: batches run (samples x batches): $MIXED_SIZES"
        check "$1 $m: ... the same answers, bit for bit" test "$MIXED_DIFFER" -eq 0
        check "$1 $m: $N images in requests of 8" answers "$m" group:8 "$WORK/$m.group"
        check "$1 $m: ... the same answers, bit for bit" cmp "$WORK/$m.one" "$WORK/$m.group"
    done
}
# off LABEL: the concurrent phase of every model of the daemon at $URL;
# how many answers moved goes to $report
off() {
    local m
    for m in "${MODELS[@]}"; do
        check "$1 $m: the config shows batch_invariant false" test "$(invariant "$m")" = False
        check "$1 $m: $N images, one request at a time" answers "$m" one "$WORK/$m.one"
        check "$1 $m: $N one-image requests from 32 clients at once, batched" mixed "$m"
        report+="# $1 $m: $(rows "$WORK/$m.one" "$WORK/$m.mixed")/$N (batches $MIXED_SIZES)"
        report+=$'\n'
    done
}

# HTTP first, while the daemon joins its Kafka group (~3 s)
check "a daemon with batch_invariant on starts, $BLAS" kernels "$BLAS" start_daemon on-blas \
    "${BATCH[@]}" --set batching.batch_invariant=true --set kafka.brokers="$BOOT" \
    --set kafka.input_topics=in --set kafka.output_topic=out --set kafka.dead_letter_topic=dlq
on "$BLAS"
check "the daemon joins its Kafka group" wait_for 30 grep -q "assigned [1-9]" "$LOG"
for m in "${MODELS[@]}"; do
    stats "$m" "$WORK/before.json"
    check "$BLAS $m over Kafka: $N records one at a time, then all at once" \
        $PY "$CLIENT" kafka "$BOOT" in out "$m" "$N" "$WORK/$m.kone" "$WORK/$m.kburst"
    stats "$m" "$WORK/after.json"
    check "$BLAS $m over Kafka: ... the burst ran in batches of several records" \
        several "$WORK/before.json" "$WORK/after.json"
    check "$BLAS $m over Kafka: ... the same scores, number for number" \
        cmp "$WORK/$m.kone" "$WORK/$m.kburst"
    check "$BLAS $m over Kafka: ... the answers over HTTP, bit for bit" \
        same_floats "$WORK/$m.kone" "$WORK/$m.one"
done
check "the daemon stops cleanly" stop_daemon

check "a daemon with batch_invariant on starts, $DEFAULT" start_daemon on-default \
    "${BATCH[@]}" --set batching.batch_invariant=true
on "$DEFAULT"
check "the daemon stops cleanly" stop_daemon

# batch_invariant off: how many answers move when batched (reported only)
report=
for k in "$BLAS" "$DEFAULT"; do
    check "a daemon with batch_invariant off starts, $k" kernels "$k" start_daemon off \
        "${BATCH[@]}" --set batching.batch_invariant=false
    off "$k (off)"
    check "the daemon stops cleanly" stop_daemon
done
echo "# batch_invariant off: answers that moved, mixed by 32 clients against one at a time"
printf '%s' "$report"
finish
