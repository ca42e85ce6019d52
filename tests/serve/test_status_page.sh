#!/usr/bin/env bash
# The status page (GET /) in a real browser: headless Chromium, driven
# through the DevTools protocol by tests/serve/browser.py, against a daemon
# with a bearer token under HTTP and Kafka traffic (the Kafka mock cluster of
# kafka_tool). The rendered DOM must show the models, their versions and
# states (with why a version was refused), non-zero request counts, a row per
# Kafka partition with its lag, the dead letters and the training curves
# (with a chart of each output's metric for a model of several outputs),
# with no script error or Content-Security-Policy violation; the charts of
# errors by code, Kafka records in and out with their latency, CPU and
# memory, with round y-axis ticks and a hover readout; a partition never
# read shown as such; and, opened again, the history the daemon kept
# (GET /status/history) drawn at once. The screenshot is kept in
# $STATUS_PAGE_OUT (printed). Also: the token rule of the page and its
# files, their headers, and GET /status/training.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
CHROMIUM=$(command -v chromium) || {
    echo "SKIP: chromium is not installed (./scripts/test installs it)"
    exit 77
}
OUTDIR=${STATUS_PAGE_OUT:-$WORK/out}
mkdir -p "$OUTDIR"
TOKEN=page-secret
AUTH=(-H "Authorization: Bearer $TOKEN")

# fashion-mlp, 3 short epochs: a curve to draw.
mkdir -p "$WORK/repo/fashion-mlp"
cp "$SRC/models/fashion-mlp/model.json" "$WORK/repo/fashion-mlp/"
"$DLSERVE" --train "$WORK/repo/fashion-mlp" --epochs 3 --limit 2000 --threads 1 --no-progress \
    > /dev/null 2>&1
# A second model whose only version is corrupt: refused, with the reason.
mkdir -p "$WORK/repo/broken/1"
sed 's/"name": *"fashion-mlp"/"name": "broken"/' "$SRC/models/fashion-mlp/model.json" \
    > "$WORK/repo/broken/model.json"
echo "not safetensors" > "$WORK/repo/broken/1/model.safetensors"

check "mock cluster up" start_mock in:4 idle:1 out:4 dlq:4
trap 'touch "$WORK/stop"; kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "daemon joins the group" start_kafka_daemon page --set http.token=$TOKEN \
    --set models.watch=false --set kafka.input_topics=in,idle --set kafka.output_topic=out \
    --set kafka.dead_letter_topic=dlq --set kafka.default_model=fashion-mlp \
    --set kafka.consumer.session.timeout.ms=6000

# status EXPR: succeeds when EXPR holds on /status (d), read with the token.
status() {
    curl -s "${AUTH[@]}" "$URL/status" > "$WORK/status.json" &&
        $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
            "$WORK/status.json" "$1"
}
# body_is EXPR: EXPR holds on the JSON in $WORK/body (d).
body_is() {
    $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
        "$WORK/body" "$1"
}
# header NAME: the value of a header of the last `code` call ($WORK/headers).
header() {
    sed -n "s/^$1: *//Ip" "$WORK/headers" | tr -d '\r'
}

# ---- the token: ?token= opens the page only; its files need none ---------------
check "GET / without the token: 401" test "$(code GET /)" = 401
check "... saying how to pass it" grep -q '?token=' "$WORK/body"
check "GET /?token=wrong: 401" test "$(code GET '/?token=wrong')" = 401
check "GET /?token=TOKEN: 200" test "$(code GET "/?token=$TOKEN" -D "$WORK/headers")" = 200
check "... text/html" test "$(header Content-Type)" = "text/html; charset=utf-8"
check "... Content-Security-Policy: default-src 'self'" \
    test "$(header Content-Security-Policy)" = "default-src 'self'"
check "... Cache-Control: no-cache" test "$(header Cache-Control)" = no-cache
check "GET / with the bearer token: 200" test "$(code GET / "${AUTH[@]}")" = 200
check "the query token opens nothing else (/status?token=): 401" \
    test "$(code GET "/status?token=$TOKEN")" = 401
check "POST /: 405" test "$(code POST "/?token=$TOKEN")" = 405
code GET "/?token=$TOKEN" > /dev/null
refs=$(grep -o '\(href\|src\)="[^"]*"' "$WORK/body" | sed 's/.*="\(.*\)"/\1/')
check "the page references its files under ui/" test "$(echo "$refs" | grep -c '^ui/')" -eq 3
for ref in $refs; do
    check "GET /$ref without a token: 200" test "$(code GET "/$ref" -D "$WORK/headers")" = 200
    check "... with the page's Content-Security-Policy" \
        test "$(header Content-Security-Policy)" = "default-src 'self'"
