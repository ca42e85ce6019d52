#!/usr/bin/env bash
# A graph model of two named inputs and two outputs (models/two-tower: an
# INT64 user id through an embedding, 16 FP32 features; click and rating)
# served over HTTP: metadata and config list every input and output; JSON
# and binary requests answer what the model computes from its weights
# (tests/py/two_tower_ref.py, numpy); ids may come as INT64, INT32 or
# UINT8, inputs in any order; "outputs" selects among them; and every bad
# input (missing, unknown, repeated, wrong datatype or shape, batches that
# disagree, ids out of range or not integers) is a 400 naming it, answered
# before any computation. One daemon for every check.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
PY=/usr/bin/python3

T=$(model_copy two-tower)
$PY "$SRC/tests/py/make_two_tower.py" "$WORK/data" --train 2000 --test 200
"$DLSERVE" --train "$T" --data "$WORK/data" --epochs 2 --threads 1 --no-progress \
    > /dev/null 2> "$WORK/train.err"
check "two-tower trains briefly" test -f "$T/1/model.safetensors"
# Answers to the same samples in other forms are compared bit for bit (cmp):
# batch_invariant (set, because that relies on it) keeps them
# the same bits whichever batch each request ran in. Against numpy
# (two_tower_ref.py), another implementation, within 1e-5 + 1e-4 relative.
check "the daemon serves two-tower" start_daemon graph --models "$WORK/models" \
    --set batching.batch_invariant=true

check "metadata lists both inputs with their datatypes and both outputs" \
    test "$(code GET /v2/models/two-tower)" = 200
check "... user INT64 [-1, 1], features FP32 [-1, 16]; click, rating [-1, 1]" $PY - "$WORK/body" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["inputs"] == [{"name": "user", "datatype": "INT64", "shape": [-1, 1]},
                       {"name": "features", "datatype": "FP32", "shape": [-1, 16]}], m
assert m["outputs"] == [{"name": "click", "datatype": "FP32", "shape": [-1, 1]},
                        {"name": "rating", "datatype": "FP32", "shape": [-1, 1]}], m
PY
check "config lists them as Triton's model configuration does" \
    test "$(code GET /v2/models/two-tower/config)" = 200
check "... TYPE_INT64 and TYPE_FP32 inputs, two FP32 outputs" $PY - "$WORK/body" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert [(i["name"], i["data_type"], i["dims"]) for i in c["input"]] == \
    [("user", "TYPE_INT64", [1]), ("features", "TYPE_FP32", [16])], c["input"]
assert [(o["name"], o["data_type"], o["dims"]) for o in c["output"]] == \
    [("click", "TYPE_FP32", [1]), ("rating", "TYPE_FP32", [1])], c["output"]
PY

# Three samples: ids 0, 42 and 99 (the last row), features of the test data.
USERS='[0, 42, 99]'
FEATS=$($PY -c 'import sys, json; rows=[l.split(",")[3:] for l in open(sys.argv[1])][:3]; print(json.dumps([[float(v) for v in r] for r in rows]))' "$WORK/data/test.csv")
$PY "$SRC/tests/py/two_tower_ref.py" "$T/1/model.safetensors" "$USERS" "$FEATS" > "$WORK/ref.json"
# req.py FORM DTYPE ORDER USERS FEATURES: a request body for the samples
# (FORM json or bin, ORDER uf: user first, fu: features first).
cat > "$WORK/req.py" <<'PY'
import json, struct, sys
form, dtype, order = sys.argv[1:4]
users, feats = json.loads(sys.argv[4]), json.loads(sys.argv[5])
user = {"name": "user", "datatype": dtype, "shape": [3, 1]}
feat = {"name": "features", "datatype": "FP32", "shape": [3, 16]}
if form == "json":
    user["data"] = users
    feat["data"] = feats          # nested, as the shape says
    body = json.dumps({"inputs": [user, feat] if order == "uf" else [feat, user]}).encode()
    sys.stdout.buffer.write(body)
    sys.exit(0)
