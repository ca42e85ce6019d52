#!/usr/bin/env bash
# ONNX import: PyTorch models exported with torch.onnx.export (an MLP, a CNN
# with batchnorm, a residual CNN, an embedding + concat model of two
# inputs, a model of the other operators: grouped and dilated convolution,
# Slice, Div, Pow, Sqrt, Erf, Clip, LeakyRelu, HardSigmoid, HardSwish,
# constant operands; tests/py/onnx_models.py) imported with --import and evaluated
# against PyTorch's outputs at batch 1 and 32; model.onnx served as it is
# over HTTP; an unsupported operator refused (operator, node, opset named)
# while another model keeps serving; truncated and corrupted files refused
# with a reason; fine-tuning equal to PyTorch's; --export then --import;
# --bench --infer-batch on an imported model.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
X=$WORK/onnx
M=$WORK/models
mkdir -p "$X" "$M"
/usr/bin/python3 "$SRC/tests/py/onnx_models.py" export "$X" > "$WORK/export.log" 2>&1
check "PyTorch exports the models" test -s "$X/emb2.onnx"

# --eval's loss of an "mse" output whose targets are PyTorch's outputs: the
# mean squared difference, printed to 4 decimals (0.0000 below 5e-5).
for m in mlp cnn_bn resnet emb2 ops; do
    "$DLSERVE" --import "$X/$m.onnx" --models "$M" --name $m > "$WORK/imp.json" 2> "$WORK/imp.err"
    check "$m: --import writes version 1" test -s "$M/$m/1/model.safetensors"
    for b in 1 32; do
        "$DLSERVE" --eval "$M/$m" --data "$X/$m.b$b" --batch-size $b > "$WORK/eval.json" 2>&1
        check "$m: outputs equal PyTorch's at batch $b" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["samples"] == int(sys.argv[2]) and r["loss"] < 5e-5, r' "$WORK/eval.json" $b
    done
done

