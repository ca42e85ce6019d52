#!/usr/bin/env bash
# Sequence models from PyTorch's ONNX export, served: the 2-layer
# bidirectional LSTM classifier and the masked transformer classifier of
# tests/py/onnx_models.py (ids over a dynamic time axis), imported with
# --max-length 16, answer PyTorch's outputs to 1e-4 over HTTP for 32
# samples of mixed lengths (1 to 16) sent at once, one request each, so
# that the batcher mixes lengths; and over Kafka, the same samples as
# records (mock cluster, kcat), answered with the same values. And a GPT
# exported from PyTorch (tests/py/gen_onnx.py) served from its model.onnx
# beside a model.json of only a "generate" block: /generate answers
# PyTorch's greedy decoding of each prompt, its text and finish reason.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

X=$WORK/x
mkdir -p "$X" "$WORK/repo" "$WORK/ans"
$PY "$SRC/tests/py/onnx_models.py" sequence "$X" > "$WORK/export.log" 2>&1 ||
    sed 's/^/# /' "$WORK/export.log"
MODELS="seq_lstm seq_tx"
for m in $MODELS; do
    "$DLSERVE" --import "$X/$m.onnx" --models "$WORK/repo" --name $m --max-length 16 \
        > /dev/null 2> "$WORK/imp.err" || sed 's/^/# /' "$WORK/imp.err"
    check "$m: exported by PyTorch and imported" test -s "$WORK/repo/$m/1/model.safetensors"
done

$PY "$SRC/tests/py/gen_onnx.py" "$WORK/gpt" --max-tokens 8 > "$WORK/gpt.log" 2>&1 ||
    sed 's/^/# /' "$WORK/gpt.log"
cp -r "$WORK/gpt/gpt" "$WORK/repo/"

check "mock cluster up" start_mock in:2 out:1 dlq:1
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "the daemon serves both" start_kafka_daemon srv --set models.watch=false \
    --set batching.max_queue_delay_us=5000 --set kafka.input_topics=in \
    --set kafka.output_topic=out --set kafka.dead_letter_topic=dlq

# answers M: the 32 samples of $X/M.b32.jsonl as one request each, all at
# once; their outputs "y" gathered into one answer ($WORK/ans/M.json).
answers() {
    local m=$1 i=0 pids=()
    while read -r line; do
        $PY -c 'import json,sys; ids=json.loads(sys.argv[1])["ids"]
print(json.dumps({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [1, len(ids)],
                              "data": ids}]}))' "$line" > "$WORK/ans/$m.$i.req"
        curl -s -o "$WORK/ans/$m.$i.json" -X POST -H 'Content-Type: application/json' \
            --data-binary "@$WORK/ans/$m.$i.req" "$URL/v2/models/$m/infer" &
        pids+=($!)
        i=$((i + 1))
    done < "$X/$m.b32.jsonl"
    wait "${pids[@]}"
    $PY - "$WORK/ans" "$m" "$i" > "$WORK/ans/$m.json" <<'PY'
import json, sys
rows = []
for i in range(int(sys.argv[3])):
    d = json.load(open("%s/%s.%d.json" % (sys.argv[1], sys.argv[2], i)))
    y = [o for o in d["outputs"] if o["name"] == "y"][0]
    rows.append(y["data"])
print(json.dumps({"outputs": [{"name": "y", "datatype": "FP32",
                               "shape": [len(rows), len(rows[0])], "data": sum(rows, [])}]}))
PY
}
for m in $MODELS; do
    answers $m
    check "$m over HTTP: 32 samples of mixed lengths answer PyTorch's outputs (1e-4)" \
        $PY "$SRC/tests/py/onnx_check.py" answer "$WORK/ans/$m.json" "$X/$m.b32.json"
done

# Kafka: the same samples as records, keyed by model and index.
for m in $MODELS; do
    $PY - "$X/$m.b32.jsonl" "$m" <<'PY'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    ids = json.loads(line)["ids"]
    key = "%s-%d" % (sys.argv[2], i)
    print("%s|%s" % (key, json.dumps({"id": key, "model": sys.argv[2], "inputs": [
        {"name": "ids", "datatype": "INT64", "shape": [1, len(ids)], "data": ids}]})))
PY
done | kcat -b "$BOOT" -P -t in -K'|'
check "64 output records" collect out 64 "$WORK/kout" --timeout 60
for m in $MODELS; do
    $PY - "$WORK/kout" "$m" > "$WORK/k$m.json" <<'PY'
import json, sys
got = {}
for line in open(sys.argv[1]):
    key, _p, _o, _t, _h, value = line.rstrip("\n").split("\t", 5)
    got[key] = json.loads(value)
rows = []
for i in range(32):
    r = got["%s-%d" % (sys.argv[2], i)]
    v = r["values"]
    rows.append(v[0] if isinstance(v[0], list) else v)
print(json.dumps({"outputs": [{"name": "y", "datatype": "FP32",
                               "shape": [len(rows), len(rows[0])], "data": sum(rows, [])}]}))
PY
    check "$m over Kafka: the records answer PyTorch's outputs (1e-4)" \
        $PY "$SRC/tests/py/onnx_check.py" answer "$WORK/k$m.json" "$X/$m.b32.json"
done
check "gpt from model.onnx: /generate answers PyTorch's greedy decoding" \
    $PY - "$URL" "$WORK/gpt/prompts.json" "$WORK/gpt/ref.txt" <<'PY'
import json, sys, urllib.request
url, prompts, ref = sys.argv[1], json.load(open(sys.argv[2])), open(sys.argv[3]).readlines()

def text_of(ids):
    """The daemon's text of byte ids: 0 is padding, a byte that starts no
    UTF-8 character is U+FFFD."""
    b, out, i = bytes(i for i in ids if i), "", 0
    while i < len(b):
        for n in (1, 2, 3, 4):
            try:
                out += b[i:i + n].decode("utf-8")
                i += n
                break
            except UnicodeDecodeError:
                pass
        else:
            out += "\ufffd"
            i += 1
    return out

for p, line in zip(prompts, ref):
    finish, *ids = line.split()
    ids = [int(i) for i in ids]
    want = text_of(ids[:-1] if finish == "stop" else ids)
    req = urllib.request.Request(url + "/v2/models/gpt/generate", json.dumps(
        {"text_input": p, "parameters": {"max_tokens": 8}}).encode(),
        {"Content-Type": "application/json"})
    got = json.load(urllib.request.urlopen(req, timeout=60))
    if got["text_output"] != want or got["finish_reason"] != finish:
        sys.exit("prompt %r: %r (%s), PyTorch %r (%s)" % (p, got["text_output"],
                 got["finish_reason"], want, finish))
print("%d prompts as PyTorch decodes them" % len(prompts))
PY
check "the daemon stops cleanly" stop_daemon
finish
