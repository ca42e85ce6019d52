#!/usr/bin/env bash
# Graph models over Kafka, against a librdkafka mock cluster: fashion-resnet
# (one input, a graph) and two-tower (an INT64 user id and 16 FP32 features;
# click and rating) answer OIP JSON, OIP binary and flat "data" records in
# every [kafka] output_format, one daemon a format, each in its own group
# on the same records. A consumer written from the OIP documentation
# (read_outputs.py) finds the OIP forms answer as the dlserve form does,
# every output of two-tower included, and two-tower's values are what the
# model computes from its weights (tests/py/two_tower_ref.py). Records
# with an id out of range or an input missing go to the dead-letter topic
# as "input", naming the input. ONNX models exported by PyTorch
# (tests/py/onnx_models.py) are served from model.onnx: the embedding +
# concat model of two inputs in OIP JSON records and the CNN with
# batchnorm in OIP binary answer PyTorch's outputs, value by value (within
# 1e-4, relative); docs/onnx.md's walk-through model answers its record,
# sent as the walk-through sends it, with PyTorch's softmax.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

mkdir -p "$WORK/repo/two-tower" "$WORK/repo/fashion-resnet" "$WORK/onnx" "$WORK/walk"
cp "$SRC/models/two-tower/model.json" "$WORK/repo/two-tower/"
cp "$SRC/models/fashion-resnet/model.json" "$WORK/repo/fashion-resnet/"
$PY "$SRC/tests/py/make_two_tower.py" "$WORK/data" --train 2000 --test 200
"$DLSERVE" --train "$WORK/repo/two-tower" --data "$WORK/data" --epochs 2 --threads 1 \
    --no-progress > /dev/null 2>&1
"$DLSERVE" --train "$WORK/repo/fashion-resnet" --limit 200 --epochs 1 --batch-size 32 \
    --threads 1 --no-progress > /dev/null 2>&1
check "both models train briefly" test -f "$WORK/repo/two-tower/1/model.safetensors" -a \
    -f "$WORK/repo/fashion-resnet/1/model.safetensors"
# ONNX models as they are: emb2 and cnn_bn without a model.json (outputs
# served as they are), the walk-through's mlp with its model.json
X=$WORK/onnx
W=$WORK/walk
$PY "$SRC/tests/py/onnx_models.py" export "$X" emb2 cnn_bn > "$WORK/onnx.log" 2>&1 &&
    $PY "$SRC/tests/py/onnx_models.py" walkthrough "$SRC/docs/onnx.md" "$W" \
        >> "$WORK/onnx.log" 2>&1 ||
    sed 's/^/# /' "$WORK/onnx.log"
for m in emb2 cnn_bn; do
    mkdir -p "$WORK/repo/$m/1" && cp "$X/$m.onnx" "$WORK/repo/$m/1/model.onnx"
done
mkdir -p "$WORK/repo/mlp/1" && cp "$W/mlp.onnx" "$WORK/repo/mlp/1/model.onnx" &&
    cp "$W/model.json" "$WORK/repo/mlp/"
check "PyTorch exports the ONNX models" test -s "$WORK/repo/emb2/1/model.onnx" -a \
    -s "$WORK/repo/cnn_bn/1/model.onnx" -a -s "$WORK/repo/mlp/model.json"

check "mock cluster up" start_mock in:2 dlserve-in:2 out:2 out-json:2 out-bin:2 dlq:2 dlq-json:2 \
    dlq-bin:2
trap 'kill -9 ${PIDS[*]:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# The three daemons answer the same records in batches of their own, and
# read_outputs.py compares their answers bit for bit: batch_invariant (the
# default; set because the comparison relies on it) makes an answer the
# same bits in any batch, and one configuration for the three (one
# inference thread each, the same engines) the same bits in each daemon.
KARGS=(--set kafka.input_topics=in,dlserve-in --set models.watch=false --set batching.eager=true
       --set batching.batch_invariant=true --set models.threads=1)
PIDS=()
for f in dlserve:out:dlq oip-json:out-json:dlq-json oip-binary:out-bin:dlq-bin; do
    IFS=: read -r fmt out dlq <<< "$f"
    check "a daemon writing $fmt joins" start_kafka_daemon "g-$fmt" "${KARGS[@]}" \
        --set kafka.group_id="g-$fmt" --set kafka.output_topic="$out" \
        --set kafka.dead_letter_topic="$dlq" --set kafka.output_format="$fmt"
    PIDS+=("$PID")
