#!/usr/bin/env bash
# A graph model end to end: two inputs (features and ids), two outputs
# (a classifier and a regression), trained from CSV data with --train,
# evaluated with --eval (the "outputs" object), each output's figures in
# the epoch lines and metrics.csv (the last epoch's equal to --eval's),
# predicted with --predict (every output, against numpy), and bad data
# rows refused with file:line.
. "$(dirname "$0")/../lib/lib.sh"
M=$WORK/models/two
D=$WORK/data
mkdir -p "$M" "$D"
cat > "$M/model.json" <<'JSON'
{"name": "two",
 "inputs": [{"name": "feat", "shape": [3], "datatype": "FP32"},
            {"name": "id", "shape": [1], "datatype": "INT64"}],
 "layers": [
   {"name": "emb", "type": "embedding", "inputs": ["id"], "num_embeddings": 4, "dim": 3},
   {"name": "flat", "type": "flatten"},
   {"name": "fc", "type": "dense", "inputs": ["feat"], "units": 3},
   {"name": "sum", "type": "add", "inputs": ["fc", "flat"]},
   {"name": "act", "type": "relu"},
   {"name": "cls", "type": "dense", "units": 2},
   {"name": "reg", "type": "dense", "inputs": ["act"], "units": 1}],
 "outputs": [{"name": "cls", "loss": "softmax_cross_entropy", "labels": ["lo", "hi"]},
             {"name": "reg", "loss": "mse", "weight": 0.5}],
 "training": {"epochs": 30, "batch_size": 16, "optimizer": "adam", "lr": 0.01}}
JSON
# class, target, then feat (3 values), then id
/usr/bin/python3 - "$D" <<'PY'
import random, sys
random.seed(3)
for split, n in (("train", 400), ("test", 100)):
    with open(f"{sys.argv[1]}/{split}.csv", "w") as f:
        for _ in range(n):
            x = [random.uniform(-1, 1) for _ in range(3)]
            i = random.randrange(4)
            c = int(x[0] + 0.3 * i > 0.5)
            f.write(f"{c},{x[1] * 2 + i * 0.1:.4f},{x[0]:.4f},{x[1]:.4f},{x[2]:.4f},{i}\n")
PY
"$DLSERVE" --train "$M" --data "$D" --threads 1 --no-progress > "$WORK/train.json" 2> "$WORK/train.err"
rc=$?
check "--train of a graph model exits 0" test $rc -eq 0
check "it writes version 1" test -s "$M/1/model.safetensors"
"$DLSERVE" --eval "$M" --data "$D" > "$WORK/eval.json" 2> "$WORK/eval.err"
check "--eval exits 0" test $? -eq 0
cat "$WORK/eval.json"
check "--eval prints the outputs object" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
o = r["outputs"]
assert set(o) == {"cls", "reg"}, o
assert 0 <= o["cls"]["accuracy"] <= 1 and o["reg"]["rmse"] >= 0
assert abs(r["loss"] - (o["cls"]["loss"] + 0.5 * o["reg"]["loss"])) < 2e-3, r
assert o["cls"]["accuracy"] > 0.7, o' "$WORK/eval.json"

# Each epoch line names every output with its test loss and metric.
NUM='[0-9]+\.[0-9]{4}'
check "each of the 30 epoch lines names both outputs with their metrics" test "$(grep -cE \
    "epoch [0-9]+/30 .* \| cls: loss $NUM acc $NUM, reg: loss $NUM rmse $NUM\$" \
    "$WORK/train.err")" = 30
check "metrics.csv: each output's columns after today's, sane, the last equal to --eval's" \
    /usr/bin/python3 -c '
import csv, json, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = json.loads(open(sys.argv[2]).readline())
head = open(sys.argv[1]).readline().strip().split(",")
assert head == ["epoch", "lr", "train_loss", "train_accuracy", "test_loss", "test_accuracy",
                "samples_per_sec", "seconds",
                "cls_train_loss", "cls_train_accuracy", "cls_test_loss", "cls_test_accuracy",
                "reg_train_loss", "reg_train_rmse", "reg_test_loss", "reg_test_rmse"], head
assert len(rows) == 30, len(rows)
for x in rows:
    v = {k: float(x[k]) for k in head}
    for s in ("train", "test"):
        assert 0 <= v[f"cls_{s}_accuracy"] <= 1 and v[f"reg_{s}_rmse"] >= 0, x
        assert v[f"cls_{s}_loss"] >= 0 and v[f"reg_{s}_loss"] >= 0, x
        # the total is the outputs losses summed with their weights (reg: 0.5)
        tot = v[f"cls_{s}_loss"] + 0.5 * v[f"reg_{s}_loss"]
        assert abs(v[f"{s}_loss"] - tot) < 1e-5 * max(1, tot), (s, x)
        # MSE of one unit: the loss is the squared RMSE
        assert abs(v[f"reg_{s}_loss"] - v[f"reg_{s}_rmse"] ** 2) < 1e-6, (s, x)
    assert v["cls_test_accuracy"] == v["test_accuracy"], x
