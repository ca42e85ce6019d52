#!/usr/bin/env bash
# dlserve --export: the shipped models (briefly trained) and a model of the
# layer types they lack are written as ONNX, which onnx.checker accepts
# (opset 17, IR 8, a "batch" dimension on every input and output), whose
# initializers are the safetensors tensors, and which, evaluated by
# tests/py/onnx_eval.py (ONNX's operators written on torch), gives what
# dlserve gives (--predict's scores, or --eval's losses for several inputs
# or outputs) at batch 1 and 32 within 1e-4. Every pass case of
# tests/unit/fixtures/graph (PyTorch's outputs) is exported and evaluated
# as well, every layer type among them, with a constant as a model output
# (given for each sample of the batch); the new operators' options are
# checked in the graph, and onnx_eval's Slice and Clip against the spec's
# rules. A sequence fixture is evaluated a sample at a time at its own
# length (an exported sequence model takes samples of one length). ~45 s.
. "$(dirname "$0")/../lib/lib.sh"
PY=$SRC/tests/py
IMAGES=$DATA/t10k-images-idx3-ubyte.gz

# export NAME: MODEL_DIR=$WORK/models/NAME to $WORK/NAME.onnx
export_model() {
    "$DLSERVE" --export "$WORK/models/$1" --onnx "$WORK/$1.onnx" > "$WORK/$1.export.json" \
        2> "$WORK/$1.export.err"
    check "$1: --export exits 0" test $? -eq 0
    check "$1: --export says what it wrote" /usr/bin/python3 -c '
import json, os, sys
j = json.loads(open(sys.argv[1]).readline())
assert j["version"] == 1 and j["bytes"] == os.path.getsize(sys.argv[2]) and j["nodes"] > 0, j' \
        "$WORK/$1.export.json" "$WORK/$1.onnx"
}

