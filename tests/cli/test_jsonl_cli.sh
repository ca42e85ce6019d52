#!/usr/bin/env bash
# JSON Lines data end to end: a word tagger (a words tokenizer, a class a
# token with labels) whose `prepare` script writes its data when --train
# gets no --data, trained, evaluated (token accuracy) and asked for
# predictions (a label a word); a CRF tagger over ids; a byte language
# model (next_token: perplexity); a regression (mse, rmse); and bad data
# refused with file:line.
. "$(dirname "$0")/../lib/lib.sh"

# ---- the word tagger, its data written by its prepare script ---------------
M=$WORK/models/tagger
mkdir -p "$M"
printf 'the\ncat\ndog\nsat\nran\non\nmat\n' > "$M/vocab.txt"
cat > "$M/model.json" <<'JSON'
{"name": "tagger",
 "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "max_length": 12,
             "tokenizer": {"type": "words", "vocab": "vocab.txt", "lowercase": true}}],
 "layers": [{"name": "emb", "type": "embedding", "num_embeddings": 9, "dim": 8},
            {"name": "fc", "type": "dense", "units": 16},
            {"name": "act", "type": "relu"},
            {"name": "tags", "type": "dense", "units": 3}],
 "outputs": [{"name": "tags", "loss": "softmax_cross_entropy", "labels": ["O", "N", "V"]}],
 "training": {"epochs": 4, "batch_size": 16, "optimizer": "adam", "lr": 0.02}}
JSON
# Nouns N, verbs V, the rest (unknown words too) O; some words in capitals.
cat > "$M/prepare" <<'SH'
#!/bin/sh
echo "prepare: writing into $1 (OUT_DIR=$OUT_DIR)"
echo run >> "$(dirname "$0")/prepare.runs"
exec /usr/bin/python3 - "$1" <<'PY'
import json, random, sys
random.seed(1)
tag = {"cat": "N", "dog": "N", "mat": "N", "sat": "V", "ran": "V"}
words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "zebra"]
for split, n in (("train", 400), ("test", 100)):
    with open(f"{sys.argv[1]}/{split}.jsonl", "w") as f:
        for _ in range(n):
            ws = [random.choice(words) for _ in range(random.randint(1, 10))]
            text = " ".join(w.upper() if random.random() < 0.2 else w for w in ws)
            f.write(json.dumps({"text": text, "tags": [tag.get(w, "O") for w in ws]}) + "\n")
PY
SH
chmod +x "$M/prepare"
"$DLSERVE" --train "$M" --threads 1 --no-progress > "$WORK/train.json" 2> "$WORK/train.err"
rc=$?
check "--train without --data runs the model's prepare script and trains" test $rc -eq 0
check "it says that it runs prepare" grep -q "no --data: running $M/prepare $M/data" \
    "$WORK/train.err"
check "prepare's output goes to stderr: stdout is the one JSON line" \
    test "$(wc -l < "$WORK/train.json")" -eq 1 -a "$(json_get "$WORK/train.json" model)" = tagger
check "prepare got OUT_DIR and the folder" grep -q "writing into $M/data (OUT_DIR=$M/data)" \
    "$WORK/train.err"
check "the data is in the model folder's data/" test -s "$M/data/train.jsonl" -a -s "$M/data/test.jsonl"
check "the epoch lines' accuracy is over tokens (at most 1)" /usr/bin/python3 -c '
import re, sys
accs = [float(a) for a in re.findall(r" acc ([0-9.]+) test_loss", open(sys.argv[1]).read())]
assert len(accs) == 4 and all(0 <= a <= 1 for a in accs), accs' "$WORK/train.err"

"$DLSERVE" --eval "$M" > "$WORK/eval.json" 2> "$WORK/eval.err"
check "--eval without --data reads data/ as it is" test $? -eq 0 -a "$(wc -l < "$M/prepare.runs")" -eq 1
cat "$WORK/eval.json"
check "--eval prints the token accuracy, near 1" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["samples"] == 100 and 0.95 <= r["accuracy"] <= 1, r' "$WORK/eval.json"

