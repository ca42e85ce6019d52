#!/usr/bin/env bash
# Triton's clients, unchanged: the classification extension, statistics of
# every model (idle ones with zero counts), request priority and the
# refused sequence parameters (tests/serve/triton_client.py, written from
# Triton's documents), and a model's "serving" block in model.json: shown
# by /v2/models/{m}/config and /status, applied by the batcher (a
# high-priority request overtakes a queue of low-priority ones), reloaded
# with the model, and a bad block refused while the loaded version serves
# on. Over real HTTP with curl and python3.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
PY=/usr/bin/python3
REPO=$WORK/models
make_repo "$REPO"
check "a trained version to serve" test -s "$REPO/fashion-mlp/1/model.safetensors"
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

# copy_model NAME SERVING_JSON: fashion-mlp's version 1 as model NAME, its
# model.json with the serving block given ("" for none).
copy_model() {
    mkdir -p "$REPO/$1/1"
    cp "$REPO/fashion-mlp/1/model.safetensors" "$REPO/$1/1/"
    $PY - "$REPO/fashion-mlp/model.json" "$REPO/$1/model.json" "$1" "$2" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = sys.argv[3]
if sys.argv[4]:
    m["serving"] = json.loads(sys.argv[4])
json.dump(m, open(sys.argv[2], "w"), indent=2)
PYEOF
}
PRIO='{"max_batch_size": 512, "max_queue_delay_us": 0, "preferred_batch_size": [256],
       "max_queue_size": 100000, "instances": 1, "priority_levels": 2,
       "default_priority_level": 2, "default_timeout_us": 0}'
copy_model fashion-idle ""
copy_model fashion-prio "$PRIO"
# fashion-block: a slow model (fashion-resnet, briefly trained) on instance
# 0 alone, as fashion-prio is, whose batch of 4096 keeps that instance busy
# for about a second (on one thread) while the priority check below fills
# fashion-prio's queue.
mkdir -p "$REPO/fashion-block"
$PY - "$SRC/models/fashion-resnet/model.json" "$REPO/fashion-block/model.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "fashion-block"
m["serving"] = {"max_batch_size": 4096, "max_queue_delay_us": 0, "instances": 1}
json.dump(m, open(sys.argv[2], "w"), indent=2)
PYEOF
"$DLSERVE" --train "$REPO/fashion-block" --limit 64 --epochs 1 --batch-size 32 --threads 1 \
    --no-progress > /dev/null 2>&1
check "a version of the slow model" test -s "$REPO/fashion-block/1/model.safetensors"

# Requests go through the queue (direct_max_us 0: no run on the HTTP thread).
# One inference thread an instance, whatever the cores: fashion-block's
# batch then takes as long on any machine as on two cores, and both
# instances compute alike. triton_client.py ranks the classes of one
# request by the probabilities another request answered: batch_invariant
# (set, because that relies on it) gives them the same bits on
# either instance, whatever batch each ran in.
start_daemon triton --models "$REPO" --set models.instances=2 --set models.threads=1 \
    --set batching.direct_max_us=0 --set batching.max_batch_size=64 \
    --set batching.batch_invariant=true
check "daemon starts" test -n "$PORT"

check "Triton's client: classification, statistics, parameters" $PY "$SRC/tests/serve/triton_client.py" "$URL"

# ---- the serving block: configuration and status ----
check "GET .../fashion-prio/config is 200" test "$(code GET /v2/models/fashion-prio/config)" = 200
check "config: the serving block's settings" $PY - "$WORK/body" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["max_batch_size"] == 512, c["max_batch_size"]
db = c["dynamic_batching"]
assert db["preferred_batch_size"] == [256] and db["max_queue_delay_microseconds"] == 0, db
assert db["priority_levels"] == 2 and db["default_priority_level"] == 2, db
assert db["default_queue_policy"]["max_queue_size"] == 100000, db
assert c["instance_group"][0]["count"] == 1, c["instance_group"]
assert c["version_policy"] == {"latest": {"num_versions": 1}}, c["version_policy"]
o = {x["name"]: x for x in c["output"]}
assert o["label"]["dims"] == [1] and o["label"]["reshape"] == {"shape": []}, o["label"]
PYEOF
check "config of a model without a block: the daemon's defaults" \
    test "$(code GET /v2/models/fashion-idle/config)" = 200 -a \
         "$(jq_get '(d["max_batch_size"], d["instance_group"][0]["count"], d["dynamic_batching"]["priority_levels"])')" = "(64, 2, 0)"
check "metadata: label shape [-1], as config's dims [1] reshaped to []" \
    test "$(code GET /v2/models/fashion-prio)" = 200 -a \
         "$(jq_get '[o["shape"] for o in d["outputs"] if o["name"] == "label"]')" = "[[-1]]"
check "/status shows the serving block" \
    test "$(code GET /status)" = 200 -a \
         "$(jq_get '[m["serving"].get("priority_levels") for m in d["models"] if m["name"] == "fashion-prio"]')" = "[2]"