done
check "/ui/status.js is text/javascript" \
    sh -c "curl -sI $URL/ui/status.js | grep -qi '^content-type: text/javascript; charset=utf-8'"
check "GET /ui/nosuch.js: 404" test "$(code GET /ui/nosuch.js)" = 404
check "GET /ui/index.html: 404 (the page is at / only)" test "$(code GET /ui/index.html)" = 404

# ---- GET /status/training: the served version's metrics.csv --------------------
check "GET /status/training without the token: 401" test "$(code GET /status/training)" = 401
check "GET /status/training: 200" test "$(code GET /status/training "${AUTH[@]}")" = 200
check "... fashion-mlp version 1, one row an epoch, as in metrics.csv" body_is \
    '[(m["name"], m["version"], [r[0] for r in m["rows"]], m["columns"][0]) for m in d["models"]] == [("fashion-mlp", 1, [1, 2, 3], "epoch")]'
csv=$WORK/repo/fashion-mlp/1/metrics.csv
cp "$csv" "$WORK/metrics.csv"
echo "4,nan,0.1,0.9,0.2,0.8,1000,1" >> "$csv"
code GET /status/training "${AUTH[@]}" > /dev/null
check "a value that is not a finite number is null" \
    body_is 'd["models"][0]["rows"][3][:3] == [4, None, 0.1]'
echo "5,0.5" >> "$csv"
code GET /status/training "${AUTH[@]}" > /dev/null
check "a ragged metrics.csv is reported with its file and line" \
    body_is '"metrics.csv:6: 2 fields" in d["models"][0]["error"]'
rm "$csv"
code GET /status/training "${AUTH[@]}" > /dev/null
check "a version without metrics.csv is left out" body_is 'd["models"] == []'
cp "$WORK/metrics.csv" "$csv"
code GET /status/training "${AUTH[@]}" > /dev/null
check "a model of one output: no outputs of its own" body_is 'd["models"][0]["outputs"] == []'
# A model of several outputs: two-tower's metrics.csv, trained here, in
# fashion-mlp's place (the page reads the columns the file names; kept
# for the page below).
$PY "$SRC/tests/py/make_two_tower.py" "$WORK/tt-data" --train 512 --test 128 > /dev/null
mkdir -p "$WORK/tt"
cp "$SRC/models/two-tower/model.json" "$WORK/tt/"
"$DLSERVE" --train "$WORK/tt" --data "$WORK/tt-data" --epochs 3 --threads 1 --no-progress \
    > /dev/null 2>&1
cp "$WORK/tt/1/metrics.csv" "$csv"
code GET /status/training "${AUTH[@]}" > /dev/null
check "two-tower's outputs, read from metrics.csv's header: click accuracy, rating rmse" \
    body_is 'd["models"][0]["outputs"] == [{"name": "click", "metric": "accuracy"},
                                          {"name": "rating", "metric": "rmse"}]'
check "... each output's curves, an epoch a row, as in metrics.csv" $PY -c '
import csv, json, sys
m = json.load(open(sys.argv[1]))["models"][0]
want = list(csv.DictReader(open(sys.argv[2])))
assert len(m["rows"]) == len(want) == 3, m
for c in ("click_train_accuracy", "click_test_accuracy", "rating_train_rmse",
          "rating_test_rmse", "click_test_loss", "rating_test_loss"):
    got = [r[m["columns"].index(c)] for r in m["rows"]]
    assert got == [float(w[c]) for w in want], (c, got)
    assert all(0 <= v <= 1 for v in got) or "accuracy" not in c, (c, got)' \
    "$WORK/body" "$csv"

# ---- traffic: HTTP requests and a Kafka stream ---------------------------------
$PY "$SRC/tests/py/make_request.py" 0 2 > "$WORK/req.json"
n_ok=0
for i in $(seq 40); do
    [ "$(code POST /v2/models/fashion-mlp/infer "${AUTH[@]}" -d @"$WORK/req.json")" = 200 ] &&
        n_ok=$((n_ok + 1))
done
check "40 HTTP requests answered" test $n_ok -eq 40
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count 300 --format json > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count 3 --bad badjson > /dev/null 2>&1
check "300 records served, 3 dead letters" wait_for 30 \
    status 'd["kafka"]["outputs"] == 300 and d["kafka"]["dead_letters"]["json"] == 3'
# Requests go on while the page is open, so that its rates move.
# One in five is for a model that does not exist: 404s for the errors chart.
(i=0; while [ ! -e "$WORK/stop" ]; do
    model=fashion-mlp; [ $((i++ % 5)) = 0 ] && model=nosuch
    curl -s -o /dev/null "${AUTH[@]}" "$URL/v2/models/$model/infer" -d @"$WORK/req.json"
    sleep 0.05
done) &
LOOP=$!