done

# fashion-resnet: three images as OIP JSON (UINT8), keys img-0..2
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count 3 --model fashion-resnet > /dev/null
# two-tower: OIP JSON (inputs in either order, INT64 or INT32 ids, two
# samples in one), a flat "data" record (the user id, then the features),
# two OIP binary payloads; and three bad records
FEATS=$($PY -c 'import sys, json; print(json.dumps([[float(v) for v in l.split(",")[3:]] for l in open(sys.argv[1])][:2]))' "$WORK/data/test.csv")
$PY - "$FEATS" "$WORK" <<'PY' | kcat -b "$BOOT" -P -t in -K'|'
import json, struct, sys
feats, work = json.loads(sys.argv[1]), sys.argv[2]
user = lambda ids, t="INT64": {"name": "user", "datatype": t, "shape": [len(ids), 1], "data": ids}
feat = lambda rows: {"name": "features", "datatype": "FP32", "shape": [len(rows), 16], "data": rows}
rec = lambda key, **kw: print("%s|%s" % (key, json.dumps(dict(id=key, model="two-tower", **kw))))
rec("tt-json-0", inputs=[user([5]), feat(feats[:1])])
rec("tt-json-1", inputs=[feat(feats[1:2]), user([99], "INT32")])
rec("tt-json-2", inputs=[user([5, 99]), feat(feats)])
rec("tt-data-0", data=[5] + feats[0])
rec("tt-bad-id", inputs=[user([100]), feat(feats[:1])])
rec("tt-bad-missing", inputs=[user([5])])
rec("tt-bad-data", data=[-1] + feats[0])
for i, (uid, row) in enumerate([(5, feats[0]), (99, feats[1])]):
    u = {"name": "user", "datatype": "INT64", "shape": [1, 1], "parameters": {"binary_data_size": 8}}
    f = {"name": "features", "datatype": "FP32", "shape": [1, 16],
         "parameters": {"binary_data_size": 64}}
    head = json.dumps({"id": "tt-bin-%d" % i, "model": "two-tower", "inputs": [u, f]}).encode()
    open("%s/tt-bin-%d" % (work, i), "wb").write(head + struct.pack("<q16f", uid, *row))
    open("%s/tt-bin-%d.len" % (work, i), "w").write(str(len(head)))
PY
for i in 0 1; do
    kcat -b "$BOOT" -P -t in -k "tt-bin-$i" -H "Inference-Header-Content-Length=$(cat "$WORK/tt-bin-$i.len")" \
        "$WORK/tt-bin-$i"
done
# emb2: OIP JSON records of one sample and of three (ids INT64, x FP32);
# cnn_bn: an OIP binary record of one image
$PY - "$X" "$WORK" <<'PY' | kcat -b "$BOOT" -P -t in -K'|'
import json, struct, sys
x, work = sys.argv[1:3]
one = json.load(open(f"{x}/emb2.b1.req.json"))["inputs"]
many = json.load(open(f"{x}/emb2.b32.req.json"))["inputs"]
for i in many:      # the first three samples
    i["data"] = i["data"][:3 * i["shape"][1]]
    i["shape"][0] = 3
for key, ins in (("onnx-emb2-1", one), ("onnx-emb2-3", many)):
    print("%s|%s" % (key, json.dumps({"id": key, "model": "emb2", "inputs": ins})))
img = json.load(open(f"{x}/cnn_bn.b1.req.json"))["inputs"][0]
raw = struct.pack("<%df" % len(img["data"]), *img["data"])
head = {"name": img["name"], "datatype": "FP32", "shape": img["shape"],
        "parameters": {"binary_data_size": len(raw)}}
head = json.dumps({"id": "onnx-cnn-1", "model": "cnn_bn", "inputs": [head]}).encode()
open(f"{work}/onnx-cnn-1", "wb").write(head + raw)
open(f"{work}/onnx-cnn-1.len", "w").write(str(len(head)))
PY
kcat -b "$BOOT" -P -t in -k onnx-cnn-1 \
    -H "Inference-Header-Content-Length=$(cat "$WORK/onnx-cnn-1.len")" "$WORK/onnx-cnn-1"