# ---- priority under load: a high-priority request overtakes the queue ----
# Eight low-priority requests of 512 (fashion-prio's batch) and then a
# high-priority one wait in fashion-prio's queue together while instance 0,
# the only one fashion-prio runs on, computes fashion-block's batch of 4096
# (about a second). Once all nine are queued at once (seen in /status before
# that batch ends) priority alone decides: the high one runs next and all
# eight low ones complete after it; in arrival order none would. Judged
# without timing: an attempt where the nine were not seen queued together
# (the slow batch over first, on a loaded machine) is not judged, and is
# tried again, three attempts at most. The nine reach the queue within tens
# of milliseconds of each other.
check "a high-priority request completes before queued low-priority ones" $PY - "$URL" <<'PYEOF'
import gzip, http.client, json, sys, threading, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:]
LOWS = 8
done, lock = [], threading.Lock()
def send(tag, model, n, priority=None, sent=None):
    head = json.dumps({"inputs": [{"name": "input", "shape": [n, 1, 28, 28], "datatype": "UINT8",
                                   "parameters": {"binary_data_size": n * 784}}],
                       "outputs": [{"name": "class"}],
                       "parameters": {"priority": priority} if priority else {}}).encode()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=240)
    c.request("POST", "/v2/models/%s/infer" % model, head + raw[:n * 784],
              {"Inference-Header-Content-Length": str(len(head))})
    if sent:
        sent.set()
    r = c.getresponse()
    r.read()
    with lock:
        done.append((tag, r.status))
def queued():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("GET", "/status")
    s = json.loads(c.getresponse().read())
    return s["batcher"]["queued_samples"].get("fashion-prio", 0)
def blocking():
    with lock:
        return not any(t == "block" for t, _ in done)
for attempt in (1, 2, 3):
    del done[:]
    sent = threading.Event()
    block = threading.Thread(target=send, args=("block", "fashion-block", 4096), kwargs={"sent": sent})
    block.start()
    sent.wait(60)
    time.sleep(0.2)   # its batch starts before the low ones arrive
    lows = [threading.Thread(target=send, args=("low", "fashion-prio", 512, 2)) for _ in range(LOWS)]
    for t in lows:
        t.start()
    while blocking() and queued() < LOWS * 512:
        time.sleep(0.01)
    high = threading.Thread(target=send, args=("high", "fashion-prio", 512, 1))
    high.start()
    together = False
    while blocking() and not together:
        together = queued() == (LOWS + 1) * 512
        time.sleep(0.01)
    for t in [block] + lows + [high]:
        t.join()
    assert all(s == 200 for _, s in done), done
    order = [t for t, _ in done if t != "block"]
    after = len(order) - 1 - order.index("high")
    print("attempt %d: %s queued together behind the slow batch; low requests completed after "
          "the high one: %d of %d" % (attempt, "all nine" if together else "not all nine", after, LOWS))
    if together:
        break
assert together, "the nine requests never waited together in 3 attempts"
assert after == LOWS, (after, order)
PYEOF

# ---- reloads: a bad block is refused, the loaded version serves on ----
cp "$REPO/fashion-prio/model.json" "$WORK/prio.json"
$PY - "$REPO/fashion-prio/model.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["serving"]["max_batch_size"] = 0
json.dump(m, open(sys.argv[1], "w"))
PYEOF
check "load with a bad serving block: 400 naming the key, version 1 serves on" \
    test "$(code POST /v2/repository/models/fashion-prio/load)" = 400 -a \
         "$(jq_get '"serving.max_batch_size must be" in d["error"] and "keeps serving" in d["error"]')" = True
check "the refused model still answers with its settings" \
    test "$(code GET /v2/models/fashion-prio/config)" = 200 -a "$(jq_get 'd["max_batch_size"]')" = 512
check "the index says why" \
    test "$(code POST /v2/repository/index)" = 200 -a \
         "$(jq_get '[("serving.max_batch_size" in m["reason"], m["state"]) for m in d if m["name"] == "fashion-prio"]')" = "[(True, 'READY')]"
$PY - "$WORK/prio.json" "$REPO/fashion-prio/model.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["serving"]["max_batch_size"] = 256
json.dump(m, open(sys.argv[2], "w"))
PYEOF
mkdir -p "$REPO/fashion-prio/2"
cp "$REPO/fashion-prio/1/model.safetensors" "$REPO/fashion-prio/2/"
check "a new version loads with the block as it now is" \
    test "$(code POST /v2/repository/models/fashion-prio/load)" = 200 -a \
         "$(code GET /v2/models/fashion-prio/config)" = 200 -a "$(jq_get 'd["max_batch_size"]')" = 256

# ---- an unloaded model: Triton's UNAVAILABLE, with a reason ----
check "unload fashion-idle" test "$(code POST /v2/repository/models/fashion-idle/unload)" = 200
check "the index: UNAVAILABLE, reason unloaded" \
    test "$(code POST /v2/repository/index)" = 200 -a \
         "$(jq_get '[(m["state"], m["reason"]) for m in d if m["name"] == "fashion-idle"]')" = "[('UNAVAILABLE', 'unloaded')]"

check "the daemon stops cleanly" stop_daemon 30
finish
