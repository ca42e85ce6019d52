#!/usr/bin/env bash
# ONNX of sequence models against PyTorch. PyTorch 1.13 exports four text
# models of ids over a dynamic time axis (tests/py/onnx_models.py
# sequence): a 2-layer nn.TransformerEncoder with learned positions, a key
# padding mask from ids == 0 and masked mean pooling; a 2-layer
# bidirectional LSTM (h_n); a GRU with masked max pooling and a per-token
# output; a text CNN (Conv1d over the channels-first transpose, masked
# max); a causal language model (torch.triu over the time axis). Each
# imports into dlserve's own layers (sdpa over the sequence,
# seq_pool, pos_embedding, one lstm of two levels under state_dict's
# names, gru, conv1d: no mask left as a layer), and --predict gives
# PyTorch's outputs (over the padded batch, masks or packing applied) at
# batch 1 and 32 of mixed lengths (1 to 16) to 1e-4, the per-token
# classes PyTorch's top ones; --eval gives PyTorch's losses. The time
# axis' capacity comes from --max-length, a model.json beside or the
# metadata; refusals name the node. Every sequence fixture of
# tests/unit/fixtures/graph, exported and imported back, answers as the
# original, bit for bit (a cross-attention is refused at export). A GPT
# exported as nanoGPT writes its attention imports beside a model.json of
# only a generate block (tests/unit/test_gen_torch.c decodes it). ~12 s.
. "$(dirname "$0")/../lib/lib.sh"
PY=/usr/bin/python3
CHECK=$SRC/tests/py/onnx_check.py
X=$WORK/x
M=$WORK/models
mkdir -p "$X" "$M"
$PY "$SRC/tests/py/onnx_models.py" sequence "$X" > "$WORK/export.log" 2>&1 ||
    sed 's/^/# /' "$WORK/export.log"
check "PyTorch exports the sequence models (each batch answers as its samples alone)" \
    test -s "$X/seq_cnn.b32.json" -a -s "$X/seq_dim.onnx"

# layers MODEL PYTHON: asserts PYTHON on the imported model.json (`m`,
# `types` its layer types in order).
layers() {
    $PY - "$M/$1/model.json" "$2" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
types = [l["type"] for l in m["layers"]]
assert eval("(" + sys.argv[2] + ")"), (types, m)
PY
}

for m in seq_tx seq_lstm seq_gru seq_cnn seq_lm; do
    "$DLSERVE" --import "$X/$m.onnx" --models "$M" --name $m --max-length 16 \
        > /dev/null 2> "$WORK/imp.err" || sed 's/^/# /' "$WORK/imp.err"
    check "$m: --import writes version 1, ids a sequence of max_length 16" layers $m \
        'm["inputs"] == [{"name": "ids", "shape": [-1], "datatype": "INT64", "max_length": 16}]'
    for b in 1 32; do
        "$DLSERVE" --predict "$M/$m" "$X/$m.b$b.jsonl" > "$WORK/$m.pred$b" 2> "$WORK/pred.err"
        check "$m: --predict gives PyTorch's outputs at batch $b of mixed lengths (1e-4)" \
            $PY "$CHECK" predict "$WORK/$m.pred$b" "$X/$m.b$b.json"
    done
done
check "seq_tx: attention over the sequence (sdpa), mean pooling, positions; no mask layer" \
    layers seq_tx 'types.count("sdpa") == 2 and types.count("seq_pool") == 1 and
        [l["mode"] for l in m["layers"] if l["type"] == "seq_pool"] == ["mean"] and
        [l["max_length"] for l in m["layers"] if l["type"] == "pos_embedding"] == [16] and
        set(types) <= {"embedding", "pos_embedding", "dense", "sdpa", "add", "layernorm",
                       "relu", "seq_pool"}'