printf '{"text": "the dog ran on the MAT"}\n{"text": "zebra"}\n' |
    "$DLSERVE" --predict "$M" > "$WORK/predict.json" 2> "$WORK/predict.err"
check "--predict reads JSON Lines from standard input" test $? -eq 0
cat "$WORK/predict.json"
check "--predict prints a label a word" /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[0] == {"index": 0, "outputs": {"tags": ["O", "N", "V", "O", "O", "N"]}}, rows[0]
assert rows[1] == {"index": 1, "outputs": {"tags": ["O"]}}, rows[1]' "$WORK/predict.json"
"$DLSERVE" --predict "$M" "$M/data/test.jsonl" > "$WORK/predict2.json" 2> /dev/null
check "--predict of the test set ignores its output keys" \
    test $? -eq 0 -a "$(wc -l < "$WORK/predict2.json")" -eq 100

# ---- bad data: one line on stderr naming file:line ----------------------------
D=$WORK/bad
mkdir -p "$D"
cp "$M/data/train.jsonl" "$D/"
head -3 "$M/data/test.jsonl" > "$D/test.jsonl"
echo '{"text": "the cat the cat the cat the cat the cat the cat on", "tags": []}' >> "$D/test.jsonl"
"$DLSERVE" --eval "$M" --data "$D" > /dev/null 2> "$WORK/bad.err"
rc=$?
cat "$WORK/bad.err"
check "a text past max_length is refused with file:line" \
    fails_with "$WORK/bad.err" $rc "test.jsonl:4: input 'text': 13 tokens, above max_length 12"
echo '{"text": "the cat", "tags": ["O", "X"]}' > "$D/test.jsonl"
"$DLSERVE" --eval "$M" --data "$D" > /dev/null 2> "$WORK/bad.err"
rc=$?
check "a label not in labels is refused with file:line" \
    fails_with "$WORK/bad.err" $rc "test.jsonl:1: output 'tags' token 2: 'X' is not one of its 3 labels"
echo '{"text": "the cat", "tag": ["O", "N"]}' > "$D/test.jsonl"
"$DLSERVE" --eval "$M" --data "$D" > /dev/null 2> "$WORK/bad.err"
rc=$?
check "an unknown key is refused with file:line" \
    fails_with "$WORK/bad.err" $rc "test.jsonl:1: unknown key 'tag'"
rm "$D/test.jsonl"
echo 'the,cat' > "$D/test.csv"
"$DLSERVE" --eval "$M" --data "$D" > /dev/null 2> "$WORK/bad.err"
rc=$?
check "CSV for a sequence model is refused" \
    fails_with "$WORK/bad.err" $rc "input 'text' is a sequence: give JSON Lines"
B=$WORK/models/broken
mkdir -p "$B"
cp "$M/model.json" "$M/vocab.txt" "$B/"
printf '#!/bin/sh\necho no data >&2\nexit 3\n' > "$B/prepare"
chmod +x "$B/prepare"
"$DLSERVE" --train "$B" --threads 1 > /dev/null 2> "$WORK/bad.err"
check "a failing prepare script stops --train with its status" \
    grep -q "$B/prepare $B/data exited with status 3" "$WORK/bad.err"

# ---- a CRF tagger over ids ----------------------------------------------------
C=$WORK/models/crf
mkdir -p "$C"
cat > "$C/model.json" <<'JSON'
{"name": "crf",
 "inputs": [{"name": "ids", "datatype": "INT64", "shape": [-1], "max_length": 8}],
 "layers": [{"name": "emb", "type": "embedding", "num_embeddings": 10, "dim": 8},
            {"name": "scores", "type": "dense", "units": 3}],
 "outputs": [{"name": "tags", "from": "scores", "loss": "crf", "labels": ["a", "b", "c"]}],
 "training": {"epochs": 15, "batch_size": 16, "optimizer": "adam", "lr": 0.05}}
JSON
/usr/bin/python3 - "$WORK/crfdata" <<'PY'
import json, os, random, sys
random.seed(2)
os.makedirs(sys.argv[1])
for split, n in (("train", 300), ("test", 60)):
    with open(f"{sys.argv[1]}/{split}.jsonl", "w") as f:
        for _ in range(n):
            ids = [random.randint(1, 9) for _ in range(random.randint(1, 8))]
            f.write(json.dumps({"ids": ids, "tags": ["abc"[i % 3] for i in ids]}) + "\n")