# The test figures of the last epoch (from the evaluation in training, on
# one thread) are those of --eval (on every core): not to the bit, sums
# taken in another order differ in their last bits. --eval prints 4
# decimals (5e-5 of rounding); beyond it, losses and rmse within 1e-5 +
# 1e-4 relative, and the accuracy within one of the 100 test rows (a row
# at the decision boundary may go either way).
last, o = {k: float(rows[-1][k]) for k in head}, r["outputs"]
for got, want in ((last["cls_test_loss"], o["cls"]["loss"]),
                  (last["reg_test_loss"], o["reg"]["loss"]),
                  (last["reg_test_rmse"], o["reg"]["rmse"]), (last["test_loss"], r["loss"])):
    assert abs(got - want) <= 5e-5 + 1e-5 + 1e-4 * abs(want), (got, want)
assert abs(last["cls_test_accuracy"] - o["cls"]["accuracy"]) <= 5e-5 + 1 / 100, (last, o)
line = [l for l in open(sys.argv[3]) if "epoch 30/30" in l][0]
m = re.search(r"cls: loss (\S+) acc (\S+), reg: loss (\S+) rmse (\S+)$", line.strip())
assert list(m.groups()) == [f"{last[k]:.4f}" for k in ("cls_test_loss", "cls_test_accuracy",
                            "reg_test_loss", "reg_test_rmse")], (line, last)
' "$M/1/metrics.csv" "$WORK/eval.json" "$WORK/train.err"
check "curves.svg has a panel of the classifier's accuracy" \
    grep -q ">cls accuracy</text>" "$M/1/curves.svg"
check "... and one of the regression's RMSE" grep -q ">reg rmse</text>" "$M/1/curves.svg"

# --predict: CSV lines of each input's values; every output by name, as
# served (softmax for the classifier, the regression as it is), against
# numpy on the safetensors weights.
printf '0.1,0.2,0.3,1\n-0.5,0.7,0.05,3\n' > "$WORK/predict.csv"
"$DLSERVE" --predict "$M" "$WORK/predict.csv" > "$WORK/predict.json" 2> "$WORK/predict.err"
check "--predict of a model of two inputs and outputs exits 0" test $? -eq 0
check "--predict prints each output's values, equal to numpy's" /usr/bin/python3 -c '
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
from two_tower_ref import load
w = load(sys.argv[1])
rows = [json.loads(l) for l in open(sys.argv[2])]
assert [r["index"] for r in rows] == [0, 1], rows
x = np.array([[0.1, 0.2, 0.3], [-0.5, 0.7, 0.05]], dtype=np.float32)
ids = np.array([1, 3])
dense = lambda v, n: v @ w[n + ".weight"].T + w[n + ".bias"]
act = np.maximum(dense(x, "fc") + w["emb.weight"][ids], 0)
logits = dense(act, "cls")
cls = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
for i, r in enumerate(rows):
    assert set(r["outputs"]) == {"cls", "reg"}, r
    assert np.allclose(r["outputs"]["cls"], cls[i], rtol=1e-5, atol=1e-6), (r, cls[i])
    assert np.allclose(r["outputs"]["reg"], dense(act, "reg")[i], rtol=1e-5, atol=1e-6), r
' "$M/1/model.safetensors" "$WORK/predict.json" "$SRC/tests/py"
printf '0.1,0.2,0.3\n' > "$WORK/short.csv"
"$DLSERVE" --predict "$M" "$WORK/short.csv" > /dev/null 2> "$WORK/short.err"
rc=$?
check "--predict refuses a line without every input's values" \
    fails_with "$WORK/short.err" $rc "short.csv:1: expected 4 fields (the inputs), found 3"

cp "$D/test.csv" "$WORK/test.csv"
printf '1,0.5,0.1,0.2,0.3,1.5\n' >> "$D/test.csv"
"$DLSERVE" --eval "$M" --data "$D" > /dev/null 2> "$WORK/bad.err"
rc=$?
cat "$WORK/bad.err"
check "a fractional id is refused with file:line" \
    fails_with "$WORK/bad.err" $rc "test.csv:101: field 6 (input 'id') is not an id"
printf '2,0.5,0.1,0.2,0.3,1\n' > "$D/test.csv"
"$DLSERVE" --eval "$M" --data "$D" > /dev/null 2> "$WORK/bad2.err"
rc=$?
check "a class out of range is refused with file:line" \
    fails_with "$WORK/bad2.err" $rc "test.csv:1: field 1 (output 'cls'): bad class"
finish
