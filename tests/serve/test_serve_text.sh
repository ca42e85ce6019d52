#!/usr/bin/env bash
# A text model served over HTTP and Kafka: "tagger" reads a BYTES input
# (the bytes tokenizer, max_length 12) through an embedding into a
# per-token classifier "kind" (lower, upper, other: 3 scores a byte) and a
# crf "tags" over the same classes, its weights written here (random,
# fixed). Metadata and config show the text input (BYTES, max_length) and
# the per-token outputs; JSON and binary requests of 24 texts of lengths 1
# to 12, sent concurrently with curl (one text or two of a length a
# request) so that the batcher mixes lengths, answer bit for bit what each
# text answers alone (batch_invariant on, under OpenBLAS, whose results
# depend on a batch's rows), trimmed to each text's length; labels and
# classifications of positions; over-long, empty and malformed texts are
# 400s naming the input. Over Kafka (mock cluster, kcat), text records
# answer the same values with the crf's tags as labels, and an over-long
# or malformed record is a dead letter of kind "input".
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

M=$WORK/repo/tagger
mkdir -p "$WORK/base" "$WORK/got"
make_tagger "$M"
check "tagger's weights written" test -s "$M/1/model.safetensors"

# 24 texts, two of each length from 1 to 12 (no quotes or backslashes)
$PY - > "$WORK/texts" <<'PY'
import random
rng = random.Random(3)
for n in range(1, 13):
    for _ in range(2):
        print("".join(rng.choice("abcXYZ .,!-9") for _ in range(n)))
PY
N=$(wc -l < "$WORK/texts")

# req.py FORM OUT I [J]: a request for texts I (and J, of the same length:
# a request of two) into OUT; FORM json, or bin (the binary extension both
# ways: the JSON's length on stdout)
cat > "$WORK/req.py" <<'PY'
import json, os, struct, sys
form, out, idx = sys.argv[1], sys.argv[2], [int(i) for i in sys.argv[3:]]
texts = open(os.path.join(os.path.dirname(sys.argv[0]), "texts")).read().split("\n")
t = [texts[i].encode() for i in idx]
inp = {"name": "text", "datatype": "BYTES", "shape": [len(t), 1]}
outs = [{"name": "kind"}, {"name": "tags"}]
if form == "json":
    inp["data"] = [[s.decode()] for s in t]
    open(out, "w").write(json.dumps({"inputs": [inp], "outputs": outs}))
    sys.exit(0)
raw = b"".join(struct.pack("<I", len(s)) + s for s in t)
inp["parameters"] = {"binary_data_size": len(raw)}
head = json.dumps({"inputs": [inp], "outputs": outs,
                   "parameters": {"binary_data_output": True}}).encode()
