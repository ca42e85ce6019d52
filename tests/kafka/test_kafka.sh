#!/usr/bin/env bash
# Kafka ingestion, at-least-once, against a librdkafka mock cluster that
# runs outside the daemon (kafka_tool mock): records fed with kafka_tool
# and kcat, outputs and dead letters read back, predictions checked
# against --predict; every malformed kind dead-lettered; backpressure; a
# rebalance; kill -9 in a stream of 20,000 records.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
IN=in OUT=out DLQ=dlq
# The mock keeps at most 5 MiB a partition (older records go): topics have
# partitions enough for what each scenario writes. A member that vanished
# holds its partitions for session.timeout.ms: 6 s here, not 45.
COMMON=(--set models.watch=false --set kafka.consumer.session.timeout.ms=6000
        --set kafka.consumer.heartbeat.interval.ms=500)
# The clean run's daemon answers image 7 in two records, which may run in
# batches of their own; they are compared bit for bit (same_answers):
# batch_invariant is set because that relies on it.
KARGS=(--set kafka.input_topics=$IN --set kafka.output_topic=$OUT
       --set kafka.dead_letter_topic=$DLQ --set kafka.group_id=clean "${COMMON[@]}"
       --set batching.batch_invariant=true)

make_repo "$WORK/repo"
check "mock cluster up" start_mock $IN:4 $OUT:4 $DLQ:8
trap 'touch "$WORK/rb.stop"; kill -9 ${PID:-} ${PID2:-} ${FEED:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
"$DLSERVE" --predict "$WORK/repo/fashion-mlp" "$DATA/t10k-images-idx3-ubyte.gz" \
    > "$WORK/predict.jsonl" 2>/dev/null

# predictions_match FILE: every output answers its image as --predict does:
# its class is the top of its own scores, and --predict's class that top or
# tied with it within tests/py/tolerance.py's bound (--predict computes on
# every core, the daemon on the cores less one: their sums differ in the
# last bits), --predict's score (4 decimals) the top score within it.
predictions_match() {
    PYTHONPATH=$SRC/tests/py $PY - "$1" "$WORK/predict.jsonl" <<'PYEOF'
import json, sys
from tolerance import ABS, REL, near_top
want = [json.loads(l) for l in open(sys.argv[2])]
n = bad = 0
for line in open(sys.argv[1]):
    key, part, off, ts, hdrs, value = line.rstrip("\n").split("\t", 5)
    o = json.loads(value.replace("\\t", "\t").replace("\\\\", "\\"))
    i = int(o["id"].split("-")[-1]) % 10000
    n += 1
    s, top = o["scores"], max(o["scores"])
    if s[o["class"]] != top or not near_top(s, want[i]["class"]) \
       or abs(top - want[i]["score"]) > 5e-5 + ABS + REL * top \
       or o["model"] != "fashion-mlp" or key != o["id"] or "dlserve-source-offset=" not in hdrs:
        bad += 1
        if bad <= 3:
            print("not --predict's answer:", o, want[i])
print(n, "outputs,", bad, "wrong")
sys.exit(1 if bad or n == 0 else 0)
PYEOF
}

# ---- a property librdkafka refuses stops start-up, naming file and line -------
printf '[kafka]\nbrokers = %s\n\n[kafka.consumer]\nsession.timeout.ms = soon\n' "$BOOT" \
    > "$WORK/bad.conf"
"$DLSERVE" --config "$WORK/bad.conf" --models "$WORK/repo" --port 0 2> "$WORK/bad.err"
rc=$?
check "a bad [kafka.consumer] property stops start-up ($rc)" test $rc -ne 0
check "... naming the file, the line and the property" \
    grep -q "bad.conf:5: Kafka property 'session.timeout.ms'" "$WORK/bad.err"

# ---- dlserve bounds librdkafka's fetches at 1 MB; a larger message.max.bytes
# (librdkafka wants a fetch to hold the largest message) is still taken -----
check "a [kafka.consumer] message.max.bytes over 1 MB is taken" start_kafka_daemon big \
    "${KARGS[@]}" --set kafka.group_id=big --set kafka.consumer.message.max.bytes=8000000
