#!/usr/bin/env bash
# ONNX import against PyTorch, value by value. PyTorch 1.13 exports an MLP,
# a CNN with batchnorm, a residual CNN, an embedding + concat model of two
# inputs and a model of the other operators (grouped and dilated
# convolution, Slice, Div, Pow, Sqrt, Erf, Clip, LeakyRelu, HardSigmoid,
# HardSwish, constant operands; tests/py/onnx_models.py). Each, imported
# with --import, prints PyTorch's outputs through --predict, and served
# from model.onnx answers them over HTTP, on random inputs at batch 1 and
# 32: every value within 1e-4 of PyTorch's, relative (tests/py/onnx_check.py,
# shown to catch a smaller difference). docs/onnx.md's walk-through runs as
# it is written (its export, model.json and request). fashion-mlp,
# fashion-cnn, fashion-resnet and two-tower, exported (onnx.checker
# accepts them) and imported back, answer exactly as the originals: the
# daemon's probabilities, --predict's values, --eval's total loss (each
# output's weight comes back). Refused: an unsupported operator (operator,
# node, opset named, while the others keep serving), truncated and
# corrupted files, external data outside the model's folder. Fine-tuning
# equals PyTorch's. A 2-layer nn.TransformerEncoder classifier (three
# exports) through --predict and HTTP, and graphs that move the batch off
# axis 0 refused. --bench --infer-batch on an imported model. ~40 s.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
PY=/usr/bin/python3
CHECK=$SRC/tests/py/onnx_check.py
X=$WORK/onnx
M=$WORK/models
R=$WORK/repo
W=$WORK/walk
mkdir -p "$X" "$M" "$R" "$W"
$PY "$SRC/tests/py/onnx_models.py" export "$X" > "$WORK/export.log" 2>&1 ||
    sed 's/^/# /' "$WORK/export.log"
check "PyTorch exports the models" test -s "$X/emb2.onnx"
$PY "$SRC/tests/py/onnx_models.py" walkthrough "$SRC/docs/onnx.md" "$W" > "$WORK/walk.log" 2>&1 ||
    sed 's/^/# /' "$WORK/walk.log"
check "docs/onnx.md's export runs as written" test -s "$W/mlp.onnx" -a -s "$W/request.ref.json"

# --predict of an imported model without a model.json beside prints every
# output value as it is (shortest exact floats).
for m in mlp cnn_bn resnet emb2 ops; do
    "$DLSERVE" --import "$X/$m.onnx" --models "$M" --name $m > "$WORK/imp.json" 2> "$WORK/imp.err"
    check "$m: --import writes version 1" test -s "$M/$m/1/model.safetensors"
    for b in 1 32; do
        "$DLSERVE" --predict "$M/$m" "$X/$m.b$b.csv" > "$WORK/$m.pred$b" 2> "$WORK/pred.err"
        check "$m: --predict gives PyTorch's outputs at batch $b, value by value" \
            $PY "$CHECK" predict "$WORK/$m.pred$b" "$X/$m.b$b.json"
    done
done

# Mul(x, Sigmoid(x)), SiLU as exporters write it, imports as one silu layer.
check "ops: SiLU imports as one silu layer, no sigmoid left" /usr/bin/python3 -c '
import json, sys
types = [l["type"] for l in json.load(open(sys.argv[1]))["layers"]]
assert "silu" in types and "sigmoid" not in types, types
' "$M/ops/model.json"

