#!/usr/bin/env bash
# Content codings and large bodies over real HTTP: request bodies sent
# with Content-Encoding gzip or deflate (JSON and the binary extension,
# whose Inference-Header-Content-Length counts the inflated bytes), the
# body limit applied to the inflated size (a gzip bomb is a 413 and the
# daemon's memory stays flat), 415 for other codings, 400 naming the
# coding for a corrupt body; answers gzip'ed when Accept-Encoding asks and
# they are over 1 KiB, with Vary; and a 40 MB body sent whole by Python's
# urllib against the default 8 MiB limit reads its 413.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
REQ=$SRC/tests/py/make_request.py
PY=/usr/bin/python3
REPO=$WORK/models
INFER=/v2/models/fashion-mlp/infer
make_repo "$REPO"
check "a trained version to serve" test -s "$REPO/fashion-mlp/1/model.safetensors"
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# The answers to a body sent plain, gzip'ed and deflated are compared byte
# for byte: batch_invariant (set, because that relies on it)
# keeps them the same bits whichever batch each request ran in.
start_daemon coding --models "$REPO" --set batching.batch_invariant=true
check "daemon starts" test -n "$PORT"

# ---- request bodies ----
$PY "$REQ" 0 8 > "$WORK/req.json"
gzip -c "$WORK/req.json" > "$WORK/req.json.gz"
$PY -c 'import sys, zlib; sys.stdout.buffer.write(zlib.compress(open(sys.argv[1], "rb").read()))' \
    "$WORK/req.json" > "$WORK/req.json.zz"
check "a plain body: 200" test "$(code POST $INFER --data-binary @"$WORK/req.json")" = 200
cp "$WORK/body" "$WORK/plain.out"
check "a gzip body: 200" test "$(code POST $INFER -H 'Content-Encoding: gzip' \
    --data-binary @"$WORK/req.json.gz")" = 200
check "the gzip body's answer is the plain one's" cmp -s "$WORK/body" "$WORK/plain.out"
check "a deflate (zlib) body: 200" test "$(code POST $INFER -H 'Content-Encoding: deflate' \
    --data-binary @"$WORK/req.json.zz")" = 200
check "the deflate body's answer is the plain one's" cmp -s "$WORK/body" "$WORK/plain.out"
check "identity is a plain body: 200" test "$(code POST $INFER -H 'Content-Encoding: identity' \
    --data-binary @"$WORK/req.json")" = 200

$PY "$REQ" 0 8 --binary --json-length "$WORK/jlen" > "$WORK/req.bin"
gzip -c "$WORK/req.bin" > "$WORK/req.bin.gz"
check "the binary extension, gzip'ed (header length of the inflated body): 200" \
    test "$(code POST $INFER -H 'Content-Encoding: gzip' \
        -H "Inference-Header-Content-Length: $(cat "$WORK/jlen")" \
        --data-binary @"$WORK/req.bin.gz")" = 200
check "the binary body's classes are the plain one's" $PY - "$WORK/body" "$WORK/plain.out" <<'PYEOF'
import json, sys
def classes(f):
    return [o["data"] for o in json.load(open(f))["outputs"] if o["name"] == "class"]
assert classes(sys.argv[1]) == classes(sys.argv[2]), (classes(sys.argv[1]), classes(sys.argv[2]))
PYEOF

check "an unknown coding: 415" test "$(code POST $INFER -H 'Content-Encoding: br' \
    --data-binary @"$WORK/req.json")" = 415
check "the 415 names the coding" grep -q "'br' is not supported" "$WORK/body"
check "a body that is not gzip: 400" test "$(code POST $INFER -H 'Content-Encoding: gzip' \
    --data-binary @"$WORK/req.json")" = 400
check "the 400 names gzip" grep -q 'not valid gzip' "$WORK/body"
head -c 300 "$WORK/req.json.gz" > "$WORK/cut.gz"
check "a gzip body cut short: 400" test "$(code POST $INFER -H 'Content-Encoding: gzip' \
    --data-binary @"$WORK/cut.gz")" = 400
check "the 400 says it ends early" grep -q 'gzip.*ends early' "$WORK/body"
check "the daemon still serves after them" test "$(code GET /v2/health/live)" = 200