# ---- the page in Chromium ----------------------------------------------------
DOM=$OUTDIR/status-page.html SHOT=$OUTDIR/status-page.png CONSOLE=$OUTDIR/console.txt
rm -f "$DOM" "$SHOT" "$CONSOLE"
# The hover readout: the cursor moved over the right end of the rate chart.
HOVER="(() => { const c = document.getElementById('rate-chart'), r = c.getBoundingClientRect();
  c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.right - 12, clientY: r.top + 40}));
  const box = document.getElementById('readout');
  return {hidden: box.hidden, text: box.textContent}; })()"
check "the page renders in headless Chromium (4 polls, 5 partition rows, all charts)" \
    $PY "$SRC/tests/serve/browser.py" "$URL/?token=$TOKEN" --chromium "$CHROMIUM" \
    --dom "$DOM" --screenshot "$SHOT" --console "$CONSOLE" --timeout 40 \
    --then "$HOVER" --then-out "$WORK/hover.json" \
    --until "document.body.dataset.polls >= 4 &&
             document.querySelectorAll('#kafka-partitions tr.partition').length == 5 &&
             document.querySelectorAll('#training canvas').length == 4 &&
             ['errors-chart', 'cpu-chart', 'mem-chart', 'kafka-rate-chart',
              'kafka-latency-chart'].every((id) => document.getElementById(id).dataset.ticks)"
check "the hover readout names the time and each model's rate" $PY -c '
import json, re, sys
h = json.load(open(sys.argv[1]))
lines = h["text"].split("\n")
sys.exit(0 if not h["hidden"] and lines[0] in ("now",) + tuple("-%d s" % i for i in range(1000))
         and re.fullmatch(r"fashion-mlp: [0-9.,]+", lines[1]) else 1)' "$WORK/hover.json"
touch "$WORK/stop"
wait $LOOP
echo "screenshot: $SHOT"

# dom EXPR: EXPR holds on the rendered DOM: t[table id] lists the rows of
# each table's body ({"attrs": {...}, "cells": [text, ...]}), canvas[id] the
# attributes of each canvas with an id, html is the whole text, num() reads
# "1,234", round_ticks("0,2,4") whether ticks start at 0 and step by 1, 2
# or 5 times a power of ten.
dom() {
    $PY - "$DOM" "$1" <<'PYEOF'
import html.parser, math, sys
class Tables(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.t, self.rows, self.row, self.cell = {}, None, None, None
        self.canvas = {}
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "canvas" and ("id" in a or "data-output" in a):
            self.canvas[a.get("id") or "output:" + a["data-output"]] = a
        elif tag == "table":
            self.t[a.get("id")] = []
        elif tag == "tbody" and self.t:
            self.rows = list(self.t.values())[-1]
        elif tag == "tr" and self.rows is not None:
            self.row = {"attrs": a, "cells": []}
            self.rows.append(self.row)
        elif tag == "td" and self.row is not None:
            self.cell = ""
    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.row["cells"].append(self.cell.strip())
            self.cell = None
        elif tag == "tr":
            self.row = None
        elif tag == "tbody":
            self.rows = None
    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
def round_ticks(text):
    ts = [float(x) for x in text.split(",")]
    if len(ts) < 2 or ts[0] != 0:
        return False
    step = ts[1]
    mant = step / 10 ** math.floor(math.log10(step))
    return (any(abs(mant - m) < 1e-6 for m in (1, 2, 5)) and
            all(abs(b - a - step) <= 1e-9 * max(1, b) for a, b in zip(ts, ts[1:])))
text = open(sys.argv[1]).read()
p = Tables()
p.feed(text)
ok = eval(sys.argv[2], {"t": p.t, "canvas": p.canvas, "html": text, "round_ticks": round_ticks,
                        "num": lambda s: int(s.replace(",", ""))})
if not ok:
    print("not true on the DOM:", sys.argv[2], file=sys.stderr)
sys.exit(0 if ok else 1)
PYEOF
}
model_row='[r["cells"] for r in t["models"] if r["attrs"].get("data-model") == '
check "the DOM has a row per model" dom 'sorted(r["attrs"]["data-model"] for r in t["models"]) == ["broken", "fashion-mlp"]'
check "... fashion-mlp: version 1, READY" dom "${model_row}'fashion-mlp'][0][1:3] == ['1', 'READY']"
check "... with its requests counted (40 HTTP + 300 Kafka at least)" \
    dom "num(${model_row}'fashion-mlp'][0][3]) >= 340"
check "... and its inferences (2 an HTTP request, 1 a record)" \
    dom "num(${model_row}'fashion-mlp'][0][5]) >= 380"
check "... broken: UNAVAILABLE, saying why version 1 was refused" \
    dom "${model_row}'broken'][0][2] == 'UNAVAILABLE' and 'version 1 refused' in ${model_row}'broken'][0][7]"
check "a row per Kafka partition, with its lag" \
    dom 'sorted((r["cells"][0], num(r["cells"][1])) for r in t["kafka-partitions"]) == [("idle", 0)] + [("in", p) for p in range(4)] and all(num(r["cells"][5]) >= 0 for r in t["kafka-partitions"])'
check "... the partition never read says so (not -1)" \
    dom '[r["cells"][2:4] for r in t["kafka-partitions"] if r["cells"][0] == "idle"] == [["never read", "none"]] and "-1" not in [c for r in t["kafka-partitions"] for c in r["cells"]]'
check "the Kafka summary has the dead-letter total" \
    dom '"dead letters 3 " in html.replace("\u00b7", " ")'
check "y-axis ticks are round (0, then steps of 1, 2 or 5 times a power of ten)" \
    dom 'len(canvas) >= 9 and all(round_ticks(c["data-ticks"]) for c in canvas.values() if "data-ticks" in c)'
check "errors per second by code: a 404 line" \
    dom '"404" in canvas["errors-chart"]["data-labels"].split(",")'
for c in 'kafka-rate-chart:in,out' 'kafka-latency-chart:p50,p99' 'cpu-chart:cpu' 'mem-chart:rss'; do
    check "the ${c%%:*} panel draws ${c#*:}" \
        dom "canvas['${c%%:*}'].get('data-labels') == '${c#*:}' and 'data-ticks' in canvas['${c%%:*}']"
done
check "... high watermarks adding up to the 303 records" \
    dom 'sum(num(r["cells"][4]) for r in t["kafka-partitions"]) == 303'
check "the dead letters by reason: json 3" \
    dom '[r["cells"] for r in t["dead-letters"] if r["cells"][0] == "json"] == [["json", "3"]]'
check "the training curves of fashion-mlp version 1" \
    dom '"fashion-mlp version 1</h3>" in html and html.count("<canvas class=\"loss\"") == 1'
check "a chart of each output's metric, train and test" \
    dom '(canvas["output:click"]["data-labels"] == "click_train_accuracy,click_test_accuracy" and
          canvas["output:rating"]["data-labels"] == "rating_train_rmse,rating_test_rmse" and
          all("data-ticks" in canvas["output:" + o] for o in ("click", "rating")))'
