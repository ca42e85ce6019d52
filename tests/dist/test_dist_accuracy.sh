#!/usr/bin/env bash
# Full-data fashion-mlp under mpirun: asynchronous parameter servers with 4
# trainers reach >= 0.87 test accuracy, parameter averaging every 8 steps
# >= 0.88.
. "$(dirname "$0")/../lib/lib.sh"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)

run() {  # name ranks min_accuracy args...
    local name=$1 np=$2 min=$3; shift 3
    local dir=$WORK/$name
    mkdir -p "$dir" && cp "$SRC/models/fashion-mlp/model.json" "$dir/"
    timeout 400 "${MPIRUN[@]}" -np "$np" "$DLSERVE" --train "$dir" --threads 1 --no-progress "$@" \
        > "$WORK/$name.json" 2> "$WORK/$name.log"
    check "$name: job exits 0" test $? -eq 0
    grep -E "dist:|epoch 15" "$WORK/$name.log" | tail -2
    tail -1 "$WORK/$name.json"
    local acc; acc=$(json_get "$WORK/$name.json" test_accuracy)
    check "$name: test accuracy $acc >= $min" /usr/bin/python3 -c "import sys; sys.exit(not $acc >= $min)"
    "$DLSERVE" --eval "$dir" > "$WORK/$name-eval.json"
    # training's evaluation and --eval sum in other batches and orders: an
    # image whose top two classes tie within the last bits may go either
    # way; both print 4 decimals (one image in 10,000): within one image
    check "$name: --eval of the written version agrees (within one image in 10,000)" \
        /usr/bin/python3 -c "import sys; sys.exit(not abs($(json_get "$WORK/$name-eval.json" accuracy) - $acc) <= 1.5e-4)"
}
run ps-async 5 0.87 --dist ps-async --ps-servers 1 --max-staleness 4
check "ps-async reports staleness" /usr/bin/python3 - "$WORK/ps-async.json" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(not (d["staleness_max"] <= 4 and d["updates"] > 0 and "discarded" in d))
PY
run avg8 4 0.88 --dist avg:8
finish