# ---- the limit counts inflated bytes: a gzip bomb ----
# 1,024 gzip members of 1 MiB of zeros: about 1 MB that inflates to 1 GiB
head -c 1048576 /dev/zero | gzip -9 -c > "$WORK/member.gz"
for _ in $(seq 1024); do cat "$WORK/member.gz"; done > "$WORK/bomb.gz"
rss() { curl -s "$URL/metrics" | sed -n 's/^process_resident_memory_bytes \([0-9.e+]*\)$/\1/p'; }
before=$(rss)
check "the bomb: about 1 MB on the wire" test "$(stat -c %s "$WORK/bomb.gz")" -lt 2000000
check "a gzip bomb (1 GiB inflated): 413" test "$(code POST $INFER -H 'Content-Encoding: gzip' \
    --data-binary @"$WORK/bomb.gz")" = 413
check "the 413 names the limit" grep -q max_body_bytes "$WORK/body"
after=$(rss)
check "memory stays flat ($before -> $after bytes)" \
    $PY -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(b - a > 64e6)' \
    "$before" "$after"
head -c 9000000 /dev/zero | gzip -c > "$WORK/over.gz"
check "9 MB inflated from 9 kB (limit 8 MiB): 413" \
    test "$(code POST $INFER -H 'Content-Encoding: gzip' --data-binary @"$WORK/over.gz")" = 413

# ---- answers ----
check "metrics with Accept-Encoding: gzip: compressed" \
    test "$(curl -s -o "$WORK/m.gz" -D "$WORK/h" -H 'Accept-Encoding: gzip' -w '%{http_code}' \
        "$URL/metrics")" = 200
check "Content-Encoding: gzip on it" grep -qi '^content-encoding: gzip' "$WORK/h"
check "Vary: Accept-Encoding on it" grep -qi '^vary: accept-encoding' "$WORK/h"
check "it inflates to the exposition" sh -c "gzip -dc '$WORK/m.gz' | grep -q '^nv_inference_count'"
check "curl --compressed reads the config" \
    test "$(code GET /v2/models/fashion-mlp/config --compressed)" = 200 -a \
         "$(jq_get 'd["name"]')" = fashion-mlp
curl -s -o /dev/null -D "$WORK/h" "$URL/metrics"
check "no Accept-Encoding: not compressed, still Vary" \
    sh -c "! grep -qi '^content-encoding' '$WORK/h' && grep -qi '^vary: accept-encoding' '$WORK/h'"
curl -s -o /dev/null -D "$WORK/h" -H 'Accept-Encoding: gzip;q=0, identity' "$URL/metrics"
check "gzip;q=0: not compressed" sh -c "! grep -qi '^content-encoding' '$WORK/h'"
curl -s -o /dev/null -D "$WORK/h" -H 'Accept-Encoding: gzip' "$URL/v2/health/live"
check "a small answer: not compressed" sh -c "! grep -qi '^content-encoding' '$WORK/h'"
curl -s -o "$WORK/bin.gz" -D "$WORK/h" -H 'Accept-Encoding: gzip' \
    -H "Inference-Header-Content-Length: $(cat "$WORK/jlen")" --data-binary @"$WORK/req.bin" \
    "$URL$INFER"
check "an answer's Inference-Header-Content-Length counts inflated bytes" $PY - "$WORK/h" \
    "$WORK/bin.gz" <<'PYEOF'
import gzip, json, sys
h = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip()
     for l in open(sys.argv[1]) if ":" in l}
raw = open(sys.argv[2], "rb").read()
body = gzip.decompress(raw) if h.get("content-encoding") == "gzip" else raw
n = int(h.get("inference-header-content-length", len(body)))
json.loads(body[:n])
PYEOF

# ---- a body far over the limit, sent whole before reading ----
check "urllib sends 40 MB (limit 8 MiB) and reads the 413" \
    $PY "$SRC/tests/serve/http_edges.py" "$PORT" urllib_413_size 40000000
check "the daemon still serves after it" test "$(code GET /v2/health/live)" = 200
check "stops cleanly" stop_daemon
finish