open(out, "wb").write(head + raw)
print(len(head))
PY
# ans.py FILE [JSON_LEN]: an answer's samples, a line each: "kind" as the
# hex of its float32 values, "tags" as integers; checks the shapes
cat > "$WORK/ans.py" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = int(sys.argv[2]) if len(sys.argv) > 2 else len(raw)
resp, pos, out = json.loads(raw[:n]), n, {}
for o in resp["outputs"]:
    size = o.get("parameters", {}).get("binary_data_size")
    fmt = {"FP32": "f", "INT64": "q"}[o["datatype"]]
    if size is None:
        vals = o["data"]
    else:
        vals = list(struct.unpack("<%d%s" % (size // struct.calcsize(fmt), fmt), raw[pos:pos + size]))
        pos += size
    out[o["name"]] = (o["shape"], vals)
assert pos == len(raw), (pos, len(raw))
(ks, kind), (ts, tags) = out["kind"], out["tags"]
b, L = ks[0], ks[1]
assert ks == [b, L, 3] and ts == [b, L] and len(kind) == b * L * 3 and len(tags) == b * L, out
for i in range(b):
    k = kind[i * L * 3:(i + 1) * L * 3]
    print(json.dumps({"kind": struct.pack("<%df" % len(k), *k).hex(),
                      "tags": tags[i * L:(i + 1) * L]}))
PY
post_json() {   # post_json BODY OUT: the answer to a JSON request, decoded
    local c
    c=$(curl -s -o "$2.raw" -w '%{http_code}' -X POST --data-binary @"$1" \
        "$URL/v2/models/tagger/infer")
    [ "$c" = 200 ] && $PY "$WORK/ans.py" "$2.raw" > "$2"
}
post_bin() {    # post_bin BODY JSON_LEN OUT: the answer to a binary request, decoded
    local c n
    c=$(curl -s -D "$3.head" -o "$3.raw" -w '%{http_code}' -X POST \
        -H "Inference-Header-Content-Length: $2" -H 'Content-Type: application/octet-stream' \
        --data-binary @"$1" "$URL/v2/models/tagger/infer")
    [ "$c" = 200 ] || return 1
    n=$(tr -d '\r' < "$3.head" | sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: //p')
    $PY "$WORK/ans.py" "$3.raw" "$n" > "$3"
}

check "mock cluster up" start_mock in:1 out:1 dlq:1
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# Batches wait 5 ms for requests (no eager runs); dense layers on
# OpenBLAS, whose results depend on a batch's rows without batch_invariant.
openblas() { DLSERVE_CPU_GEMM=openblas "$@"; }
check "the daemon serves tagger" openblas start_daemon text \
    --models "$WORK/repo" --set models.watch=false --set batching.batch_invariant=true \
    --set batching.eager=false --set batching.max_queue_delay_us=5000 \
    --set kafka.brokers="$BOOT" --set kafka.input_topics=in --set kafka.output_topic=out \
    --set kafka.dead_letter_topic=dlq

check "metadata: text BYTES [-1, 1], max_length 12; kind [-1, -1, 3], tags INT64 [-1, -1]" \
    test "$(code GET /v2/models/tagger)" = 200
check "... as said" $PY - "$WORK/body" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1, 1],
                        "parameters": {"max_length": 12}}], m
assert m["outputs"] == [{"name": "kind", "datatype": "FP32", "shape": [-1, -1, 3]},
                        {"name": "tags", "datatype": "INT64", "shape": [-1, -1]}], m
PY
check "config: TYPE_STRING [1] with max_length 12; kind [-1, 3], tags TYPE_INT64 [-1]" \
    test "$(code GET /v2/models/tagger/config)" = 200
check "... as said" $PY - "$WORK/body" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
i = c["input"][0]
assert (i["name"], i["data_type"], i["dims"], i["max_length"]) == \
    ("text", "TYPE_STRING", [1], 12), i
assert [(o["name"], o["data_type"], o["dims"]) for o in c["output"]] == \
    [("kind", "TYPE_FP32", [-1, 3]), ("tags", "TYPE_INT64", [-1])], c["output"]
PY

# Each text alone, one request at a time: the reference answers.
base() {
    local i
    for i in $(seq 0 $((N - 1))); do
        $PY "$WORK/req.py" json "$WORK/r$i.json" "$i" && post_json "$WORK/r$i.json" "$WORK/base/$i" ||
            return 1
    done
}
check "$N texts of lengths 1 to 12, one at a time" base
check "... each answered at its own length" $PY - "$WORK/texts" "$WORK/base" <<'PY'
import json, sys
texts = open(sys.argv[1]).read().split("\n")[:-1]
for i, t in enumerate(texts):
    a = json.loads(open("%s/%d" % (sys.argv[2], i)).read())
    assert len(a["tags"]) == len(t) and len(a["kind"]) == 8 * 3 * len(t), (t, a)
    assert all(0 <= g < 3 for g in a["tags"]), a
PY

# The same texts all at once, JSON and binary, and pairs of a length in
# one request: each answer its text's, bit for bit.
for i in $(seq 0 $((N - 1))); do
    $PY "$WORK/req.py" bin "$WORK/c$i.bin" "$i" > "$WORK/c$i.len"
    [ $((i % 2)) = 1 ] || $PY "$WORK/req.py" json "$WORK/p$i.json" "$i" $((i + 1))
done
stats() { curl -sf "$URL/v2/models/tagger/stats" > "$1"; }
concurrent() {
    local i jobs=()
    rm -f "$WORK/got/"*
    for i in $(seq 0 $((N - 1))); do
        post_json "$WORK/r$i.json" "$WORK/got/j$i" &
        jobs+=($!)
        post_bin "$WORK/c$i.bin" "$(cat "$WORK/c$i.len")" "$WORK/got/b$i" &
        jobs+=($!)
        if [ $((i % 2)) = 0 ]; then
            post_json "$WORK/p$i.json" "$WORK/got/p$i" &
            jobs+=($!)
        fi
    done
    wait "${jobs[@]}"   # not the daemon's, nor the mock cluster's
}
# same: every answer of the concurrent phase is its texts' reference
same() {
    $PY - "$WORK/base" "$WORK/got" "$N" <<'PY'
import os, sys
base, got, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ref = [open("%s/%d" % (base, i)).read() for i in range(n)]
for i in range(n):
    for f in ("j%d" % i, "b%d" % i):
        assert open(os.path.join(got, f)).read() == ref[i], (f, "differs")
    if i % 2 == 0:
        assert open(os.path.join(got, "p%d" % i)).read() == ref[i] + ref[i + 1], ("p%d" % i)
PY
}
# several: batches of three samples or more ran between the statistics
# (the requests hold one or two: several requests a batch); prints them
several() {
    $PY - "$WORK/before.json" "$WORK/after.json" <<'PY'
import json, sys
sizes = [{b["batch_size"]: b["compute_infer"]["count"]
          for b in json.load(open(f))["model_stats"][0]["batch_stats"]} for f in sys.argv[1:3]]
ran = {k: v - sizes[0].get(k, 0) for k, v in sorted(sizes[1].items()) if v > sizes[0].get(k, 0)}
print(" ".join("%dx%d" % kv for kv in ran.items()))
sys.exit(0 if any(k > 2 for k in ran) else 1)
PY
}
# mixed: the concurrent phase until batches of several requests formed (3
# tries); MIXED_SAME: whether every try answered as the references
mixed() {
    local try
    MIXED_SAME=true
    for try in 1 2 3; do
        stats "$WORK/before.json" && concurrent && stats "$WORK/after.json" || return 1
        same || MIXED_SAME=false
        if SIZES=$(several); then
            [ "$try" -eq 1 ] || echo "# batches of several requests at try $try"
            return 0
        fi
    done
    return 1
}
check "$N texts as JSON, as binary and in pairs, all at once: batched together" mixed
echo "# batches run (samples x batches): ${SIZES:-}"
check "... every answer its text's alone, bit for bit, at its own length" $MIXED_SAME

# Labels and classifications of positions.
printf '{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["%s"]}],"outputs":[{"name":"tags","parameters":{"labels":true}},{"name":"kind","parameters":{"classification":2}}]}' \
    "$(sed -n 12p "$WORK/texts")" > "$WORK/lab.json"
check "labels of the crf's tags and the top 2 classes of each position" \
    test "$(code POST /v2/models/tagger/infer --data-binary @"$WORK/lab.json")" = 200
check "... the tags' labels, and the classes' scores" $PY - "$WORK/body" "$WORK/base/11" <<'PY'
import json, struct, sys
r, ref = json.load(open(sys.argv[1])), json.loads(open(sys.argv[2]).read())
names = ["lower", "upper", "other"]
tags, kind = r["outputs"]
L = len(ref["tags"])
assert tags["datatype"] == "BYTES" and tags["shape"] == [1, L], tags
assert tags["data"] == [names[g] for g in ref["tags"]], (tags, ref)
assert kind["datatype"] == "BYTES" and kind["shape"] == [1, L, 2], kind
scores = struct.unpack("<%df" % (3 * L), bytes.fromhex(ref["kind"]))
for t in range(L):
    p = scores[3 * t:3 * t + 3]
    top = max(range(3), key=lambda c: (p[c], -c))
    score, index, label = kind["data"][2 * t].split(":")
    assert (int(index), label) == (top, names[top]), (t, kind["data"], p)
    assert struct.pack("<f", float(score)) == struct.pack("<f", p[top]), (score, p)
PY

# Refusals: 400, naming the input, nothing computed.
refused() {   # refused BODY_FILE NEEDLE [curl args...]
    local c f=$1 needle=$2; shift 2
    c=$(code POST /v2/models/tagger/infer --data-binary @"$f" "$@")
    [ "$c" = 400 ] && grep -qF -- "$needle" "$WORK/body" || { echo "# $c $(cat "$WORK/body")"; return 1; }
}
text_req() { printf '{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":[%s]}]}' "$1" > "$WORK/bad.json"; }
text_req '"abcdefghijklm"'
check "a text of 13 bytes is refused" refused "$WORK/bad.json" "input 'text': 13 tokens, above max_length 12"
text_req '""'
check "an empty text is refused" refused "$WORK/bad.json" "input 'text': the text has no tokens"
text_req '7'
check "a number for a text is refused" refused "$WORK/bad.json" "inputs[0].data[0] must be a string (BYTES)"
printf '{"inputs":[{"name":"text","datatype":"INT64","shape":[1,2],"data":[97,98]}]}' > "$WORK/bad.json"
check "ids for the text are refused" refused "$WORK/bad.json" \
    "input 'text': datatype INT64 does not fit model 'tagger', which takes BYTES"
# binary BYTES whose lengths do not add up
bad_bin() {   # bad_bin SIZE HEX: shape [1], binary_data_size SIZE, the bytes HEX
    local head
    head=$(printf '{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"parameters":{"binary_data_size":%d}}]}' "$1")
    { printf '%s' "$head"; $PY -c 'import sys; sys.stdout.buffer.write(bytes.fromhex(sys.argv[1]))' "$2"; } \
        > "$WORK/bad.bin"
    HEAD_LEN=${#head}
}
bad_bin 8 0900000061626364
check "a binary text longer than its bytes is refused" refused "$WORK/bad.bin" \
    "('text') binary data: BYTES element 0 of 1 is 9 bytes long" \
    -H "Inference-Header-Content-Length: $HEAD_LEN"
bad_bin 7 02000000616263
check "binary texts that leave bytes over are refused" refused "$WORK/bad.bin" \
    "its 1 BYTES elements take 6 bytes, but binary_data_size is 7" \
    -H "Inference-Header-Content-Length: $HEAD_LEN"
bad_bin 2 0100
check "a binary text without its 4-byte length is refused" refused "$WORK/bad.bin" \
    "BYTES element 0 of 1 has no 4-byte length" -H "Inference-Header-Content-Length: $HEAD_LEN"
check "the daemon still answers the same after the refusals" post_json "$WORK/r5.json" "$WORK/again"
check "... alike" cmp -s "$WORK/again" "$WORK/base/5"

# Kafka: text records (one of two texts of different lengths) answered
# with the HTTP values and the crf's labels; an over-long text and a
# malformed one are dead letters of kind "input".
check "the daemon joins its Kafka group" wait_for 30 grep -q "assigned [1-9]" "$LOG"
$PY - "$WORK/texts" <<'PY' | kcat -b "$BOOT" -P -t in -K'|'
import json, sys
texts = open(sys.argv[1]).read().split("\n")[:-1]
rec = lambda key, data: print("%s|%s" % (key, json.dumps({"id": key, "model": "tagger",
    "inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(data)], "data": data}]})))
for i in (0, 7, 23):
    rec("t-%d" % i, [texts[i]])
rec("t-3-20", [texts[3], texts[20]])
rec("t-long", ["abcdefghijklm"])
rec("t-number", [5])
PY
check "4 outputs" collect out 4 "$WORK/kout" --timeout 60
check "2 dead letters" collect dlq 2 "$WORK/kdlq" --timeout 60
check "records answer the HTTP values, the crf's tags as labels" \
    $PY - "$WORK/kout" "$WORK/base" <<'PY'
import json, struct, sys
names = ["lower", "upper", "other"]
got = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, _h, value = line.rstrip("\n").split("\t", 5)
    got[key] = json.loads(value)
def ref(i):
    return json.loads(open("%s/%d" % (sys.argv[2], i)).read())
def same(values, tags, r):
    flat = [v for pos in values for v in pos]
    assert struct.pack("<%df" % len(flat), *flat).hex() == r["kind"], (values, r)
    assert tags == [names[g] for g in r["tags"]], (tags, r)
for i in (0, 7, 23):
    r = got["t-%d" % i]
    assert r["model"] == "tagger" and r["output"] == "kind", r
    same(r["values"], r["outputs"]["tags"], ref(i))
r = got["t-3-20"]
for s, i in enumerate((3, 20)):
    same(r["values"][s], r["outputs"]["tags"][s], ref(i))
PY
check "... the bad records are dead letters of kind input, naming the input" \
    $PY - "$WORK/kdlq" <<'PY'
import sys
why = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, hdrs, _v = line.rstrip("\n").split("\t", 5)
    h = dict(kv.split("=", 1) for kv in hdrs.split(";") if kv)
    assert h["dlserve-error-kind"] == "input", h
    why[key] = h["dlserve-error"]
assert "input 'text': 13 tokens, above max_length 12" in why["t-long"], why
assert "must be a string (BYTES)" in why["t-number"], why
PY
check "the daemon stops cleanly" stop_daemon
finish