# docs/onnx.md's record, sent as the walk-through sends it
kcat -b "$BOOT" -P -t dlserve-in -K'|' < "$W/record.txt"
check "13 dlserve outputs" collect out 13 "$WORK/out" --timeout 60
check "13 oip-json outputs" collect out-json 13 "$WORK/out-json" --timeout 60
check "13 oip-binary outputs" collect out-bin 13 "$WORK/out-bin" --timeout 60
check "3 dead letters" collect dlq 3 "$WORK/dlq" --timeout 60

check "the OIP forms answer as the dlserve form, every output of two-tower" \
    $PY "$SRC/tests/kafka/read_outputs.py" "$WORK/out" "$WORK/out-json" "$WORK/out-bin" 13
$PY "$SRC/tests/py/two_tower_ref.py" "$WORK/repo/two-tower/1/model.safetensors" '[5, 99]' "$FEATS" \
    > "$WORK/ref.json"
check "two-tower's click and rating are the model's, in every record form" \
    $PY - "$WORK/out" "$WORK/ref.json" <<'PY'
import json, sys
ref = json.load(open(sys.argv[2]))
close = lambda a, b: abs(a - b) <= 1e-5 + 1e-4 * abs(b)
got = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, _h, value = line.rstrip("\n").split("\t", 5)
    got[key] = json.loads(value)
want = {"tt-json-0": [0], "tt-json-1": [1], "tt-json-2": [0, 1], "tt-data-0": [0],
        "tt-bin-0": [0], "tt-bin-1": [1]}
for key, samples in want.items():
    r = got[key]
    assert r["output"] == "click" and list(r["outputs"]) == ["rating"], r
    rows = lambda v: v if isinstance(v[0], list) else [v]
    for s, (c, y) in zip(samples, zip(rows(r["values"]), rows(r["outputs"]["rating"]))):
        assert close(c[0], ref["click"][s]) and close(y[0], ref["rating"][s]), (key, r, ref)
for i in range(3):   # fashion-resnet: a classifier's fields, as before
    r = got["img-%d" % i]
    assert r["model"] == "fashion-resnet" and len(r["scores"]) == 10 and "label" in r, r
PY
check "the ONNX models answer PyTorch's outputs, value by value" \
    env PYTHONPATH="$SRC/tests/py" $PY - "$WORK/out" "$X" "$W/record.ref.json" <<'PY'
import json, sys
from onnx_check import close
got = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, _h, value = line.rstrip("\n").split("\t", 5)
    got[key] = json.loads(value)
rows = lambda v: v if isinstance(v[0], list) else [v]
for key, ref, n in (("onnx-emb2-1", "emb2.b1", 1), ("onnx-emb2-3", "emb2.b32", 3),
                    ("onnx-cnn-1", "cnn_bn.b1", 1)):
    r = got[key]
    assert r["model"] == ref.split(".")[0] and r["output"] == "y" and "outputs" not in r, r
    close(key, rows(r["values"]), json.load(open(f"{sys.argv[2]}/{ref}.json"))["y"][:n])
r, want = got["r1"], json.load(open(sys.argv[3]))["y"][0]
assert r["model"] == "mlp" and r["source"]["topic"] == "dlserve-in", r
close("r1 (docs/onnx.md's record)", r["scores"], want)
# the class: the top of its own scores, and PyTorch's top or tied with it
# within the tolerance (dlserve and PyTorch sum in other orders)
from tolerance import near_top
k = r["class"]
assert r["scores"][k] == max(r["scores"]) and near_top(want, k), (r, want)
assert r["label"] == ["cat", "dog", "bird"][k], (r, want)
PY
check "bad records are dead letters of kind input, naming the input" \
    $PY - "$WORK/dlq" <<'PY'
import sys
why = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, hdrs, _v = line.rstrip("\n").split("\t", 5)
    h = dict(kv.split("=", 1) for kv in hdrs.split(";") if kv)
    assert h["dlserve-error-kind"] == "input", h
    why[key] = h["dlserve-error"]
assert "input 'user'" in why["tt-bad-id"] and "[0, 100)" in why["tt-bad-id"], why
assert "input 'features' of model 'two-tower' is missing" in why["tt-bad-missing"], why
assert "input 'user'" in why["tt-bad-data"], why
PY
for p in "${PIDS[@]}"; do
    PID=$p
    check "a daemon stops cleanly" stop_daemon
done
PIDS=()
finish