fmt = {"INT64": "<3q", "INT32": "<3i", "UINT8": "<3B"}[dtype]
ub = struct.pack(fmt, *users)
fb = struct.pack("<48f", *[v for r in feats for v in r])
user["parameters"] = {"binary_data_size": len(ub)}
feat["parameters"] = {"binary_data_size": len(fb)}
ins, raw = ([user, feat], ub + fb) if order == "uf" else ([feat, user], fb + ub)
head = json.dumps({"inputs": ins, "parameters": {"binary_data_output": True}}).encode()
sys.stderr.write(str(len(head)))
sys.stdout.buffer.write(head + raw)
PY
# answer.py FILE [JSON_LEN]: {"name": [values]} of an answer, binary or
# not, each value the float32 it stands for.
cat > "$WORK/answer.py" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = int(sys.argv[2]) if len(sys.argv) > 2 else len(raw)
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
resp, pos, out = json.loads(raw[:n]), n, {}
for o in resp["outputs"]:
    assert o["datatype"] == "FP32" and o["shape"] == [3, 1], o
    size = o.get("parameters", {}).get("binary_data_size")
    if size is None:
        out[o["name"]] = [f32(v) for v in o["data"]]
    else:
        out[o["name"]] = list(struct.unpack("<%df" % (size // 4), raw[pos:pos + size]))
        pos += size
assert pos == len(raw), (pos, len(raw))
print(json.dumps(out))
PY
# close.py GOT REF: the same outputs, values within float rounding.
cat > "$WORK/close.py" <<'PY'
import json, sys
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert sorted(got) == sorted(ref), (got, ref)
for k in ref:
    for g, r in zip(got[k], ref[k]):
        assert abs(g - r) <= 1e-5 + 1e-4 * abs(r), (k, got[k], ref[k])
PY
infer_json() {   # infer_json DTYPE ORDER: the JSON answer's outputs into $WORK/got.json
    $PY "$WORK/req.py" json "$1" "$2" "$USERS" "$FEATS" > "$WORK/req.json"
    [ "$(code POST /v2/models/two-tower/infer --data-binary @"$WORK/req.json")" = 200 ] &&
        $PY "$WORK/answer.py" "$WORK/body" > "$WORK/got.json"
}
infer_bin() {    # infer_bin DTYPE ORDER: the binary answer's outputs into $WORK/got.json
    local n
    $PY "$WORK/req.py" bin "$1" "$2" "$USERS" "$FEATS" > "$WORK/req.bin" 2> "$WORK/req.len"
    n=$(curl -s -D "$WORK/head" -o "$WORK/body" -w '%{http_code}' -X POST \
        -H "Inference-Header-Content-Length: $(cat "$WORK/req.len")" \
        -H 'Content-Type: application/octet-stream' --data-binary @"$WORK/req.bin" \
        "$URL/v2/models/two-tower/infer")
    [ "$n" = 200 ] || return 1
    n=$(tr -d '\r' < "$WORK/head" | sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: //p')
    $PY "$WORK/answer.py" "$WORK/body" "$n" > "$WORK/got.json"
}
check "JSON: INT64 ids and FP32 features answer click and rating" infer_json INT64 uf
check "... as the model computes them from its weights" $PY "$WORK/close.py" "$WORK/got.json" "$WORK/ref.json"
cp "$WORK/got.json" "$WORK/json.json"
check "binary tensors both ways (INT64 ids)" infer_bin INT64 uf
check "... the same answer, bit for bit" cmp -s "$WORK/got.json" "$WORK/json.json"
check "binary, INT32 ids, inputs in the other order" infer_bin INT32 fu
check "... the same answer" cmp -s "$WORK/got.json" "$WORK/json.json"
check "binary, UINT8 ids" infer_bin UINT8 uf
check "... the same answer" cmp -s "$WORK/got.json" "$WORK/json.json"
check "JSON, INT32 ids, features first" infer_json INT32 fu
check "... the same answer" cmp -s "$WORK/got.json" "$WORK/json.json"

# "outputs" selects; classification only of a classifier's output.
U1='{"name":"user","datatype":"INT64","shape":[1,1],"data":[7]}'
F1='{"name":"features","datatype":"FP32","shape":[1,16],"data":[0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1]}'
post() { code POST /v2/models/two-tower/infer -d "$1"; }
check "'outputs': [rating] answers rating alone" \
    test "$(post "{\"inputs\":[$U1,$F1],\"outputs\":[{\"name\":\"rating\"}]}")" = 200
check "... one output, shape [1, 1]" test "$(jq_get '[(o["name"], o["shape"]) for o in d["outputs"]]')" = "[('rating', [1, 1])]"
check "'outputs': rating as binary, click as JSON" \
    test "$(post "{\"inputs\":[$U1,$F1],\"outputs\":[{\"name\":\"rating\",\"parameters\":{\"binary_data\":true}},{\"name\":\"click\"}]}")" = 200
check "... rating's 4 bytes follow the JSON" $PY - "$WORK/body" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read()
head = raw[:raw.rindex(b"}") + 1]
r = json.loads(head)
assert [o["name"] for o in r["outputs"]] == ["rating", "click"], r
assert r["outputs"][0]["parameters"]["binary_data_size"] == 4 and len(raw) - len(head) == 4, r
assert 0 <= r["outputs"][1]["data"][0] <= 1, r
PY

# refused CODE_BODY NEEDLE DESCRIPTION: 400 with NEEDLE in the error.
refused() {
    local c; c=$(post "$1")
    [ "$c" = 400 ] && grep -qF -- "$2" "$WORK/body" || { echo "# $c $(cat "$WORK/body")"; return 1; }
}
check "an unknown output is refused" refused \
    "{\"inputs\":[$U1,$F1],\"outputs\":[{\"name\":\"ctr\"}]}" "has no output 'ctr' (it has 'click', 'rating'"
check "classification of the mse output is refused" refused \
    "{\"inputs\":[$U1,$F1],\"outputs\":[{\"name\":\"rating\",\"parameters\":{\"classification\":1}}]}" \
    "classification of 'rating'"
check "a missing input is refused, named" refused "{\"inputs\":[$U1]}" "input 'features' of model 'two-tower' is missing"
check "an unknown input is refused, named" refused \
    "{\"inputs\":[$U1,{\"name\":\"feats\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}" \
    "has no input 'feats'"
check "an input given twice is refused" refused "{\"inputs\":[$U1,$U1]}" "input 'user' is given twice"
check "FP32 ids are refused" refused \
    "{\"inputs\":[{\"name\":\"user\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[7]},$F1]}" \
    "input 'user': datatype FP32 does not fit"
check "INT64 features are refused" refused \
    "{\"inputs\":[$U1,{\"name\":\"features\",\"datatype\":\"INT64\",\"shape\":[1,16],\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}" \
    "input 'features': datatype INT64 does not fit"
check "a wrong shape is refused, named" refused \
    "{\"inputs\":[$U1,{\"name\":\"features\",\"datatype\":\"FP32\",\"shape\":[1,15],\"data\":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}" \
    "input 'features': shape [1, 15] does not fit"
check "inputs that disagree on the batch are refused" refused \
    "{\"inputs\":[{\"name\":\"user\",\"datatype\":\"INT64\",\"shape\":[2,1],\"data\":[1,2]},$F1]}" \
    "they must agree"
check "an id past the embedding's rows is refused" refused \
    "{\"inputs\":[{\"name\":\"user\",\"datatype\":\"INT64\",\"shape\":[1,1],\"data\":[100]},$F1]}" \
    "input 'user': 100 (sample 0) is not an id: model 'two-tower' takes integers in [0, 100)"
check "a negative id is refused" refused \
    "{\"inputs\":[{\"name\":\"user\",\"datatype\":\"INT32\",\"shape\":[1,1],\"data\":[-1]},$F1]}" \
    "input 'user': -1 (sample 0) is not an id"
check "a real id is refused" refused \
    "{\"inputs\":[{\"name\":\"user\",\"datatype\":\"INT64\",\"shape\":[1,1],\"data\":[1.5]},$F1]}" \
    "inputs[0].data[0] must be an integer (INT64), not a real"
check "an id past INT64 is refused" refused \
    "{\"inputs\":[{\"name\":\"user\",\"datatype\":\"INT64\",\"shape\":[1,1],\"data\":[9223372036854775808]},$F1]}" \
    "must be an integer (INT64), not out of range"
big=$($PY -c 'import struct,sys,json; h=json.dumps({"inputs":[{"name":"user","datatype":"INT64","shape":[1,1],"parameters":{"binary_data_size":8}},json.loads(sys.argv[1])]}); sys.stdout.write("%d %s" % (len(h), h))' "$F1")
printf '%s' "${big#* }" > "$WORK/big.bin"
$PY -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<q", 1 << 40))' >> "$WORK/big.bin"
check "a binary INT64 id of 2^40 is refused before any computation" \
    test "$(code POST /v2/models/two-tower/infer -H "Inference-Header-Content-Length: ${big%% *}" \
        --data-binary @"$WORK/big.bin")" = 400
check "... naming the input" grep -qF "input 'user': 1.09951163e+12 (sample 0) is not an id" "$WORK/body"
check "the daemon still answers after the refusals" infer_json INT64 uf
check "... alike" cmp -s "$WORK/got.json" "$WORK/json.json"
check "the daemon stops cleanly" stop_daemon
finish
