#!/usr/bin/env bash
# The PaddlePaddle book's models (models/housing, kjv-ngram, kjv-books,
# kjv-books-lstm, kjv-punct, movielens), briefly: each `prepare` script
# writes its data (housing's through `--train` without --data), a slice of
# it (every k-th sample: the files are in Bible order) trains for a few
# hundred steps on one thread (movielens' small towers a thousand, on all
# its ratings: a second a epoch), and each model must learn: the training
# loss falls, and the test figure beats chance (the most frequent class or
# tag of the slice, the mean rating, the mean price); kjv-punct's Viterbi
# paths are a valid tag a word. Then one daemon serves the six: a text
# request each over HTTP, and a record each over Kafka (mock cluster). The
# full runs and their baselines are tests/bench/book_models'. ~25 s.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

REPO=$WORK/repo
mkdir -p "$REPO" "$WORK/full" "$WORK/data"

# book_copy NAME: the model folder's files (links followed; no data/ nor
# versions) as $REPO/NAME
book_copy() {
    local f
    mkdir -p "$REPO/$1"
    for f in "$SRC/models/$1"/*; do
        [ -f "$f" ] && cp -L "$f" "$REPO/$1/"
    done
}

# slice FULL OUT KTRAIN KTEST: every KTRAIN-th train sample and every
# KTEST-th test sample of FULL/ into OUT/
slice() {
    mkdir -p "$2"
    awk -v k="$3" '(NR - 1) % k == 0' "$1/train.jsonl" > "$2/train.jsonl"
    awk -v k="$4" '(NR - 1) % k == 0' "$1/test.jsonl" > "$2/test.jsonl"
}

# train NAME DATA ARGS...: --train on one thread into $WORK/NAME.{json,err}
train() {
    local name=$1 data=$2; shift 2
    "$DLSERVE" --train "$REPO/$name" ${data:+--data "$data"} --threads 1 --no-progress "$@" \
        > "$WORK/$name.json" 2> "$WORK/$name.err"
}

# learns NAME DATA OUTPUT KIND MARGIN: the epochs' training loss falls,
# and --eval's figure on DATA/test.jsonl beats chance's for KIND: mse
# below MARGIN x the train mean's, class (accuracy above the most frequent
# class's of train by MARGIN), token (the same over tokens)
learns() {
    "$DLSERVE" --eval "$REPO/$1" --data "$2" > "$WORK/$1-eval.json" 2> "$WORK/$1-eval.err" &&
        /usr/bin/python3 - "$WORK/$1.err" "$WORK/$1-eval.json" "$2" "$3" "$4" "$5" <<'PY'
import collections, json, re, sys
err, ev, data, out, kind, margin = sys.argv[1:6] + [float(sys.argv[6])]
losses = [float(v) for v in re.findall(r" epoch \d+/\d+ loss ([0-9.]+) ", open(err).read())]
r = json.loads(open(ev).readline())
curve = "training loss %s to %s in %d epochs" % (losses[0], losses[-1], len(losses)) if losses else "no epochs"
load = lambda s: [json.loads(l)[out] for l in open("%s/%s.jsonl" % (data, s))]
train, test = load("train"), load("test")
if kind == "mse":
    mean = sum(train) / len(train)
    chance = sum((y - mean) ** 2 for y in test) / len(test)
    print("# %s: %s, test mse %.4f, the train mean's %.4f" % (out, curve, r["mse"], chance))
    ok = r["mse"] < margin * chance
else:
    if kind == "token":
        train, test = [t for ts in train for t in ts], [t for ts in test for t in ts]
    top = collections.Counter(train).most_common(1)[0][0]
    chance = sum(y == top for y in test) / len(test)
    print("# %s: %s, test accuracy %.4f, %r's %.4f" % (out, curve, r["accuracy"], top, chance))
    ok = r["accuracy"] > chance + margin
sys.exit(0 if len(losses) >= 2 and losses[-1] < losses[0] and ok else 1)
PY
}

# ---- housing: prepare through --train, the whole data ----------------------
book_copy housing
check "housing: --train without --data runs prepare and trains" \
    train housing "" --epochs 60
check "... its data written to the model folder's data/" \
    test "$(wc -l < "$REPO/housing/data/train.jsonl"),$(wc -l < "$REPO/housing/data/test.jsonl")" = 404,102
check "housing learns: test mse below half the mean price's" \
    learns housing "$REPO/housing/data" price mse 0.5

# ---- the King James models: prepare, then a slice --------------------------
for m in kjv-ngram kjv-books kjv-punct movielens; do
    "$SRC/models/$m/prepare" "$WORK/full/$m" > "$WORK/prepare-$m.out" 2>&1
    check "$m: prepare writes train.jsonl and test.jsonl" \
        test -s "$WORK/full/$m/train.jsonl" -a -s "$WORK/full/$m/test.jsonl"
done
slice "$WORK/full/kjv-ngram" "$WORK/data/kjv-ngram" 10 20     # 20,000 / 3,176
slice "$WORK/full/kjv-books" "$WORK/data/kjv-books" 7 5       # 3,999 / 622
slice "$WORK/full/kjv-punct" "$WORK/data/kjv-punct" 7 5       # 3,990 / 621
slice "$WORK/full/movielens" "$WORK/data/movielens" 1 5       # 89,997 / 2,000

book_copy kjv-ngram
check "kjv-ngram: 3 epochs of 20,000 n-grams (471 steps)" \
    train kjv-ngram "$WORK/data/kjv-ngram" --epochs 3
check "kjv-ngram learns: accuracy 0.05 above the most frequent next word's" \
    learns kjv-ngram "$WORK/data/kjv-ngram" next class 0.05

book_copy kjv-books
check "kjv-books: 3 epochs of 3,999 verses (189 steps)" \
    train kjv-books "$WORK/data/kjv-books" --epochs 3
check "kjv-books learns: accuracy 0.1 above the largest group's" \
    learns kjv-books "$WORK/data/kjv-books" group class 0.1

book_copy kjv-books-lstm
check "kjv-books-lstm: 3 epochs of the same verses" \
    train kjv-books-lstm "$WORK/data/kjv-books" --epochs 3
check "kjv-books-lstm learns: accuracy 0.1 above the largest group's" \
    learns kjv-books-lstm "$WORK/data/kjv-books" group class 0.1

book_copy kjv-punct
check "kjv-punct: 3 epochs of 3,990 verses (189 steps)" \
    train kjv-punct "$WORK/data/kjv-punct" --epochs 3
check "kjv-punct learns: token accuracy 0.02 above tagging every word 'none'" \
    learns kjv-punct "$WORK/data/kjv-punct" tags token 0.02
"$DLSERVE" --predict "$REPO/kjv-punct" "$WORK/data/kjv-punct/test.jsonl" \
    > "$WORK/punct-pred.json" 2> "$WORK/punct-pred.err"
check "kjv-punct: --predict gives every test verse a path of valid tags, a tag a word" \
    /usr/bin/python3 - "$WORK/data/kjv-punct/test.jsonl" "$WORK/punct-pred.json" <<'PY'
import json, sys
verses = [json.loads(l) for l in open(sys.argv[1])]
paths = [json.loads(l)["outputs"]["tags"] for l in open(sys.argv[2])]
assert len(paths) == len(verses), (len(paths), len(verses))
for v, p in zip(verses, paths):
    assert len(p) == len(v["tags"]) and set(p) <= {"none", ",", ";", ":", ".", "?", "!"}, (v, p)
print("# %d paths; ends of verses tagged '.': %d" % (len(paths), sum(p[-1] == "." for p in paths)))
PY

book_copy movielens
check "movielens: 3 epochs of the 89,997 ratings (1,056 steps of the tiny towers)" \
    train movielens "$WORK/data/movielens" --epochs 3
check "movielens learns: test mse below 0.8 x the mean rating's" \
    learns movielens "$WORK/data/movielens" rating mse 0.8

# ---- one daemon serves the six: HTTP, then Kafka ---------------------------
check "mock cluster up" start_mock in:1 out:1 dlq:1
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "the daemon serves the six models and joins its Kafka group" \
    start_kafka_daemon books --set models.watch=false --set kafka.input_topics=in \
    --set kafka.output_topic=out --set kafka.dead_letter_topic=dlq

# infer MODEL JSON_INPUTS [JSON_OUTPUTS]: POST one sample; 200 and the body
# in $WORK/body
infer() {
    test "$(code POST "/v2/models/$1/infer" \
        -d "{\"inputs\":$2${3:+,\"outputs\":$3}}")" = 200 || { cat "$WORK/body"; return 1; }
}
# body_ok EXPR: EXPR holds on the answer in $WORK/body (as d)
body_ok() {
    /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not eval(sys.argv[2]))' \
        "$WORK/body" "$1"
}
text() { printf '[{"name":"%s","datatype":"BYTES","shape":[1],"data":["%s"]}]' "$1" "$2"; }

check "housing: a house's price" infer housing \
    '[{"name":"features","datatype":"FP32","shape":[1,13],"data":[0.00632,18,2.31,0,0.538,6.575,65.2,4.09,1,296,15.3,396.9,4.98]}]' \
    '[{"name":"price"}]'
check "... one price, in the data's range" body_ok \
    'd["outputs"][0]["shape"] == [1, 1] and 5 < d["outputs"][0]["data"][0] < 50'
check "kjv-ngram: the 3 likeliest next words of a text" infer kjv-ngram \
    "$(text context 'and it came to')" '[{"name":"next","parameters":{"classification":3}}]'
check "... 3 'score:class:word' of the vocabulary" body_ok \
    'len(d["outputs"][0]["data"]) == 3 and all(s.split(":")[2] in open("'"$SRC"'/models/kjv-ngram/vocab.txt").read().split() for s in d["outputs"][0]["data"])'
for m in kjv-books kjv-books-lstm; do
    check "$m: a verse's group" infer $m "$(text text 'Blessed are the meek: for they shall inherit the earth.')"
    check "... 10 probabilities and one of the ten groups" body_ok \
        'abs(sum(d["outputs"][0]["data"]) - 1) < 1e-4 and d["outputs"][1]["data"][0] in ("Law", "History", "Poetry", "Major Prophets", "Minor Prophets", "Gospels", "Acts", "Pauline epistles", "General epistles", "Revelation")'
done
check "kjv-punct: the tags of a text of 11 words" infer kjv-punct \
    "$(text text 'and god said let there be light and there was light')" \
    '[{"name":"tags","parameters":{"labels":true}}]'
check "... 11 valid tags" body_ok \
    'd["outputs"][0]["shape"] == [1, 11] and set(d["outputs"][0]["data"]) <= {"none", ",", ";", ":", ".", "?", "!"}'
check "movielens: a user's rating of a movie" infer movielens \
    '[{"name":"user","datatype":"INT64","shape":[1,1],"data":[175]},{"name":"movie","datatype":"INT64","shape":[1,1],"data":[833]},{"name":"genres","datatype":"BYTES","shape":[1],"data":["animation children drama musical"]},{"name":"title","datatype":"BYTES","shape":[1],"data":["Dumbo"]}]'
check "... one rating, near the range 0.5 to 5" body_ok \
    '0 < d["outputs"][0]["data"][0] < 6'

# A record a model, at once: each answered on "out", none a dead letter.
/usr/bin/python3 - <<'PY' | kcat -b "$BOOT" -P -t in -K'|'
import json
text = lambda name, s: {"name": name, "datatype": "BYTES", "shape": [1], "data": [s]}
ids = lambda name, v: {"name": name, "datatype": "INT64", "shape": [1, 1], "data": [v]}
records = {
    "housing": [{"name": "features", "datatype": "FP32", "shape": [1, 13],
                 "data": [0.00632, 18, 2.31, 0, 0.538, 6.575, 65.2, 4.09, 1, 296, 15.3, 396.9, 4.98]}],
    "kjv-ngram": [text("context", "and it came to")],
    "kjv-books": [text("text", "Blessed are the meek: for they shall inherit the earth.")],
    "kjv-books-lstm": [text("text", "In the beginning God created the heaven and the earth.")],
    "kjv-punct": [text("text", "and god said let there be light and there was light")],
    "movielens": [ids("user", 175), ids("movie", 833), text("genres", "animation children drama musical"),
                  text("title", "Dumbo")],
}
for model, inputs in records.items():
    print("%s|%s" % (model, json.dumps({"id": model, "model": model, "inputs": inputs})))
PY
check "6 records answered" collect out 6 "$WORK/kout" --timeout 60
check "... each by its model, with its output" /usr/bin/python3 - "$WORK/kout" <<'PY'
import json, sys
got = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, _h, value = line.rstrip("\n").split("\t", 5)
    got[key] = json.loads(value)
assert sorted(got) == ["housing", "kjv-books", "kjv-books-lstm", "kjv-ngram", "kjv-punct",
                       "movielens"], sorted(got)
for k, r in got.items():
    assert r["model"] == k and r["id"] == k, r
tags = got["kjv-punct"]["values"]   # a crf's path, as labels
assert len(tags) == 11 and set(tags) <= {"none", ",", ";", ":", ".", "?", "!"}, tags
assert got["kjv-books"]["label"] in ("Law", "History", "Poetry", "Major Prophets", "Minor Prophets",
    "Gospels", "Acts", "Pauline epistles", "General epistles", "Revelation"), got["kjv-books"]
assert 5 < got["housing"]["values"][0] < 50 and 0 < got["movielens"]["values"][0] < 6, got
for k, r in sorted(got.items()):
    print("# %s: %s" % (k, json.dumps({x: r[x] for x in r if x in ("label", "values")})[:100]))
PY
check "no dead letter" test "$(kcat -b "$BOOT" -C -t dlq -o beginning -e -q 2>/dev/null | wc -l)" -eq 0
check "the daemon stops cleanly" stop_daemon
finish
