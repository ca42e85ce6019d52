#!/usr/bin/env bash
# Data-parallel training of a sequence model: ids of mixed lengths through
# an embedding of 5000 rows (batches touch at most 200), an LSTM over the
# sequence, a CRF tagger on it and a classifier on its mean. Under
# `mpirun` every distributed mode trains it: allreduce (2 ranks at batch
# 16), ps-sync (one server, two trainers) and avg:1 with SGD each equal one
# process at batch 32; ps-sync sends only the embedding rows a batch
# touches; ps-async trains a model that beats chance.
. "$(dirname "$0")/../lib/lib.sh"

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
CMP="$SRC/tests/dist/compare_weights.py"
D=$WORK/data
mkdir -p "$D"
/usr/bin/python3 - "$D" "$WORK/model.json" <<'PY'
import json, os, random, sys
random.seed(2)
for split, n in (("train", 512), ("test", 256)):
    with open(os.path.join(sys.argv[1], split + ".jsonl"), "w") as f:
        for _ in range(n):
            ids = [random.randrange(1, 200) for _ in range(random.randint(1, 12))]
            f.write(json.dumps({"ids": ids, "cls": sum(ids) % 4,
                                "tags": [i % 3 for i in ids]}) + "\n")
m = {"name": "seq", "inputs": [{"name": "ids", "datatype": "INT64", "shape": [-1],
                                "max_length": 12}],
     "layers": [{"name": "emb", "type": "embedding", "num_embeddings": 5000, "dim": 16,
                 "padding_idx": 0},
                {"name": "lstm", "type": "lstm", "hidden": 16, "bidirectional": True},
                {"name": "emit", "type": "dense", "units": 3},
                {"name": "pool", "type": "seq_pool", "mode": "mean", "inputs": ["lstm"]},
                {"name": "cls", "type": "dense", "units": 4}],
     "outputs": [{"name": "tags", "from": "emit", "loss": "crf"},
                 {"name": "cls", "from": "cls"}],
     "training": {"epochs": 1, "batch_size": 32, "optimizer": "momentum", "lr": 0.05,
                  "seed": 5}}
json.dump(m, open(sys.argv[2], "w"))
PY
COMMON=(--data "$D" --threads 1 --no-progress --deterministic)

fresh() {  # name: a new model folder
    rm -rf "$WORK/$1"; mkdir -p "$WORK/$1"; cp "$WORK/model.json" "$WORK/$1/"; echo "$WORK/$1"
}

ref=$(fresh ref)
"$DLSERVE" --train "$ref" "${COMMON[@]}" --batch-size 32 > "$WORK/ref.json" 2> "$WORK/ref.log"
check "reference: one process, batch 32" test -s "$ref/1/model.safetensors"
sgd=$(fresh sgd)
"$DLSERVE" --train "$sgd" "${COMMON[@]}" --batch-size 32 --optimizer sgd > /dev/null 2>&1
check "reference: one process, batch 32, sgd" test -s "$sgd/1/model.safetensors"

equivalent() {  # name reference ranks args...
    local name=$1 reference=$2 np=$3; shift 3
    local dir; dir=$(fresh "$name")
    timeout 300 "${MPIRUN[@]}" -np "$np" "$DLSERVE" --train "$dir" "${COMMON[@]}" "$@" \
        > "$WORK/$name.json" 2> "$WORK/$name.log"
    check "$name: job exits 0" test $? -eq 0
    check "$name: equals one process at batch 32 (rel err <= 1e-5)" \
        /usr/bin/python3 "$CMP" "$dir/1/model.safetensors" "$reference/1/model.safetensors" 1e-5
}
equivalent allreduce-2 "$ref" 2 --dist allreduce --batch-size 16
equivalent ps-sync "$ref" 3 --dist ps-sync --ps-servers 1 --batch-size 16
equivalent avg1-2 "$sgd" 2 --dist avg:1 --optimizer sgd --batch-size 16
small=$(fresh small)
"$DLSERVE" --train "$small" "${COMMON[@]}" --batch-size 16 > /dev/null 2>&1
differs() { ! /usr/bin/python3 "$CMP" "$1" "$2" 1e-3; }
check "one process at batch 16 does not (rel err > 1e-3: the comparison has teeth)" \
    differs "$small/1/model.safetensors" "$ref/1/model.safetensors"
check "ps-sync: only the embedding rows a batch touches travel" \
    /usr/bin/python3 - "$WORK/ps-sync.json" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
dense = 2 * 5000 * 16 * 4          # the embedding table alone, both ways
print("bytes/step %d, the table alone would be %d" % (d["bytes_per_step"], dense))
sys.exit(not d["bytes_per_step"] < dense / 4)
PY

async=$(fresh ps-async)
timeout 300 "${MPIRUN[@]}" -np 3 "$DLSERVE" --train "$async" "${COMMON[@]}" --dist ps-async \
    --ps-servers 1 --batch-size 16 --epochs 3 > "$WORK/async.json" 2> "$WORK/async.log"
check "ps-async: job exits 0" test $? -eq 0
"$DLSERVE" --eval "$async" --data "$D" > "$WORK/eval.json" 2> "$WORK/eval.log"
cat "$WORK/eval.json"
check "ps-async: the tagger beats chance (token accuracy > 0.5 of 3 tags)" \
    /usr/bin/python3 -c '
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(not d["outputs"]["tags"]["accuracy"] > 0.5)' "$WORK/eval.json"
finish