PY
"$DLSERVE" --train "$C" --data "$WORK/crfdata" --threads 1 --no-progress > /dev/null 2> "$WORK/crf.err"
check "a crf model trains on JSON Lines" test $? -eq 0
"$DLSERVE" --eval "$C" --data "$WORK/crfdata" > "$WORK/crf.json" 2> /dev/null
cat "$WORK/crf.json"
check "--eval of a crf output: the Viterbi path's token accuracy" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert 0.95 <= r["accuracy"] <= 1, r' "$WORK/crf.json"
echo '{"ids": [3, 4, 5, 9]}' | "$DLSERVE" --predict "$C" > "$WORK/crf-predict.json" 2> /dev/null
check "--predict of a crf output prints its Viterbi path, a label a position" \
    grep -qx '{"index":0,"outputs":{"tags":\["a","b","c","a"\]}}' "$WORK/crf-predict.json"

# ---- a byte language model: next_token, perplexity ---------------------------
L=$WORK/models/lm
mkdir -p "$L" "$WORK/lmdata"
cat > "$L/model.json" <<'JSON'
{"name": "lm",
 "inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "max_length": 16,
             "tokenizer": {"type": "bytes"}}],
 "layers": [{"name": "emb", "type": "embedding", "num_embeddings": 256, "dim": 16},
            {"name": "logits", "type": "dense", "units": 256}],
 "outputs": [{"name": "logits", "loss": "next_token", "of": "text"}],
 "training": {"epochs": 30, "batch_size": 16, "optimizer": "adam", "lr": 0.05}}
JSON
for s in train test; do
    for i in $(seq 40); do echo '{"text": "abcabcabcabc"}'; echo '{"text": "xyzxyz"}'; done \
        > "$WORK/lmdata/$s.jsonl"
done
"$DLSERVE" --train "$L" --data "$WORK/lmdata" --threads 1 --no-progress > /dev/null 2> "$WORK/lm.err"
check "a next_token model trains on JSON Lines (no key for its output)" test $? -eq 0
"$DLSERVE" --eval "$L" --data "$WORK/lmdata" > "$WORK/lm.json" 2> /dev/null
cat "$WORK/lm.json"
check "--eval of a next_token output prints its perplexity, near 1 on cycles" \
    /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert 1 <= r["perplexity"] < 1.5 and r["accuracy"] > 0.9, r' "$WORK/lm.json"

# ---- a regression on JSON Lines: mse and rmse -----------------------------------
R=$WORK/models/reg
mkdir -p "$R" "$WORK/regdata"
cat > "$R/model.json" <<'JSON'
{"name": "reg",
 "inputs": [{"name": "x", "datatype": "FP32", "shape": [2]}],
 "layers": [{"name": "y", "type": "dense", "units": 1}],
 "outputs": [{"name": "y", "loss": "mse"}],
 "training": {"epochs": 40, "batch_size": 16, "optimizer": "adam", "lr": 0.05}}
JSON
/usr/bin/python3 - "$WORK/regdata" <<'PY'
import json, random, sys
random.seed(3)
for split in ("train", "test"):
    with open(f"{sys.argv[1]}/{split}.jsonl", "w") as f:
        for _ in range(200):
            a, b = random.uniform(-1, 1), random.uniform(-1, 1)
            f.write(json.dumps({"x": [a, b], "y": 2 * a - b + 0.5}) + "\n")
PY
"$DLSERVE" --train "$R" --data "$WORK/regdata" --threads 1 --no-progress > /dev/null 2>&1
"$DLSERVE" --eval "$R" --data "$WORK/regdata" > "$WORK/reg.json" 2> /dev/null
cat "$WORK/reg.json"
check "--eval of an mse output prints mse and rmse" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert "accuracy" not in r and abs(r["rmse"] ** 2 - r["mse"]) < 1e-3 and r["rmse"] < 0.1, r' \
    "$WORK/reg.json"
finish