# --bench --infer-batch measures an imported model as it is: no --data.
"$DLSERVE" --bench "$M/resnet" --infer-batch 1,4 --threads 1 > "$WORK/bench.json" 2> "$WORK/bench.err"
check "--bench --infer-batch runs an imported model without --data" /usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert [d["batch"] for d in r] == [1, 4] and all(d["infer_samples_per_sec"] > 0 for d in r), r
' "$WORK/bench.json"
# The weights keep PyTorch's names.
check "safetensors names are the state_dict's" /usr/bin/python3 -c '
import json, struct, sys
for m in ("mlp", "cnn_bn", "resnet", "emb2"):
    f = open(f"{sys.argv[1]}/{m}/1/model.safetensors", "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    names = set(json.loads(f.read(n))) - {"__metadata__"}
    want = set(open(f"{sys.argv[2]}/{m}.names").read().split())
    assert names == want, (m, names ^ want)' "$M" "$X"
# The check above fails when outputs differ: a shifted target is seen.
sed 's/^\([-0-9.e]*\),/\1 + 1,/' "$X/mlp.b32/test.csv" | /usr/bin/python3 -c '
import sys
for line in sys.stdin:
    a = line.strip().split(",")
    a[0] = str(float(a[0].split(" + ")[0]) + 0.5)
    print(",".join(a))' > "$WORK/shift.csv"
mkdir -p "$WORK/shift" && cp "$WORK/shift.csv" "$WORK/shift/test.csv" && cp "$WORK/shift.csv" "$WORK/shift/train.csv"
"$DLSERVE" --eval "$M/mlp" --data "$WORK/shift" > "$WORK/eval.json" 2>&1
check "a wrong target gives a loss" /usr/bin/python3 -c '
import json, sys
assert json.loads(open(sys.argv[1]).readline())["loss"] > 0.05' "$WORK/eval.json"

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
# the training settings; --train --version 1 starts from the imported
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
"$DLSERVE" --train "$F" --version 1 --data "$WORK/ft" --threads 1 --no-progress \
    > "$WORK/ft.json" 2> "$WORK/ft.err"
check "--train --version 1 fine-tunes into version 2" test -s "$F/2/model.safetensors"
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
"$DLSERVE" --eval "$M/ext" --data "$X/mlp.b32" > "$WORK/eval.json" 2>&1
check "external data is read from the model's folder" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["samples"] == 32 and r["loss"] < 5e-5, r' "$WORK/eval.json"
"$DLSERVE" --import "$E/a/escape.onnx" --models "$M" --name ext2 > /dev/null 2> "$WORK/err"
check "an external data path leaving the folder is refused" \
    fails_with "$WORK/err" $? "must be a relative path inside the model's folder"
"$DLSERVE" --import "$E/b/model.onnx" --models "$M" --name ext3 > /dev/null 2> "$WORK/err"
check "an external data link leaving the folder is refused" \
    fails_with "$WORK/err" $? "outside the model's folder"

# dlserve's own export comes back: the input scaling it writes into the
# graph (constant operands), the labels and loss of its "dlserve.model"
# metadata; the predictions are the original's.
RT=$WORK/rt
mkdir -p "$RT/fashion-mlp"
cp "$SRC/models/fashion-mlp/model.json" "$RT/fashion-mlp/"
"$DLSERVE" --train "$RT/fashion-mlp" --epochs 1 --limit 2000 --threads 1 --no-progress \
    > /dev/null 2>&1
"$DLSERVE" --export "$RT/fashion-mlp" --onnx "$WORK/fm.onnx" > /dev/null 2>&1
"$DLSERVE" --import "$WORK/fm.onnx" --models "$RT" --name fm > /dev/null 2> "$WORK/rt.err"
check "an exported model imports" test -s "$RT/fm/1/model.safetensors"
IMG=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz
"$DLSERVE" --predict "$RT/fashion-mlp" --limit 300 "$IMG" > "$WORK/rt-a.txt" 2>&1
"$DLSERVE" --predict "$RT/fm" --limit 300 "$IMG" > "$WORK/rt-b.txt" 2>&1
check "export then import predicts as the original (class, label, score)" \
    cmp -s "$WORK/rt-a.txt" "$WORK/rt-b.txt"
check "... on 300 images" test "$(grep -c '"label":"[A-Z]' "$WORK/rt-b.txt")" -eq 300

# The same for two-tower: two inputs (ids and features), two outputs with
# their losses from the metadata; each output's figures are the original's.
mkdir -p "$RT/two-tower" "$WORK/tt"
cp "$SRC/models/two-tower/model.json" "$RT/two-tower/"
/usr/bin/python3 "$SRC/tests/py/make_two_tower.py" "$WORK/tt" --train 500 --test 200 > /dev/null
"$DLSERVE" --train "$RT/two-tower" --data "$WORK/tt" --epochs 1 --threads 1 --no-progress \
    > /dev/null 2>&1
"$DLSERVE" --export "$RT/two-tower" --onnx "$WORK/tt.onnx" > /dev/null 2>&1
"$DLSERVE" --import "$WORK/tt.onnx" --models "$RT" --name tt > /dev/null 2>&1
"$DLSERVE" --eval "$RT/two-tower" --data "$WORK/tt" > "$WORK/tt-a.json" 2>&1
"$DLSERVE" --eval "$RT/tt" --data "$WORK/tt" > "$WORK/tt-b.json" 2>&1
check "two-tower exported and imported: each output's loss and metric are the original's" \
    /usr/bin/python3 -c '
import json, sys
a, b = (json.loads(open(f).readline())["outputs"] for f in sys.argv[1:3])
assert a == b and set(a) == {"click", "rating"}, (a, b)' "$WORK/tt-a.json" "$WORK/tt-b.json"

# model.onnx served as it is: no model.json, no safetensors.
R=$WORK/repo
for m in mlp cnn_bn resnet ops; do mkdir -p "$R/$m/1" && cp "$X/$m.onnx" "$R/$m/1/model.onnx"; done
mkdir -p "$R/odd/1" && cp "$X/unsupported.onnx" "$R/odd/1/model.onnx"
start_daemon onnx --models "$R"
check "the daemon starts" test -n "$PORT"
for m in mlp cnn_bn resnet ops; do
    for b in 1 32; do
        /usr/bin/python3 - "$X/$m.b$b.json" $m > "$WORK/req.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
import numpy as np
x = np.array(d["x"], dtype=np.float32)
name = "x" if sys.argv[2] == "mlp" else "image"
print(json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                              "data": x.reshape(-1).tolist()}]}))
PY
        c=$(code POST "/v2/models/$m/infer" -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req.json")
        check "$m over HTTP at batch $b answers equal PyTorch's (1e-4 relative)" \
            /usr/bin/python3 -c '
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
assert sys.argv[3] == "200", d
got = np.array(d["outputs"][0]["data"], dtype=np.float64)
want = np.array(json.load(open(sys.argv[2]))["y"], dtype=np.float64).reshape(-1)
assert got.shape == want.shape, (got.shape, want.shape)
assert np.all(np.abs(got - want) <= 1e-4 * np.abs(want) + 1e-6), np.max(np.abs(got - want))
' "$WORK/body" "$X/$m.b$b.json" "$c"
    done
done
c=$(code GET /v2/models/odd/ready)
check "a model with an unsupported operator is not served" test "$c" != 200
grep -q "CumSum, opset 13" "$LOG"
check "the log names the operator, node and opset" test $? -eq 0
c=$(code GET /v2/models/mlp/ready)
check "the others keep serving" test "$c" = 200
stop_daemon
finish