# --bench --infer-batch measures an imported model as it is: no --data.
"$DLSERVE" --bench "$M/resnet" --infer-batch 1,4 --threads 1 > "$WORK/bench.json" 2> "$WORK/bench.err"
check "--bench --infer-batch runs an imported model without --data" /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert [d["batch"] for d in r] == [1, 4] and all(d["infer_samples_per_sec"] > 0 for d in r), r
' "$WORK/bench.json"
# The weights keep PyTorch's names.
check "safetensors names are the state_dict's" $PY -c '
import json, struct, sys
for m in ("mlp", "cnn_bn", "resnet", "emb2"):
    f = open(f"{sys.argv[1]}/{m}/1/model.safetensors", "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    names = set(json.loads(f.read(n))) - {"__metadata__"}
    want = set(open(f"{sys.argv[2]}/{m}.names").read().split())
    assert names == want, (m, names ^ want)' "$M" "$X"
# The comparison sees one value 2e-4 (relative) off PyTorch's: the largest.
at=$($PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
i, j = max(((i, j) for i, r in enumerate(d["y"]) for j in range(len(r))),
           key=lambda ij: abs(d["y"][ij[0]][ij[1]]))
d["y"][i][j] *= 1 + 2e-4
json.dump(d, open(sys.argv[2], "w"))
print("%d, %d" % (i, j))' "$X/mlp.b32.json" "$WORK/off.json")
$PY "$CHECK" predict "$WORK/mlp.pred32" "$WORK/off.json" > /dev/null 2> "$WORK/err"
check "a value 2e-4 off PyTorch's is seen, named" \
    fails_with "$WORK/err" $? "value \[$at\] is .*(1 of 96 values differ)"

# Refusals: a named unsupported operator, truncated and corrupted files.
"$DLSERVE" --import "$X/unsupported.onnx" --models "$M" --name bad > /dev/null 2> "$WORK/err"
check "an unsupported operator is refused naming node, operator and opset" \
    fails_with "$WORK/err" $? "node '/CumSum' (CumSum, opset 13): unsupported operator"
head -c 300 "$X/mlp.onnx" > "$WORK/cut.onnx"
"$DLSERVE" --import "$WORK/cut.onnx" --models "$M" --name cut > /dev/null 2> "$WORK/err"
check "a truncated file is refused with a reason" fails_with "$WORK/err" $? "cut short"
/usr/bin/python3 -c '
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(40, len(b), 97):
    b[i] ^= 0xff
open(sys.argv[2], "wb").write(b)' "$X/mlp.onnx" "$WORK/bad.onnx"
"$DLSERVE" --import "$WORK/bad.onnx" --models "$M" --name bad2 > /dev/null 2> "$WORK/err"
check "a corrupted file is refused with a reason" fails_with "$WORK/err" $? "bad2\|onnx"
"$DLSERVE" --import "$X/mlp.onnx" --models "$M" > /dev/null 2> "$WORK/err"
check "--import without --name is refused" fails_with "$WORK/err" $? "needs --name NAME"
"$DLSERVE" --import "$X/mlp.onnx" --models "$M" --name ../up > /dev/null 2> "$WORK/err"
check "--import with a name that is no folder name is refused" \
    fails_with "$WORK/err" $? "not a valid model name"
check "refused imports write nothing" test ! -e "$M/bad/1" -a ! -e "$M/cut/1"

# Fine-tuning: a model.json beside gives the output its loss and labels and
# the training settings; --train --model-version 1 starts from the imported
# weights and equals PyTorch's own SGD from the same weights: every step's
# loss, and the weights after 5 full-batch steps to 1e-4 relative.
F=$M/mlpft
mkdir -p "$F" "$WORK/ft"
cat > "$F/model.json" <<'JSON'
{"name": "mlpft", "outputs": [{"name": "y", "loss": "softmax_cross_entropy",
                               "labels": ["a", "b", "c"]}],
 "training": {"epochs": 5, "batch_size": 64, "optimizer": "sgd", "lr": 0.1, "momentum": 0}}
JSON
/usr/bin/python3 -c '
import random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    for i in range(64):
        x = [random.uniform(-1, 1) for _ in range(8)]
        f.write("%d,%s\n" % (int(x[0] + x[1] > 0) + int(x[2] > 0.5), ",".join("%.6f" % v for v in x)))
' "$X/ft.csv"
cp "$X/ft.csv" "$WORK/ft/train.csv" && cp "$X/ft.csv" "$WORK/ft/test.csv"
"$DLSERVE" --import "$X/mlp.onnx" --models "$M" --name mlpft > /dev/null 2>&1
check "the model.json beside is kept with the graph merged in" /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["outputs"][0]["loss"] == "softmax_cross_entropy" and d["layers"] and d["training"]["lr"] == 0.1, d' "$F/model.json"
"$DLSERVE" --train "$F" --model-version 1 --data "$WORK/ft" --threads 1 --no-progress \
    > "$WORK/ft.json" 2> "$WORK/ft.err"
check "--train --model-version 1 fine-tunes into version 2" test -s "$F/2/model.safetensors"
/usr/bin/python3 "$SRC/tests/py/onnx_models.py" finetune "$X" 5 64 0.1 "$F/2/model.safetensors" \
    > "$WORK/ft-torch.txt" 2> "$WORK/ft-torch.err"
check "the fine-tuned weights equal PyTorch's (1e-4 relative)" test $? -eq 0
check "every step's loss equals PyTorch's" /usr/bin/python3 -c '
import re, sys
ours = [float(v) for v in re.findall(r"epoch \d+/\d+ loss ([0-9.]+)", open(sys.argv[1]).read())]
theirs = [float(v) for v in open(sys.argv[2]).read().split()[:5]]
assert len(ours) == 5 and all(abs(a - b) <= 1e-4 for a, b in zip(ours, theirs)), (ours, theirs)
' "$WORK/ft.err" "$WORK/ft-torch.txt"

# External data: read from the model's folder; a location outside it (a
# ".." path, or a link) is refused.
E=$WORK/ext
mkdir -p "$E/a" "$E/b"
/usr/bin/python3 - "$X/mlp.onnx" "$E" <<'PY'
import onnx, sys
m = onnx.load(sys.argv[1])
onnx.save_model(m, f"{sys.argv[2]}/a/model.onnx", save_as_external_data=True,
                all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
m = onnx.load(f"{sys.argv[2]}/a/model.onnx", load_external_data=False)
for t in m.graph.initializer:
    for e in t.external_data:
        if e.key == "location":
            e.value = "../weights.bin"
onnx.save_model(m, f"{sys.argv[2]}/a/escape.onnx")
PY
cp "$E/a/weights.bin" "$E/weights.bin"
cp "$E/a/model.onnx" "$E/b/model.onnx" && ln -s ../weights.bin "$E/b/weights.bin"
"$DLSERVE" --import "$E/a/model.onnx" --models "$M" --name ext > /dev/null 2>&1
"$DLSERVE" --predict "$M/ext" "$X/mlp.b32.csv" > "$WORK/ext.pred" 2> "$WORK/pred.err"
check "external data is read from the model's folder" \
    $PY "$CHECK" predict "$WORK/ext.pred" "$X/mlp.b32.json"
"$DLSERVE" --import "$E/a/escape.onnx" --models "$M" --name ext2 > /dev/null 2> "$WORK/err"
check "an external data path leaving the folder is refused" \
    fails_with "$WORK/err" $? "must be a relative path inside the model's folder"
"$DLSERVE" --import "$E/b/model.onnx" --models "$M" --name ext3 > /dev/null 2> "$WORK/err"
check "an external data link leaving the folder is refused" \
    fails_with "$WORK/err" $? "outside the model's folder"

# dlserve's own export comes back: the input scaling it writes into the
# graph (constant operands), the losses, weights and labels of its
# "dlserve.model" metadata. Each model trains briefly into the daemon's
# repository, is exported, checked by onnx.checker and imported beside
# the original as <model>-rt.
IMG=$DATA/t10k-images-idx3-ubyte.gz
for m in fashion-mlp fashion-cnn fashion-resnet two-tower; do
    mkdir -p "$R/$m" && cp "$SRC/models/$m/model.json" "$R/$m/"
done
$PY "$SRC/tests/py/make_two_tower.py" "$WORK/tt" --train 500 --test 200 > /dev/null
for m in fashion-mlp fashion-cnn fashion-resnet; do
    "$DLSERVE" --train "$R/$m" --limit 256 --epochs 1 --batch-size 32 --threads 1 \
        --no-progress > /dev/null 2>> "$WORK/train.err"
done
"$DLSERVE" --train "$R/two-tower" --data "$WORK/tt" --epochs 1 --threads 1 --no-progress \
    > /dev/null 2>> "$WORK/train.err"
for m in fashion-mlp fashion-cnn fashion-resnet two-tower; do
    "$DLSERVE" --export "$R/$m" --onnx "$WORK/$m.onnx" > /dev/null 2>> "$WORK/rt.err"
    check "$m: exported; onnx.checker accepts it; its metadata has each output's weight" \
        $PY - "$WORK/$m.onnx" "$R/$m/model.json" <<'PY'
import json, sys
import onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
meta = json.loads({p.key: p.value for p in m.metadata_props}["dlserve.model"])
conf = json.load(open(sys.argv[2]))
want = [o.get("weight", 1) for o in conf.get("outputs", [{}])]
assert [o["weight"] for o in meta["outputs"]] == want, (meta, want)
PY
    "$DLSERVE" --import "$WORK/$m.onnx" --models "$R" --name $m-rt > /dev/null 2>> "$WORK/rt.err"
    check "$m: imported back" test -s "$R/$m-rt/1/model.safetensors"
done
# The original and the model imported back compare bit for bit: each pair
# of runs computes in one configuration (the same threads, engines and
# batches), where the same graph gives the same bits.
for m in fashion-mlp fashion-cnn fashion-resnet; do
    "$DLSERVE" --predict "$R/$m" --limit 32 "$IMG" > "$WORK/$m.a" 2> "$WORK/pred.err"
    "$DLSERVE" --predict "$R/$m-rt" --limit 32 "$IMG" > "$WORK/$m.b" 2> "$WORK/pred.err"
    check "$m: imported back, --predict gives the original's class, label and score" \
        cmp -s "$WORK/$m.a" "$WORK/$m.b"
    check "... on 32 images, with the labels restored" \
        test "$(grep -c '"label":"[A-Z]' "$WORK/$m.b")" -eq 32
done
# two-tower: two inputs (ids and features), two outputs with their losses
# and weights (rating's is 0.5); --eval's total loss depends on them.
"$DLSERVE" --eval "$R/two-tower" --data "$WORK/tt" > "$WORK/tt-a.json" 2> "$WORK/eval.err"
"$DLSERVE" --eval "$R/two-tower-rt" --data "$WORK/tt" > "$WORK/tt-b.json" 2> "$WORK/eval.err"
check "two-tower imported back: the total loss, each output's loss and metric are the original's" \
    $PY -c '
import json, sys
a, b = (json.loads(open(f).readline()) for f in sys.argv[1:3])
assert a["outputs"] == b["outputs"] and set(a["outputs"]) == {"click", "rating"}, (a, b)
assert a["loss"] == b["loss"] and a["samples"] == b["samples"] == 200, (a, b)' \
    "$WORK/tt-a.json" "$WORK/tt-b.json"
cut -d, -f3- "$WORK/tt/test.csv" | head -32 > "$WORK/tt.csv"    # no targets: the inputs
"$DLSERVE" --predict "$R/two-tower" "$WORK/tt.csv" > "$WORK/tt.a" 2> "$WORK/pred.err"
"$DLSERVE" --predict "$R/two-tower-rt" "$WORK/tt.csv" > "$WORK/tt.b" 2> "$WORK/pred.err"
check "two-tower imported back: --predict prints the original's values, every one" \
    cmp -s "$WORK/tt.a" "$WORK/tt.b"
check "... click and rating of 32 samples" \
    test "$(grep -c '^{"index":[0-9]*,"outputs":{"click":\[[-0-9.e]*\],"rating":\[[-0-9.e]*\]}}$' \
            "$WORK/tt.b")" -eq 32

# One daemon: the PyTorch models as model.onnx (no model.json: outputs as
# they are), the walk-through's mlp with its model.json, a model with an
# unsupported operator, and the round trips above.
for m in mlp cnn_bn resnet emb2 ops; do
    mkdir -p "$R/pt-$m/1" && cp "$X/$m.onnx" "$R/pt-$m/1/model.onnx"
done
mkdir -p "$R/mlp/1" && cp "$W/mlp.onnx" "$R/mlp/1/model.onnx" && cp "$W/model.json" "$R/mlp/"
mkdir -p "$R/odd/1" && cp "$X/unsupported.onnx" "$R/odd/1/model.onnx"
# same_answer below compares two models' answers bit for bit, each request
# in a batch of its own: batch_invariant (set, because that relies on
# it) and one daemon (one configuration) keep them the same bits.
start_daemon onnx --models "$R" --set batching.batch_invariant=true
check "the daemon starts" test -n "$PORT"
answers() {   # CODE REF: a 200 whose output y is REF's, value by value
    [ "$1" = 200 ] || { echo "# HTTP $1: $(head -c 300 "$WORK/body")"; return 1; }
    $PY "$CHECK" answer "$WORK/body" "$2"
}
for m in mlp cnn_bn resnet emb2 ops; do
    for b in 1 32; do
        c=$(code POST "/v2/models/pt-$m/infer" --data-binary @"$X/$m.b$b.req.json")
        check "$m over HTTP at batch $b answers PyTorch's outputs, value by value" \
            answers "$c" "$X/$m.b$b.json"
    done
done
# docs/onnx.md's request, as written (its body, from the walk-through).
c=$(code POST /v2/models/mlp/infer -d "$(cat "$W/request.json")")
check "the walk-through's request answers PyTorch's softmax, value by value" \
    answers "$c" "$W/request.ref.json"
# The class: the top of the answer's own probabilities, and PyTorch's top
# or tied with it within tests/py/tolerance.py's bound (another
# implementation sums in another order).
check "... with the class and label of its model.json" \
    env PYTHONPATH="$SRC/tests/py" $PY - "$WORK/body" "$W/request.ref.json" <<'PY'
import json, sys
from tolerance import near_top
outs = {o["name"]: o["data"] for o in json.load(open(sys.argv[1]))["outputs"]}
p = json.load(open(sys.argv[2]))["y"][0]
[k] = outs["class"]
probs = [o for o in json.load(open(sys.argv[1]))["outputs"] if o["name"] == "y"][0]["data"]
assert probs[k] == max(probs) and near_top(p, k), (outs, p)
assert outs["label"] == [["cat", "dog", "bird"][k]], outs
PY
# Round trips: the same request to the original and to the model imported
# back answers the same outputs, to the last bit of every float.
$PY - "$IMG" > "$WORK/img.json" <<'PY'
import gzip, json, sys
raw = gzip.open(sys.argv[1]).read()[16:16 + 32 * 784]
print(json.dumps({"inputs": [{"name": "input", "shape": [32, 1, 28, 28], "datatype": "FP32",
                              "data": list(raw)}]}))
PY
$PY - "$WORK/tt.csv" > "$WORK/tt.json" <<'PY'
import json, sys
rows = [[float(v) for v in line.split(",")] for line in open(sys.argv[1])]
print(json.dumps({"inputs": [
    {"name": "user", "shape": [len(rows), 1], "datatype": "INT64",
     "data": [int(r[0]) for r in rows]},
    {"name": "features", "shape": [len(rows), 16], "datatype": "FP32",
     "data": [v for r in rows for v in r[1:]]}]}))
PY
same_answer() {   # MODEL REQUEST: MODEL and MODEL-rt answer alike
    code POST "/v2/models/$1/infer" --data-binary @"$2" > "$WORK/c1" &&
        mv "$WORK/body" "$WORK/a.json" &&
        code POST "/v2/models/$1-rt/infer" --data-binary @"$2" > "$WORK/c2" &&
        test "$(cat "$WORK/c1" "$WORK/c2")" = 200200 &&
        $PY - "$WORK/a.json" "$WORK/body" <<'PY'
import json, sys
a, b = (json.load(open(f))["outputs"] for f in sys.argv[1:3])
assert a == b and all(len(o["data"]) >= 32 for o in a), (a, b)
print("# %s: %d values alike" % (", ".join(o["name"] for o in a), sum(len(o["data"]) for o in a)))
PY
}
for m in fashion-mlp fashion-cnn fashion-resnet; do
    check "$m imported back answers the original's probabilities, bit for bit (32 images)" \
        same_answer $m "$WORK/img.json"
done
check "two-tower imported back answers the original's click and rating, bit for bit" \
    same_answer two-tower "$WORK/tt.json"
c=$(code GET /v2/models/odd/ready)
check "a model with an unsupported operator is not served" test "$c" != 200
grep -q "CumSum, opset 13" "$LOG"
check "the log names the operator, node and opset" test $? -eq 0
c=$(code GET /v2/models/pt-mlp/ready)
check "the others keep serving" test "$c" = 200
stop_daemon
# nn.TransformerEncoder (2 layers, 2 heads, batch_first): its attention moves
# the batch off axis 0 and merges it with the heads; imported, each step is
# per sample. Three exports (opset 17 folded, mean pooling, relu; opset 13
# unfolded, first token, gelu; opset 15 with a causal attention mask),
# each layer's attention imported as one sdpa layer (causal for the
# third) and GELU as one gelu layer: --predict and the daemon answer
# PyTorch's
# outputs at batch 1 and 32 to 1e-4 relative; a softmax over the batch, and
# an output whose batch is not axis 0, are refused.
T=$WORK/tx
TR=$WORK/txrepo
mkdir -p "$T"
/usr/bin/python3 "$SRC/tests/py/onnx_models.py" transformer "$T" > "$WORK/tx-export.log" 2>&1
check "PyTorch exports the transformer classifiers" test -s "$T/tx_gelu.onnx"
for m in tx_relu tx_gelu tx_causal; do
    "$DLSERVE" --import "$T/$m.onnx" --models "$M" --name $m > /dev/null 2> "$WORK/imp.err"
    check "$m: --import writes version 1" test -s "$M/$m/1/model.safetensors"
    check "$m: each attention imports as one sdpa layer" /usr/bin/python3 -c '
import json, sys
s = [l for l in json.load(open(sys.argv[1]))["layers"] if l["type"] == "sdpa"]
assert len(s) == 2 and all(l["heads"] == 2 and l.get("causal", False) == (sys.argv[2] == "tx_causal")
                           and "scale" not in l for l in s), s' "$M/$m/model.json" $m
    [ $m = tx_gelu ] && check "tx_gelu: each GELU (Div, Erf, Add, Mul, Mul) imports as one gelu layer" \
        /usr/bin/python3 -c '
import json, sys
t = [l["type"] for l in json.load(open(sys.argv[1]))["layers"]]
assert t.count("gelu") == 2 and "erf" not in t, t' "$M/$m/model.json"
    for b in 1 32; do
        "$DLSERVE" --predict "$M/$m" "$T/$m.b$b.csv" > "$WORK/pred.txt" 2> "$WORK/pred.err"
        check "$m: --predict equals PyTorch at batch $b (1e-4 relative)" \
            $PY "$CHECK" predict "$WORK/pred.txt" "$T/$m.b$b.json"
    done
    mkdir -p "$TR/$m/1" && cp "$T/$m.onnx" "$TR/$m/1/model.onnx"
done
"$DLSERVE" --import "$T/batchmix.onnx" --models "$M" --name batchmix > /dev/null 2> "$WORK/err"
check "a softmax over the batch is refused, naming the node" \
    fails_with "$WORK/err" $? "node '/Softmax' (Softmax, opset 17): axis must be a non-batch"
"$DLSERVE" --import "$T/batchout.onnx" --models "$M" --name batchout > /dev/null 2> "$WORK/err"
check "an output that holds the batch on axis 1 is refused" \
    fails_with "$WORK/err" $? "graph output 'y' holds the batch on axis 1, not alone on axis 0"
start_daemon tx --models "$TR"
check "the daemon serves the transformers" test -n "$PORT"
for m in tx_relu tx_gelu tx_causal; do
    for b in 1 32; do
        /usr/bin/python3 -c '
import json, sys
x = json.load(open(sys.argv[1]))["x"]
flat = [v for s in x for row in s for v in row]
print(json.dumps({"inputs": [{"name": "x", "shape": [len(x), 8, 16], "datatype": "FP32",
                              "data": flat}]}))' "$T/$m.b$b.json" > "$WORK/req.json"
        c=$(code POST "/v2/models/$m/infer" -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req.json")
        check "$m over HTTP at batch $b: 200" test "$c" = 200
        check "$m over HTTP at batch $b answers PyTorch's (1e-4 relative)" \
            $PY "$CHECK" answer "$WORK/body" "$T/$m.b$b.json"
    done
done
stop_daemon
finish