check "... and that daemon stops cleanly" stop_daemon

# ---- a clean run: JSON, data and binary records --------------------------
check "daemon joins the group" start_kafka_daemon clean "${KARGS[@]}"
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 1000 --format json > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 500 --start 1000 --format binary > /dev/null
# kcat: the {"id","data"} form, one record a line
$PY - "$DATA/t10k-images-idx3-ubyte.gz" > "$WORK/kcat.txt" <<'PYEOF'
import gzip, json, sys
raw = gzip.open(sys.argv[1]).read()[16:]
for i in range(1500, 1600):
    print(json.dumps({"id": "img-%d" % i, "data": list(raw[i * 784:(i + 1) * 784])}))
PYEOF
kcat -b "$BOOT" -P -t $IN -K'|' < <(sed 's/^\({"id": "\(img-[0-9]*\)"\)/\2|\1/' "$WORK/kcat.txt")
check "1,600 records in, 1,600 outputs, each id once" collect $OUT 1600 "$WORK/clean.out" --timeout 60
check "no duplicates" test "$(summary "$WORK/clean.out" duplicates)" -eq 0
check "predictions equal --predict's" predictions_match "$WORK/clean.out"
check "kcat reads the outputs too" \
    test "$(kcat -b "$BOOT" -C -t $OUT -e -q -f '%k\n' | sort -u | wc -l)" -eq 1600
check "/status counts 1,600 outputs" wait_for 10 kstatus 'k["outputs"] == 1600'
check "/status: every partition committed to its end, lag 0" wait_for 10 \
    kstatus 'all(p["lag"] == 0 and p["committed"] == p["high"] for p in k["partitions"])'
check "/metrics has the Kafka counters" \
    sh -c "curl -s $URL/metrics | grep -q '^dlserve_kafka_outputs_total 1600$'"
check "/metrics has consumer lag per partition" \
    sh -c "curl -s $URL/metrics | grep -c '^dlserve_kafka_consumer_lag{topic=\"in\",partition=\"[0-3]\"} 0$' | grep -qx 4"
check "/metrics: the Kafka requests count in nv_inference_request_success" \
    sh -c "curl -s $URL/metrics | grep -q 'nv_inference_request_success{model=\"fashion-mlp\",version=\"1\"} 1600'"

# ---- malformed records: each kind to the dead-letter topic -------------------
# (JSON cannot hold a NaN: the tool writes 1e999, which JSON parsers refuse.)
declare -A KIND=([badjson]=json [shape]=input [datatype]=input [model]=model [nan]=json/input
                 [oversize]=oversize [empty]=empty)
n=0
for bad in "${!KIND[@]}"; do
    for fmt in json binary; do
        [ "$fmt" = binary ] && [[ $bad == badjson || $bad == datatype ]] && continue
        count=3
        [ $bad = oversize ] && count=1   # 2 MiB each
        "$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count $count --start $n --format $fmt \
            --bad $bad > /dev/null 2>&1 || bad "feed --bad $bad --format $fmt"
        n=$((n + count))
    done