# structure NAME: checker, opset, batch dimension, initializers, metadata.
structure() {
    check "$1: onnx.checker accepts it; opset 17, IR 8; batch dims; initializers = safetensors" \
        /usr/bin/python3 - "$WORK/$1.onnx" "$WORK/models/$1" <<'PY'
import json, struct, sys
import numpy as np, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
assert m.ir_version == 8 and [(o.domain, o.version) for o in m.opset_import] == [("", 17)]
for vi in list(m.graph.input) + list(m.graph.output):
    d0 = vi.type.tensor_type.shape.dim[0]
    assert d0.dim_param == "batch" and not d0.HasField("dim_value"), vi
    assert all(d.dim_value > 0 for d in vi.type.tensor_type.shape.dim[1:]), vi
raw = open(sys.argv[2] + "/1/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
assert set(inits) == set(head), (sorted(inits), sorted(head))
for name, h in head.items():
    b, e = h["data_offsets"]
    want = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(h["shape"])
    assert inits[name].dtype == np.float32 and np.array_equal(inits[name], want), name
conf = json.load(open(sys.argv[2] + "/model.json"))
meta = json.loads({p.key: p.value for p in m.metadata_props}["dlserve.model"])
outs = conf.get("outputs") or [dict(conf["output"], loss=conf["loss"])]
assert meta["name"] == conf["name"], meta
assert [(o["name"], o["loss"], o["weight"], o.get("labels", [])) for o in meta["outputs"]] == \
    [(o.get("name"), o["loss"], o.get("weight", 1), o.get("labels", [])) for o in outs], meta
PY
}

# classifier NAME: ONNX softmax against --predict's class and score, on
# the first test image alone and on the first 32.
classifier() {
    local b
    for b in 1 32; do
        "$DLSERVE" --predict "$WORK/models/$1" --limit $b "$IMAGES" > "$WORK/$1.pred$b" \
            2> "$WORK/$1.pred.err"
        check "$1: the exported graph gives --predict's classes and scores at batch $b" \
            /usr/bin/python3 - "$WORK/$1.onnx" "$IMAGES" "$WORK/$1.pred$b" $b <<'PY'
import gzip, json, sys
import numpy as np, onnx
import onnx_eval
b = int(sys.argv[4])
raw = gzip.open(sys.argv[2]).read()[16:16 + b * 784]
x = np.frombuffer(raw, dtype=np.uint8).astype(np.float32).reshape(b, 1, 28, 28)
logits = onnx_eval.run(onnx.load(sys.argv[1]), {"input": x})["probabilities"]
assert logits.shape == (b, 10), logits.shape
p = np.exp(logits - logits.max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
rows = [json.loads(line) for line in open(sys.argv[3])]
assert len(rows) == b
from tolerance import near_top
for i, r in enumerate(rows):
    # dlserve's class: the graph's top class, or tied with it within the
    # tolerance (onnx_eval, on torch, sums in another order)
    assert near_top([float(v) for v in p[i]], r["class"]), (i, p[i], r)
    assert abs(float(p[i].max()) - r["score"]) <= 1e-4, (i, p[i].max(), r)  # score: 4 decimals
PY
    done
}
export PYTHONPATH=$PY

# ---- the shipped models, trained briefly ----
for m in fashion-mlp fashion-cnn fashion-resnet two-tower; do model_copy $m > /dev/null; done
"$DLSERVE" --train "$WORK/models/fashion-mlp" --limit 500 --epochs 1 --threads 1 --no-progress \
    > /dev/null 2> "$WORK/train.err"
"$DLSERVE" --train "$WORK/models/fashion-cnn" --limit 300 --epochs 1 --threads 1 --no-progress \
    > /dev/null 2>> "$WORK/train.err"
"$DLSERVE" --train "$WORK/models/fashion-resnet" --limit 300 --epochs 1 --batch-size 32 \
    --threads 1 --no-progress > /dev/null 2>> "$WORK/train.err"
/usr/bin/python3 "$PY/make_two_tower.py" "$WORK/tt" --train 1000 --test 200
"$DLSERVE" --train "$WORK/models/two-tower" --data "$WORK/tt" --epochs 2 --threads 1 \
    --no-progress > /dev/null 2>> "$WORK/train.err"
check "the four models train a version each" \
    test "$(ls "$WORK"/models/*/1/model.safetensors | wc -l)" -eq 4

for m in fashion-mlp fashion-cnn fashion-resnet two-tower; do
    export_model $m
    structure $m
done
for m in fashion-mlp fashion-cnn fashion-resnet; do classifier $m; done

# ---- what the shipped models lack: INT32 ids (a Cast), scaling on a graph
# input, conv2d with stride and padding, tanh, average pooling with
# padding (the window's full size divides), dropout as an output ----
X=$WORK/models/extra
mkdir -p "$X"
cat > "$X/model.json" <<'JSON'
{"name": "extra",
 "inputs": [{"name": "img", "shape": [2, 6, 6], "datatype": "FP32",
             "scaling": {"scale": 0.5, "mean": 1.0, "std": 2.0}},
            {"name": "ids", "shape": [3], "datatype": "INT32"}],
 "layers": [
   {"name": "conv", "type": "conv2d", "inputs": ["img"], "filters": 3, "kernel_size": 3,
    "stride": 2, "padding": 1},
   {"name": "act", "type": "tanh"},
   {"name": "pool", "type": "avgpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
   {"name": "flat", "type": "flatten"},
   {"name": "emb", "type": "embedding", "inputs": ["ids"], "num_embeddings": 5, "dim": 2},
   {"name": "emb_flat", "type": "flatten"},
   {"name": "joined", "type": "concat", "inputs": ["flat", "emb_flat"], "axis": 0},
   {"name": "fc", "type": "dense", "units": 2},
   {"name": "sig", "type": "sigmoid"},
   {"name": "drop", "type": "dropout", "rate": 0.5}],
 "outputs": [{"name": "y", "from": "drop", "loss": "mse"}],
 "training": {"epochs": 1, "batch_size": 16, "optimizer": "adam", "lr": 0.01}}
JSON
/usr/bin/python3 - "$WORK/xdata" <<'PY'
import os, random, sys
random.seed(5)
os.makedirs(sys.argv[1])
for split in ("train", "test"):
    with open(f"{sys.argv[1]}/{split}.csv", "w") as f:
        for _ in range(64):
            img = [random.uniform(0, 4) for _ in range(72)]
            ids = [random.randrange(5) for _ in range(3)]
            y = [sum(img) / 288, ids[0] / 5]
            f.write(",".join(f"{v:.4f}" for v in y + img) + "," + ",".join(map(str, ids)) + "\n")
PY
"$DLSERVE" --train "$X" --data "$WORK/xdata" --threads 1 --no-progress > /dev/null \
    2>> "$WORK/train.err"
check "extra: --train exits 0" test -s "$X/1/model.safetensors"
export_model extra
structure extra
check "extra: ids are cast to INT64, dropout is an Identity, average pooling counts padding" \
    /usr/bin/python3 - "$WORK/extra.onnx" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
ops = [n.op_type for n in m.graph.node]
assert "Cast" in ops and "Dropout" not in ops and ops[-1] == "Identity", ops
pool = next(n for n in m.graph.node if n.op_type == "AveragePool")
a = {x.name: onnx.helper.get_attribute_value(x) for x in pool.attribute}
assert a["count_include_pad"] == 1 and a["pads"] == [1, 1, 1, 1], a
assert m.graph.input[1].type.tensor_type.elem_type == onnx.TensorProto.INT32
PY

# ---- several inputs or outputs (which --predict does not take): the
# losses that --eval prints on the first test row and on the first 32,
# against the same losses of the exported graph's outputs ----
evaluated() {  # NAME DATA_DIR BATCH
    "$DLSERVE" --eval "$WORK/models/$1" --data "$2" --limit $3 > "$WORK/$1.eval$3" \
        2> "$WORK/$1.eval.err"
    check "$1: the exported graph gives --eval's losses at batch $3" \
        /usr/bin/python3 - "$WORK/$1.onnx" "$2/test.csv" "$WORK/$1.eval$3" $3 \
        "$WORK/models/$1/model.json" <<'PY'
import json, sys
import numpy as np, onnx
import onnx_eval
m = onnx.load(sys.argv[1])
b = int(sys.argv[4])
rows = np.loadtxt(sys.argv[2], delimiter=",", ndmin=2)[:b]
meta = json.loads({p.key: p.value for p in m.metadata_props}["dlserve.model"])
shape = lambda vi: [d.dim_value for d in vi.type.tensor_type.shape.dim[1:]]
size = lambda vi: int(np.prod(shape(vi)))
cols = sum(size(o) for o in m.graph.output)    # mse and bce: one column a value
feeds, at = {}, cols
for vi in m.graph.input:
    v = rows[:, at:at + size(vi)].reshape([b] + shape(vi))
    at += size(vi)
    feeds[vi.name] = v.astype(np.float32 if vi.type.tensor_type.elem_type == 1 else np.int64)
assert at == rows.shape[1], (at, rows.shape)
outs = onnx_eval.run(m, feeds)
line = json.loads(open(sys.argv[3]).readline())
weight = {o["name"]: o.get("weight", 1.0) for o in json.load(open(sys.argv[5]))["outputs"]}
got = line.get("outputs") or {meta["outputs"][0]["name"]: line}
at, total = 0, 0.0
for o, vi in zip(meta["outputs"], m.graph.output):
    z = outs[o["name"]].reshape(b, -1).astype(np.float64)
    y = rows[:, at:at + z.shape[1]]
    at += z.shape[1]
    if o["loss"] == "bce_with_logits":
        loss = np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))))
        figure = ("accuracy", np.mean((z > 0) == (y > 0.5)))
        # a logit within the tolerance of 0 may fall on either side in
        # dlserve: each such sample may move the accuracy by 1/b
        figure += (np.sum(np.abs(z) <= 1e-5 + 1e-4 * np.abs(z)) / b,)
    else:
        loss = np.mean((z - y) ** 2)
        figure = ("rmse", np.sqrt(np.mean(np.mean((z - y) ** 2, axis=1)))) \
            if "rmse" in got[o["name"]] else ("loss", loss)
    total += weight[o["name"]] * loss
    # --eval prints 4 decimals: 5e-5 of rounding
    assert abs(loss - got[o["name"]]["loss"]) <= 1e-4, (o["name"], loss, got)
    assert abs(figure[1] - got[o["name"]][figure[0]]) <= 1e-4 + (figure[2:] or (0,))[0], \
        (o["name"], figure, got)