check "seq_lstm: embedding, one lstm of 2 bidirectional levels returning its last states, dense" \
    layers seq_lstm 'types == ["embedding", "lstm", "dense"] and
        {k: m["layers"][1][k] for k in ("layers", "bidirectional", "return", "hidden")} ==
        {"layers": 2, "bidirectional": True, "return": "last", "hidden": 6}'
check "seq_lstm: its weights keep state_dict's names (rnn.weight_ih_l1_reverse, ...)" \
    $PY - "$M/seq_lstm/1/model.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], "rb")
names = set(json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))) - {"__metadata__"}
want = {f"rnn.{w}_l{k}{d}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        for k in (0, 1) for d in ("", "_reverse")}
assert want <= names, sorted(names)
PY
check "seq_gru: gru, masked max as seq_pool max, a per-token output" \
    layers seq_gru 'types == ["embedding", "gru", "seq_pool", "dense", "dense"] and
        [(o["name"], o["loss"]) for o in m["outputs"]] ==
        [("y", "mse"), ("tags", "softmax_cross_entropy")]'
check "seq_cnn: conv1d over the sequence, no transpose, max pooling" \
    layers seq_cnn 'types == ["embedding", "conv1d", "relu", "seq_pool", "dense"]'
check "seq_lm: the triu mask over the time axis is a causal sdpa; per-token scores" \
    layers seq_lm '[l.get("causal") for l in m["layers"] if l["type"] == "sdpa"] == [True] and
        [(o["name"], o["loss"]) for o in m["outputs"]] == [("tags", "softmax_cross_entropy")]'

# A decoder-only GPT as nanoGPT writes its attention (Split of the packed
# projection, masked_fill of an arange comparison, of a sliced tril buffer,
# and triu added: tests/py/gen_onnx.py) beside a model.json of only a
# generate block: its max_context is the time axis, the block is kept, and
# each block's attention is one causal attention layer (the decoder's
# cache runs on them); without the block, causal sdpa layers as before.
G=$WORK/gpt
$PY "$SRC/tests/py/gen_onnx.py" "$G" --max-tokens 8 > "$WORK/gpt.log" 2>&1 ||
    sed 's/^/# /' "$WORK/gpt.log"
mkdir -p "$M/gpt"
cp "$G/gpt/model.json" "$M/gpt/"
"$DLSERVE" --import "$G/gpt/1/model.onnx" --models "$M" --name gpt > /dev/null \
    2> "$WORK/imp.err" || sed 's/^/# /' "$WORK/imp.err"
check "gpt: the generate block's max_context is the ids' time axis; the block kept" \
    layers gpt 'm["inputs"][0]["max_length"] == 64 and
        m["generate"] == {"input": "ids", "output": "logits", "max_context": 64, "eos": "\n"}'
check "gpt: three causal attention layers, no mask or split left" \
    layers gpt '[l.get("causal") for l in m["layers"] if l["type"] == "attention"] ==
        [True] * 3 and set(types) <= {"embedding", "pos_embedding", "layernorm", "attention",
                                      "add", "dense", "gelu"}'
"$DLSERVE" --import "$G/gpt/1/model.onnx" --models "$M" --name gpt_plain --max-length 64 \
    > /dev/null 2> "$WORK/imp.err" || sed 's/^/# /' "$WORK/imp.err"
check "gpt without a generate block: three causal sdpa layers" \
    layers gpt_plain '[l.get("causal") for l in m["layers"] if l["type"] == "sdpa"] == [True] * 3'

# --eval: a model.json beside gives the outputs their losses and labels;
# the losses are PyTorch's cross-entropies over the same batch (the
# per-token one a mean over the labelled tokens).
E=$WORK/eval
mkdir -p "$E/m/seq_gru" "$E/data"
cat > "$E/m/seq_gru/model.json" <<'JSON'
{"name": "seq_gru",
 "inputs": [{"name": "ids", "max_length": 16}],
 "outputs": [{"name": "y", "loss": "softmax_cross_entropy", "labels": ["a", "b", "c"]},
             {"name": "tags", "loss": "softmax_cross_entropy"}]}
JSON
"$DLSERVE" --import "$X/seq_gru.onnx" --models "$E/m" --name seq_gru > /dev/null 2>&1
check "a model.json beside gives the time axis' capacity" \
    grep -q '"max_length": 16' "$E/m/seq_gru/model.json"
$PY - "$X" "$E/data/test.jsonl" > "$WORK/want.json" <<'PY'
import json, random, sys
import numpy as np
random.seed(3)
ref = json.load(open(f"{sys.argv[1]}/seq_gru.b32.json"))
rows = [json.loads(line) for line in open(f"{sys.argv[1]}/seq_gru.b32.jsonl")]
def ce(z, k):
    z = np.asarray(z, dtype=np.float64)
    return z.max() + np.log(np.exp(z - z.max()).sum()) - z[k]
ys, tok = [], []
with open(sys.argv[2], "w") as f:
    for i, r in enumerate(rows):
        y, t = random.randrange(3), [random.randrange(4) for _ in r["ids"]]
        ys.append(ce(ref["y"][i], y))
        tok += [ce(ref["tags"][i][p], k) for p, k in enumerate(t)]
        f.write(json.dumps({"ids": r["ids"], "y": "abc"[y], "tags": t}) + "\n")
print(json.dumps({"y": np.mean(ys), "tags": np.mean(tok)}))
PY
"$DLSERVE" --eval "$E/m/seq_gru" --data "$E/data" > "$WORK/eval.json" 2> "$WORK/eval.err"
check "seq_gru: --eval gives PyTorch's losses of both outputs (4 decimals)" \
    $PY - "$WORK/eval.json" "$WORK/want.json" <<'PY'
import json, sys
got, want = json.loads(open(sys.argv[1]).readline()), json.load(open(sys.argv[2]))
for k in ("y", "tags"):
    assert abs(got["outputs"][k]["loss"] - want[k]) <= 1e-4, (k, got, want)
assert got["samples"] == 32, got
PY

# The time axis' capacity and the refusals, one line each naming the cause.
"$DLSERVE" --import "$X/seq_tx.onnx" --models "$M" --name tx256 > /dev/null 2> "$WORK/err"
check "learned positions beyond their table are refused, naming --max-length" \
    fails_with "$WORK/err" $? \
    "node '/pos/Gather' (Gather, opset 17): index 16 is out of range (.*--max-length 16 or less)"
"$DLSERVE" --import "$X/seq_cnn.onnx" --models "$M" --name cnn256 > /dev/null 2>&1
check "without --max-length (or a model.json or metadata), the capacity is 256" \
    grep -q '"max_length": 256' "$M/cnn256/model.json"
"$DLSERVE" --predict "$M/seq_cnn" --max-length 8 "$X/seq_cnn.b1.jsonl" > /dev/null 2> "$WORK/err"
check "--max-length goes with --import" fails_with "$WORK/err" $? "--max-length goes with --import"
"$DLSERVE" --import "$X/seq_cnn.onnx" --models "$M" --name zero --max-length 0 > /dev/null \
    2> "$WORK/err"
check "--max-length 0 is refused" fails_with "$WORK/err" $? "max-length"
"$DLSERVE" --import "$X/seq_first.onnx" --models "$M" --name first > /dev/null 2> "$WORK/err"
check "the first position of a time axis is refused, naming the node" \
    fails_with "$WORK/err" $? \
    "node '/Gather' (Gather, opset 17): of a sequence's time axis only the last position"
"$DLSERVE" --import "$X/seq_dim.onnx" --models "$M" --name dim > /dev/null 2> "$WORK/err"
check "a symbolic third dimension is refused" \
    fails_with "$WORK/err" $? "graph input 'x': dimension 2 is symbolic: only the first"
check "refused imports write nothing" test ! -e "$M/tx256/1" -a ! -e "$M/first/1"

# --export of the sequence layers: every sequence fixture exported (its
# max_length in the metadata) and imported back answers as the original,
# every printed value the same (--predict of its samples, unpadded);
# attention comes back as dense, sdpa, dense.
F=$SRC/tests/unit/fixtures/graph
R=$WORK/rt
mkdir -p "$R"
n=0 same=0
for c in "$F"/*/; do
    name=$(basename "$c")
    grep -q '"max_length"' "$c/model.json" 2> /dev/null || continue
    case $name in train_* | mha_cross) continue ;; esac
    mkdir -p "$R/orig/$name/1"
    cp "$c/model.json" "$R/orig/$name/"
    cp "$c/init.safetensors" "$R/orig/$name/1/model.safetensors"
    n=$((n + 1))
    "$DLSERVE" --export "$R/orig/$name" --onnx "$R/$name.onnx" > /dev/null 2>> "$WORK/rt.err" &&
        "$DLSERVE" --import "$R/$name.onnx" --models "$R/back" --name "$name" > /dev/null \
            2>> "$WORK/rt.err" || continue
    $PY - "$c" "$R/$name.jsonl" <<'PY'
import json, struct, sys
import numpy as np
raw = open(sys.argv[1] + "/inputs.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
dt = {"F32": np.float32, "I64": np.int64}
t = {k: np.frombuffer(raw[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]],
                      dtype=dt[h["dtype"]]).reshape(h["shape"]) for k, h in head.items()}
ins = json.load(open(sys.argv[1] + "/model.json"))["inputs"]
with open(sys.argv[2], "w") as f:
    for i in range(len(t[ins[0]["name"]])):
        s = {}
        for a in ins:
            v = t[a["name"]][i]
            if a.get("max_length"):
                v = v[:int(t["len." + a["name"]][i])]
            s[a["name"]] = v.tolist()
        f.write(json.dumps(s) + "\n")
PY
    "$DLSERVE" --predict "$R/orig/$name" "$R/$name.jsonl" > "$R/$name.a" 2>> "$WORK/rt.err"
    "$DLSERVE" --predict "$R/back/$name" "$R/$name.jsonl" > "$R/$name.b" 2>> "$WORK/rt.err"
    if [ -s "$R/$name.a" ] && cmp -s "$R/$name.a" "$R/$name.b"; then same=$((same + 1));
    else echo "# $name: not the original's answers"; fi
done
sed 's/^/# /' "$WORK/rt.err"
check "every sequence fixture ($n) exported and imported back answers as the original" \
    test $n -ge 20 -a $same -eq $n
check "... its layers the original's (attention as dense, sdpa, dense), max_length kept" \
    $PY - "$R" <<'PY'
import json, os, sys
for name in os.listdir(f"{sys.argv[1]}/orig"):
    a = [l["type"] for l in json.load(open(f"{sys.argv[1]}/orig/{name}/model.json"))["layers"]]
    b = [l["type"] for l in json.load(open(f"{sys.argv[1]}/back/{name}/model.json"))["layers"]]
    a = sum((["dense", "sdpa", "dense"] if t == "attention" else [t] for t in a), [])
    assert a == b, (name, a, b)
    m = json.load(open(f"{sys.argv[1]}/back/{name}/model.json"))
    want = json.load(open(f"{sys.argv[1]}/orig/{name}/model.json"))["inputs"]
    assert [i.get("max_length") for i in m["inputs"]] == [i.get("max_length") for i in want]
PY
# A text tagger: a BYTES input (bytes tokenizer), a BiLSTM and a crf
# output, trained briefly, exported (the ids INT64 over the time axis, the
# tag scores as the output, the transitions an initializer, the tokenizer
# and the crf loss in the metadata) and imported back without a
# model.json: the same model.json, Viterbi paths and --eval loss.
T=$WORK/tagger
mkdir -p "$T/m/tagger" "$T/data"
cat > "$T/m/tagger/model.json" <<'JSON'
{"name": "tagger",
 "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "tokenizer": {"type": "bytes"},
             "max_length": 24}],
 "layers": [
   {"name": "emb", "type": "embedding", "inputs": ["text"], "num_embeddings": 256, "dim": 8},
   {"name": "bilstm", "type": "lstm", "hidden": 6, "bidirectional": true, "return": "sequence"},
   {"name": "emit", "type": "dense", "units": 3}],
 "outputs": [{"name": "tags", "from": "emit", "loss": "crf", "labels": ["lo", "up", "sp"]}],
 "training": {"epochs": 1, "batch_size": 8, "optimizer": "adam", "lr": 0.01}}
JSON
$PY - "$T/data" <<'PY'
import json, random, sys
random.seed(1)
for split in ("train", "test"):
    with open(f"{sys.argv[1]}/{split}.jsonl", "w") as f:
        for _ in range(40):
            s = "".join(random.choice("abcXYZ ") for _ in range(random.randint(1, 24)))
            tags = ["up" if c.isupper() else "sp" if c == " " else "lo" for c in s]
            f.write(json.dumps({"text": s, "tags": tags}) + "\n")
PY
"$DLSERVE" --train "$T/m/tagger" --data "$T/data" --threads 1 --no-progress > /dev/null \
    2> "$WORK/train.err"
"$DLSERVE" --export "$T/m/tagger" --onnx "$T/tagger.onnx" > /dev/null 2> "$WORK/err" &&
    "$DLSERVE" --import "$T/tagger.onnx" --models "$T/m" --name back > /dev/null 2>> "$WORK/err"
check "the tagger is exported and imported back" test -s "$T/m/back/1/model.safetensors"
check "... as the same model: text input and tokenizer, layers, crf output with its labels" \
    $PY - "$T/m/tagger/model.json" "$T/m/back/model.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["inputs"] == [dict(a["inputs"][0])], b["inputs"]
named = lambda m: [(l["name"], l["type"]) for l in m["layers"]]
assert named(a) == named(b), (named(a), named(b))
assert [(o["name"], o["from"], o["loss"], o["labels"]) for o in b["outputs"]] == \
    [("tags", "emit", "crf", ["lo", "up", "sp"])], b["outputs"]
PY
cut -d, -f1 "$T/data/test.jsonl" | sed 's/$/}/' > "$T/in.jsonl"
"$DLSERVE" --predict "$T/m/tagger" "$T/in.jsonl" > "$T/a" 2>> "$WORK/err"
"$DLSERVE" --predict "$T/m/back" "$T/in.jsonl" > "$T/b" 2>> "$WORK/err"
check "... its Viterbi paths the original's (40 texts)" \
    test "$(wc -l < "$T/a")" -eq 40 -a -n "$(cmp "$T/a" "$T/b" && echo same)"
"$DLSERVE" --eval "$T/m/tagger" --data "$T/data" > "$T/ea" 2>> "$WORK/err"
"$DLSERVE" --eval "$T/m/back" --data "$T/data" > "$T/eb" 2>> "$WORK/err"
check "... its --eval loss and token accuracy the original's" $PY -c '
import json, sys
a, b = (json.loads(open(f).readline()) for f in sys.argv[1:3])
assert (a["loss"], a["accuracy"]) == (b["loss"], b["accuracy"]) and a["samples"] == 40, (a, b)
' "$T/ea" "$T/eb"

mkdir -p "$R/orig/cross/1"
cp "$F/mha_cross/model.json" "$R/orig/cross/"
cp "$F/mha_cross/init.safetensors" "$R/orig/cross/1/model.safetensors"
"$DLSERVE" --export "$R/orig/cross" --onnx "$R/cross.onnx" > /dev/null 2> "$WORK/err"
check "a cross-attention (a query and keys) is refused at export, naming the layer" \
    fails_with "$WORK/err" $? \
    "layer 'y' (attention) of a query and keys: only self-attention (one input) has"
finish