done
check "$n malformed records, $n dead letters" collect $DLQ $n "$WORK/dlq.out" --timeout 30
dead_letters_ok() {
    $PY - "$WORK/dlq.out" <<PYEOF
import sys
want = {$(for b in "${!KIND[@]}"; do printf '"%s": "%s", ' "$b" "${KIND[$b]}"; done)}
bad = 0
for line in open(sys.argv[1]):
    key, part, off, ts, hdrs, value = line.rstrip("\n").split("\t", 5)
    h = dict(kv.split("=", 1) for kv in hdrs.split(";") if "=" in kv)
    kind = key.split("-")[1]
    ok = (h.get("dlserve-error-kind") in want[kind].split("/") and h.get("dlserve-error")
          and h.get("dlserve-source-topic") == "in" and "dlserve-source-offset" in h
          and "dlserve-source-partition" in h)
    if not ok:
        bad += 1
        print("unexpected dead letter:", key, hdrs[:300])
sys.exit(bad != 0)
PYEOF
}
check "each dead letter names its reason and source" dead_letters_ok
unchanged() {   # the JSON oversize record comes back whole: 2 MiB of text
    $PY - "$WORK/dlq.out" <<'PYEOF'
import sys
sizes = [len(l.rstrip("\n").split("\t", 5)[5]) for l in open(sys.argv[1])
         if l.startswith("bad-oversize-") and "content-type" not in l.split("\t")[4]]
sys.exit(0 if sizes == [2 * 1024 * 1024] else 1)
PYEOF
}
check "dead letters keep the value unchanged (the 2 MiB one too)" unchanged
# (counted on their delivery reports, which may come just after the
# collector read them: waited for, 10 s)
check "/metrics counts dead letters by reason" wait_for 10 \
    sh -c "curl -s $URL/metrics | grep -q '^dlserve_kafka_dead_letters_total{reason=\"oversize\"} 2$'"
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 50 --start 5000 > /dev/null
check "Kafka keeps serving after the malformed records" collect $OUT 1650 "$WORK/after.out" --timeout 30
$PY "$SRC/tests/py/make_request.py" 0 2 > "$WORK/req.json"
check "HTTP keeps serving" sh -c "curl -s -o /dev/null -w '%{http_code}' -d @'$WORK/req.json' \
    $URL/v2/models/fashion-mlp/infer | grep -qx 200"

# ---- the OIP binary payload (JSON header, raw tensors) as a record value ------
# Image 7 twice through kcat: as JSON, and as the binary payload with its
# header spelled in lower case; both answers must be the same.
$PY - "$DATA/t10k-images-idx3-ubyte.gz" "$WORK" <<'PYEOF'
import gzip, json, sys
img = gzip.open(sys.argv[1]).read()[16:][7 * 784:8 * 784]
tensor = {"name": "input", "shape": [1, 784], "datatype": "UINT8"}
text = json.dumps({"id": "oip-json-7", "inputs": [dict(tensor, data=list(img))]})
head = json.dumps({"id": "oip-bin-7",
                   "inputs": [dict(tensor, parameters={"binary_data_size": 784})]}).encode()
open(sys.argv[2] + "/oip.json", "w").write(text)
open(sys.argv[2] + "/oip.bin", "wb").write(head + img)
open(sys.argv[2] + "/oip.len", "w").write(str(len(head)))
PYEOF
kcat -b "$BOOT" -P -t $IN -k oip-json-7 "$WORK/oip.json"
kcat -b "$BOOT" -P -t $IN -k oip-bin-7 \
    -H "inference-header-content-length=$(cat "$WORK/oip.len")" "$WORK/oip.bin"
same_answers() {
    collect $OUT 1652 "$WORK/oip.out" --timeout 30 && $PY - "$WORK/oip.out" <<'PYEOF'
import json, sys
out = {}
for line in open(sys.argv[1]):
    key, part, off, ts, hdrs, value = line.rstrip("\n").split("\t", 5)
    if key.startswith("oip-"):
        o = json.loads(value)
        out[key] = [o[k] for k in ("model", "version", "class", "label", "scores")]
sys.exit(0 if len(out) == 2 and out["oip-json-7"] == out["oip-bin-7"] else 1)
PYEOF
}
check "an OIP binary payload record is answered as its JSON form is" same_answers
check "clean stop (exit 0)" stop_daemon

# ---- backpressure: a tiny queue pauses partitions and loses nothing ------------
mock_cmd topic bp 4 && mock_cmd topic bpout 4
check "daemon with a tiny queue" start_kafka_daemon tiny --set kafka.input_topics=bp \
    --set kafka.output_topic=bpout --set kafka.dead_letter_topic=$DLQ --set kafka.group_id=bp \
    "${COMMON[@]}" --set batching.max_queue_size=8 --set batching.max_batch_size=4 \
    --set kafka.max_in_flight=256