check "no script error, failed load or CSP violation in the console" test ! -s "$CONSOLE"
[ -s "$CONSOLE" ] && cat "$CONSOLE"
check "a PNG screenshot, 1280 pixels wide" $PY -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
sys.exit(0 if b[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">I", b[16:20])[0] == 1280 and len(b) > 20000 else 1)' "$SHOT"

# ---- the history the daemon keeps: a reload draws it at once ---------------------
# A snapshot every 2 s: the checks below want 6 of them (10 s of history),
# which a fast machine may not have reached yet; waited for, 30 s at most.
history_spans() {
    curl -s "${AUTH[@]}" "$URL/status/history" |
        $PY -c 'import json,sys; sys.exit(0 if len(json.load(sys.stdin)["samples"]) >= 6 else 1)'
}
wait_for 30 history_spans
check "GET /status/history without the token: 401" test "$(code GET /status/history)" = 401
check "GET /status/history: 200" test "$(code GET /status/history "${AUTH[@]}")" = 200
check "... a snapshot every 2 s since start, with the page's counters" body_is '(
d["interval_s"] == 2 and len(d["samples"]) >= 5 and
all(b["t"] - a["t"] > 1 for a, b in zip(d["samples"], d["samples"][1:])) and
d["samples"][-1]["counts"]["fashion-mlp"] >= 340 and d["samples"][-1]["codes"]["404"] >= 1 and
d["samples"][-1]["kafka"]["in"] >= 303 and d["samples"][-1]["kafka"]["dead"] == 3 and
d["samples"][-1]["kafka"]["lag"]["idle/0"] == 0 and d["samples"][-1]["rss"] > 0 and
d["samples"][-1]["buckets"]["fashion-mlp"][-1][0] is None)'
check "opened again, the page draws the daemon's history at its first poll" \
    $PY "$SRC/tests/serve/browser.py" "$URL/?token=$TOKEN" --chromium "$CHROMIUM" \
    --dom "$WORK/again.html" --screenshot "$WORK/again.png" --console "$WORK/again.txt" \
    --timeout 40 --then "({...document.body.dataset})" --then-out "$WORK/again.json" \
    --until "document.body.dataset.polls >= 1 && document.getElementById('rate-chart').dataset.ticks"
check "... the samples it loaded span the daemon's past" $PY -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if int(d["loaded"]) >= 5 and int(d["span"]) >= 10 else 1)' "$WORK/again.json"
check "... with no script error" test ! -s "$WORK/again.txt"

check "the daemon stops cleanly" stop_daemon
finish