assert abs(total - line["loss"]) <= 1e-4, (total, line)
PY
}
for b in 1 32; do
    evaluated two-tower "$WORK/tt" $b
    evaluated extra "$WORK/xdata" $b
done

# ---- every layer type: the graph fixtures against PyTorch's outputs ----
F=$SRC/tests/unit/fixtures/graph
n=0 bad=0
for c in "$F"/*/; do
    name=$(basename "$c")
    case $name in train_* | mha_cross) continue ;; esac   # cross-attention: test_onnx_seq.sh
    mkdir -p "$WORK/fx/$name/1"
    cp "$c/model.json" "$WORK/fx/$name/"
    cp "$c/init.safetensors" "$WORK/fx/$name/1/model.safetensors"
    if "$DLSERVE" --export "$WORK/fx/$name" --onnx "$WORK/fx/$name.onnx" > /dev/null \
        2>> "$WORK/fx.err"; then n=$((n + 1)); else bad=$((bad + 1)); fi
done
# ids given as FP32 (model.json without a datatype): cast for Gather
V=$WORK/fx/embedding_float_ids
mkdir -p "$V/1"
cp "$F/embedding_ids/init.safetensors" "$V/1/model.safetensors"
/usr/bin/python3 - "$F/embedding_ids/model.json" "$V/model.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for i in m["inputs"]:
    i.pop("datatype", None)
json.dump(m, open(sys.argv[2], "w"))
PY
if "$DLSERVE" --export "$V" --onnx "$V.onnx" > /dev/null 2>> "$WORK/fx.err"; then
    n=$((n + 1)); else bad=$((bad + 1)); fi
# a constant as a model output: the same value for every sample of a batch
K=$WORK/constant_output
mkdir -p "$K/1"
cp "$F/constant_affine/init.safetensors" "$K/1/model.safetensors"
/usr/bin/python3 - "$F/constant_affine/model.json" "$K/model.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["outputs"].append({"name": "bias", "from": "b", "loss": "mse"})
json.dump(m, open(sys.argv[2], "w"))
PY
if "$DLSERVE" --export "$K" --onnx "$K.onnx" > /dev/null 2>> "$WORK/fx.err"; then
    n=$((n + 1)); else bad=$((bad + 1)); fi
cat "$WORK/fx.err"
check "every graph fixture exports ($n, $bad refused)" test $n -ge 40 -a $bad -eq 0
check "each exported fixture gives PyTorch's outputs (within 1e-4 of 1 + |y|)" \
    /usr/bin/python3 - "$F" "$WORK/fx" <<'PY'
import json, os, struct, sys
import numpy as np, onnx
import onnx_eval

def st_load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    dt = {"F32": np.float32, "I64": np.int64}
    return {k: np.frombuffer(raw[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]],
                             dtype=dt[h["dtype"]]).reshape(h["shape"]).copy()
            for k, h in head.items()}, meta

def m_in_type(path):
    return onnx.load(path).graph.input[0].type.tensor_type.elem_type

fx, work = sys.argv[1], sys.argv[2]
types, done = set(), 0
for name in sorted(os.listdir(work)):
    if not name.endswith(".onnx"):
        continue
    case = name[:-5]
    conf = json.load(open(f"{work}/{case}/model.json"))
    if case == "embedding_float_ids":
        assert m_in_type(f"{work}/{name}") == onnx.TensorProto.FLOAT
        case = "embedding_ids"      # the same weights, inputs and outputs
    want, meta = st_load(f"{fx}/{case}/expected.safetensors")
    ins, _ = st_load(f"{fx}/{case}/inputs.safetensors")
    kinds = {l["type"] for l in conf["layers"]}
    # a training pass: batchnorm on the batch's statistics, dropout masks
    if meta.get("mode") == "train" and kinds & {"batchnorm", "dropout"}:
        continue
    m = onnx.load(f"{work}/{name}")
    onnx.checker.check_model(m, full_check=True)
    # a batch of sequences of one length: each sample alone, at its own
    # length (the time axis symbolic), against its valid positions
    seqs = {i["name"] for i in conf["inputs"] if i.get("max_length")}
    for s in range(len(ins[conf["inputs"][0]["name"]]) if seqs else 1):
        feeds = {i.name: ins[i.name] for i in m.graph.input}
        if seqs:
            feeds = {k: v[s:s + 1, :int(ins["len." + k][s])] if k in seqs else v[s:s + 1]
                     for k, v in feeds.items()}
        outs = onnx_eval.run(m, feeds)
        for k, v in outs.items():
            e = want["output." + k][s:s + 1] if seqs else want["output." + k]
            if seqs and v.ndim > 1 and v.shape[1] < e.shape[1]:   # a per-token output
                e = e[:, :v.shape[1]]
            assert v.shape == e.shape, (case, k, v.shape, e.shape)
            err = float(np.max(np.abs(v - e) / (1 + np.abs(e))))
            assert err <= 1e-4, (case, k, err)
    types |= kinds
    done += 1
print(f"{done} fixtures agree; layer types: {' '.join(sorted(types))}")
assert done >= 60, done
new = {"div", "pow", "sqrt", "erf", "leaky_relu", "clip", "hardsigmoid", "hardswish", "slice",
       "constant", "lstm", "gru", "attention", "pos_embedding", "seq_pool"}
assert new <= types, sorted(new - types)
PY
check "constant_output: the constant is given for every sample; the other output as before" \
    /usr/bin/python3 - "$K.onnx" "$F/constant_affine" <<'PY'
import struct, json, sys
import numpy as np, onnx
import onnx_eval
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
assert inits["b.value"].shape == (4,) and inits["w.value"].shape == (3, 4), inits
def st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return {k: np.frombuffer(raw[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]],
                             dtype=np.float32).reshape(h["shape"]) for k, h in head.items()}
x = st(sys.argv[2] + "/inputs.safetensors")["x"]
outs = onnx_eval.run(m, {"x": x})
assert outs["bias"].shape == (x.shape[0], 4), outs["bias"].shape
assert np.array_equal(outs["bias"], np.broadcast_to(inits["b.value"], (x.shape[0], 4)))
want = st(sys.argv[2] + "/expected.safetensors")["output.y"]
assert np.max(np.abs(outs["y"] - want) / (1 + np.abs(want))) <= 1e-4
PY
check "new layer options are written: Conv group and dilations, Clip without a min, Slice" \
    /usr/bin/python3 - "$WORK/fx" <<'PY'
import sys, onnx
from onnx import helper, numpy_helper
def node(case, op):
    m = onnx.load(f"{sys.argv[1]}/{case}.onnx")
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist()
              for n in m.graph.node if n.op_type == "Constant"}
    n = next(n for n in m.graph.node if n.op_type == op)
    return n, {a.name: helper.get_attribute_value(a) for a in n.attribute}, consts
n, a, _ = node("conv2d_dilated_groups", "Conv")
assert a["group"] > 1 and a["dilations"] != [1, 1], a
n, a, _ = node("conv1d_groups_dilation", "Conv")
assert a["group"] > 1 and len(a["dilations"]) == 1 and a["dilations"] != [1], a
n, a, c = node("clip_max", "Clip")
assert len(n.input) == 3 and n.input[1] == "" and abs(c[n.input[2]] + 0.2) < 1e-7, (n, c)
n, a, c = node("slice_neg_step2", "Slice")
assert [c[i] for i in n.input[1:]] == [[-8], [9], [2], [2]], (n, c)
PY
check "onnx_eval follows ONNX's Slice clamping and Clip's optional bounds" \
    /usr/bin/python3 - <<'PY'
import itertools
import numpy as np, onnx, torch
from onnx import helper
import onnx_eval
x = np.arange(7 * 3, dtype=np.float32).reshape(7, 3)
for b, e, s in itertools.product([-100, -8, -1, 0, 3, 6, 9, 2**63 - 1], [-100, -2, 0, 4, 7, 100],
                                 [-3, -1, 1, 2]):
    want = x[b:e:s]
    if want.shape[0] == 0:
        continue
    ins = [torch.tensor(v, dtype=torch.int64) for v in ([b], [e], [0], [s])]
    got = onnx_eval.op_slice(helper.make_node("Slice", [], []), {}, [torch.tensor(x)] + ins)
    assert np.array_equal(got.numpy(), want), (b, e, s, got, want)
v = torch.tensor([-2.0, 0.5, 3.0])
clip = lambda *b: onnx_eval.op_clip(helper.make_node("Clip", [], []), {}, [v, *b]).tolist()
lo, hi = torch.tensor(0.0), torch.tensor(1.0)
assert clip() == [-2.0, 0.5, 3.0] and clip(lo) == [0.0, 0.5, 3.0]
assert clip(None, hi) == [-2.0, 0.5, 1.0] and clip(lo, hi) == [0.0, 0.5, 1.0]
assert clip(hi, lo) == [0.0, 0.0, 0.0]     # min > max: every value is max
PY

# ---- errors: one line on stderr naming the problem ----
"$DLSERVE" --export "$WORK/models/fashion-mlp" --model-version 9 --onnx "$WORK/v9.onnx" \
    > /dev/null 2> "$WORK/err"
check "a missing version is refused, naming it" fails_with "$WORK/err" $? "no version 9"
check "and no file is written" test ! -e "$WORK/v9.onnx"
mkdir -p "$WORK/models/untrained"
cp "$SRC/models/fashion-mlp/model.json" "$WORK/models/untrained/"
"$DLSERVE" --export "$WORK/models/untrained" --onnx "$WORK/u.onnx" > /dev/null 2> "$WORK/err"
check "a model without a version is refused" fails_with "$WORK/err" $? "no trained version"
"$DLSERVE" --export "$WORK/models/fashion-mlp" > /dev/null 2> "$WORK/err"
check "--export without --onnx is refused" fails_with "$WORK/err" $? "needs --onnx"
"$DLSERVE" --eval "$WORK/models/fashion-mlp" --onnx "$WORK/e.onnx" > /dev/null 2> "$WORK/err"
check "--onnx without --export is refused" fails_with "$WORK/err" $? "goes with --export"
"$DLSERVE" --export "$WORK/models/fashion-mlp" --onnx "$WORK/no/such/dir/m.onnx" \
    > /dev/null 2> "$WORK/err"
check "an unwritable path is refused" fails_with "$WORK/err" $? "no/such/dir"
finish