"$KAFKA_TOOL" feed -b "$BOOT" -t bp --count 3000 --format binary > /dev/null
check "3,000 records through a queue of 8: 3,000 outputs" collect bpout 3000 "$WORK/bp.out" --timeout 90
check "intake paused along the way" kstatus 'k["pauses"] > 0'
check "nothing dead-lettered" kstatus 'sum(k["dead_letters"].values()) == 0'
stop_daemon

# ---- rebalance: a second consumer joins mid-stream ----------------------------
mock_cmd topic rb 16 && mock_cmd topic rbout 8
RB=(--set kafka.input_topics=rb --set kafka.output_topic=rbout --set kafka.dead_letter_topic=$DLQ
    --set kafka.group_id=rb "${COMMON[@]}")
check "first consumer" start_kafka_daemon rb1 "${RB[@]}"
PID1=$PID URL1=$URL
# The stream (1,500 records a second, 300 a feed) flows until a second
# after the second consumer holds partitions, however long its join takes
# (two rebalances of about 5 s each here; more on a loaded machine): a
# stream of fixed length could end before the first consumer gave any
# partition up, leaving the second nothing to read.
stream() {
    local n=0
    while [ ! -e "$WORK/rb.stop" ]; do
        "$KAFKA_TOOL" feed -b "$BOOT" -t rb --count 300 --start $n --rate 1500 --format binary \
            > "$WORK/rbfeed" || return 1
        n=$((n + 300))
    done
    echo $n > "$WORK/rb.fed"
}
stream &
FEED=$!
sleep 1.5
check "second consumer joins" start_kafka_daemon rb2 "${RB[@]}"
PID2=$PID URL2=$URL
sleep 1
touch "$WORK/rb.stop"
check "the stream flowed across the join" wait $FEED
fed=$(cat "$WORK/rb.fed" 2>/dev/null || echo 0)
FEED=""
check "$fed records across a rebalance: every id has an output" \
    collect rbout "$fed" "$WORK/rb.out" --timeout 120
check "the second consumer served part of the stream" kstatus 'k["outputs"] > 0'
PID=$PID1 URL=$URL1
check "the first consumer gave partitions up" kstatus 'k["partitions_revoked"] > 0'
echo "# rebalance duplicates: $(summary "$WORK/rb.out" duplicates)"
check "both stop cleanly" sh -c "kill -TERM $PID1 $PID2; wait $PID1 $PID2 2>/dev/null; true"
PID2=""

# ---- kill -9 in a stream of 20,000 records, then a restart ---------------------
mock_cmd topic big 24 && mock_cmd topic bigout 8
BIG=(--set kafka.input_topics=big --set kafka.output_topic=bigout --set kafka.dead_letter_topic=$DLQ
     --set kafka.group_id=big "${COMMON[@]}")
check "daemon consumes the stream" start_kafka_daemon big1 "${BIG[@]}"
"$KAFKA_TOOL" feed -b "$BOOT" -t big --count 20000 --rate 4000 --format binary > "$WORK/bigfeed" &
FEED=$!
check "outputs flowing before the kill" wait_for 60 kstatus 'k["outputs"] >= 5000'
kill -9 $PID
wait $PID 2>/dev/null
wait $FEED
FEED=""
check "all 20,000 records were fed" grep -q '"produced": 20000' "$WORK/bigfeed"
check "restarted" start_kafka_daemon big2 "${BIG[@]}"
check "every one of 20,000 ids has an output" collect bigout 20000 "$WORK/big.out" --timeout 180
dups=$(summary "$WORK/big.out" duplicates)
echo "# kill -9 duplicates: $dups (records in flight or not yet committed at the kill)"
# Bound: what can be in flight (max_in_flight, 8192) plus one commit
# interval's worth; a lost commit would re-deliver far more.
check "duplicates only for records in flight ($dups <= 8192)" test "$dups" -le 8192
check "restarted daemon stops cleanly" stop_daemon
finish
