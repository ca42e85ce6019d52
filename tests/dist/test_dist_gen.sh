#!/usr/bin/env bash
# Data-parallel training of the generating models' graphs: models/kjv-gpt
# (causal self-attention blocks, a next_token loss) and models/kjv-es (an
# encoder-decoder: a words tokenizer on its source, cross-attention from
# the decoder to the encoder) shrunk to width 16 and 2 heads, on random
# ids and words of their vocabularies. Under `mpirun` every distributed
# mode trains each: allreduce (2 ranks at batch 8), ps-sync (one server,
# two trainers) and avg:1 with SGD equal one process at batch 16; ps-async
# trains, and the version it writes evaluates and generates. The
# comparisons hold where one process and the job compute the same sums:
# every sample's target as long (the next_token loss is a mean over each
# trainer's tokens), momentum rather than AdamW (Adam turns the float
# noise of a zero gradient, the key projection's bias, into whole steps)
# and no gradient clipping (with it, ps-sync and avg:1 do not equal one
# process: their clipping is not over the summed gradient). ~15 s.
. "$(dirname "$0")/../lib/lib.sh"

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
CMP="$SRC/tests/dist/compare_weights.py"

# The shipped model.json shrunk (widths 128 -> 16, MLPs 512 -> 32, 4 heads
# -> 2, one epoch at batch 16), its vocabularies beside it; random data.
/usr/bin/python3 - "$SRC/models" "$WORK" <<'PY'
import json, os, random, shutil, sys
models, work = sys.argv[1:3]
random.seed(3)
shrink = {128: 16, 512: 32}
for name in ("kjv-gpt", "kjv-es"):
    m = json.load(open(os.path.join(models, name, "model.json")))
    for l in m["layers"]:
        for k in ("dim", "units"):
            if l.get(k) in shrink:
                l[k] = shrink[l[k]]
        if l["type"] == "attention":
            l["heads"] = 2
    m["training"].update(epochs=1, batch_size=16, seed=5)
    os.makedirs(os.path.join(work, name), exist_ok=True)
    json.dump(m, open(os.path.join(work, name, "model.json"), "w"))
    for f in ("vocab_en.txt", "vocab_es.txt"):
        if os.path.exists(os.path.join(models, name, f)):
            shutil.copy(os.path.join(models, name, f), os.path.join(work, name, f))
en = open(os.path.join(models, "kjv-es", "vocab_en.txt")).read().split()[:300]
for split, n in (("train", 128), ("test", 32)):
    os.makedirs(os.path.join(work, "data-kjv-gpt"), exist_ok=True)
    os.makedirs(os.path.join(work, "data-kjv-es"), exist_ok=True)
    with open(os.path.join(work, "data-kjv-gpt", split + ".jsonl"), "w") as f:
        for _ in range(n):
            ids = [random.choice(b"abc de\n") for _ in range(24)]
            f.write(json.dumps({"ids": ids}) + "\n")
    with open(os.path.join(work, "data-kjv-es", split + ".jsonl"), "w") as f:
        for _ in range(n):
            src = " ".join(random.choice(en) for _ in range(random.randint(2, 12)))
            ids = [2] + [random.randrange(3, 300) for _ in range(10)] + [2]
            f.write(json.dumps({"src": src, "ids": ids}) + "\n")
PY
check "the shrunk models and their data are written" \
    test -s "$WORK/kjv-es/model.json" -a -s "$WORK/data-kjv-es/train.jsonl"

# fresh MODEL NAME: a new folder NAME holding MODEL's model.json and vocabularies
fresh() {
    rm -rf "$WORK/run/$2"; mkdir -p "$WORK/run/$2"; cp "$WORK/$1"/* "$WORK/run/$2/"
    echo "$WORK/run/$2"
}

for model in kjv-gpt kjv-es; do
    COMMON=(--data "$WORK/data-$model" --threads 1 --no-progress --deterministic --optimizer momentum --clip-norm 0)
    ref=$(fresh $model ref-$model)
    "$DLSERVE" --train "$ref" "${COMMON[@]}" --batch-size 16 > /dev/null 2> "$WORK/ref.log"
    check "$model: reference, one process at batch 16" test -s "$ref/1/model.safetensors"
    sgd=$(fresh $model sgd-$model)
    "$DLSERVE" --train "$sgd" "${COMMON[@]}" --batch-size 16 --optimizer sgd > /dev/null 2>&1
    check "$model: reference, one process at batch 16, sgd" test -s "$sgd/1/model.safetensors"

    # equivalent NAME REFERENCE RANKS ARGS...
    equivalent() {
        local name=$1 reference=$2 np=$3; shift 3
        local dir; dir=$(fresh $model "$name-$model")
        timeout 300 "${MPIRUN[@]}" -np "$np" "$DLSERVE" --train "$dir" "${COMMON[@]}" "$@" \
            > "$WORK/$name-$model.json" 2> "$WORK/$name-$model.log"
        check "$model $name: job exits 0" test $? -eq 0
        check "$model $name: equals one process at batch 16 (rel err <= 1e-5)" \
            /usr/bin/python3 "$CMP" "$dir/1/model.safetensors" "$reference/1/model.safetensors" 1e-5
    }
    equivalent allreduce-2 "$ref" 2 --dist allreduce --batch-size 8
    equivalent ps-sync "$ref" 3 --dist ps-sync --ps-servers 1 --batch-size 8
    equivalent avg1-2 "$sgd" 2 --dist avg:1 --optimizer sgd --batch-size 8

    async=$(fresh $model ps-async-$model)
    timeout 300 "${MPIRUN[@]}" -np 3 "$DLSERVE" --train "$async" "${COMMON[@]}" \
        --dist ps-async --ps-servers 1 --batch-size 8 > /dev/null 2> "$WORK/async-$model.log"
    check "$model ps-async: job exits 0" test $? -eq 0
    check "$model ps-async: its version evaluates (a perplexity)" \
        sh -c "'$DLSERVE' --eval '$async' --data '$WORK/data-$model' 2>/dev/null | grep -q perplexity"
    prompt="in the beginning"
    [ $model = kjv-gpt ] && prompt="abc"
    check "$model ps-async: its version generates" \
        sh -c "'$DLSERVE' --generate '$async' --prompt '$prompt' --max-tokens 4 2>/dev/null |
               grep -q '\"finish_reason\"'"
done
finish
