#!/usr/bin/env bash
# Which model a Kafka record goes to, against a librdkafka mock cluster
# (kafka_tool mock): records that name no model keep going to the model
# decided at start (the one model served then) while another model folder
# is added; with input_topics = topic:model, records on two topics reach
# two models, and a record naming its model goes there whatever its
# topic; several models and no default_model: a warning, and unnamed
# records from a topic without a model are dead-lettered; a default_model
# or a topic's model that is not served stops the start.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
COMMON=(--set kafka.output_topic=out --set kafka.dead_letter_topic=dlq
        --set kafka.consumer.session.timeout.ms=6000
        --set kafka.consumer.heartbeat.interval.ms=500)

make_repo "$WORK/repo"
check "mock cluster up" start_mock in:2 a:2 b:2 c:2 out:2 dlq:2
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

# models_in FILE WANT: the outputs' "model" by count, as "model:n ..." (sorted)
models_in() {
    local got
    got=$($PY -c 'import json,sys,collections
c = collections.Counter(json.loads(l.rstrip("\n").split("\t", 5)[5])["model"] for l in open(sys.argv[1]))
print(" ".join("%s:%d" % kv for kv in sorted(c.items())))' "$1")
    [ "$got" = "$2" ] || { echo "# outputs by model: $got (want $2)"; return 1; }
}

# refused NAME PATTERN ARGS...: the daemon exits 1 at start, logging PATTERN
refused() {
    local name=$1 pattern=$2; shift 2
    "$DLSERVE" --set http.port=0 --models "$WORK/repo" --set kafka.brokers="$BOOT" \
        "${COMMON[@]}" "$@" > /dev/null 2> "$WORK/$name.err"
    local rc=$?
    [ $rc -eq 1 ] && grep -q -- "$pattern" "$WORK/$name.err" ||
        { echo "# exit $rc: $(tail -1 "$WORK/$name.err")"; return 1; }
}
check "a default_model that is not served stops the start" refused nodefault \
    "\[kafka\] default_model: model 'nosuch' is not served (.*); models served: fashion-mlp" \
    --set kafka.input_topics=in --set kafka.default_model=nosuch
check "a topic's model that is not served stops the start" refused notopic \
    "\[kafka\] input_topics b:nosuch: model 'nosuch' is not served" \
    --set kafka.input_topics=in,b:nosuch

# One model at start: unnamed records go to it, also once another comes.
check "daemon joins the group" start_kafka_daemon one "${COMMON[@]}" \
    --set kafka.input_topics=in --set kafka.group_id=one
check "it logs where unnamed records go" \
    grep -q "records that name no model go to 'fashion-mlp', the one model served" "$LOG"
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count 100 --format data --rate 50 > /dev/null &
FEED=$!
sleep 1
mkdir -p "$WORK/stage"
cp -r "$WORK/repo/fashion-mlp" "$WORK/stage/fashion-b"
sed -i 's/"name": "fashion-mlp"/"name": "fashion-b"/' "$WORK/stage/fashion-b/model.json"
mv "$WORK/stage/fashion-b" "$WORK/repo/"
check "a second model is loaded while records flow" \
    wait_for 30 grep -q "models: fashion-b version 1 loaded" "$LOG"
wait $FEED
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count 50 --start 100 --format data > /dev/null
check "150 unnamed records, 150 outputs" collect out 150 "$WORK/one.out" --timeout 60
check "... all from fashion-mlp" models_in "$WORK/one.out" "fashion-mlp:150"
check "... none dead-lettered" kstatus 'sum(k["dead_letters"].values()) == 0'
check "daemon stops cleanly" stop_daemon

# Two models at start: per-topic routing; unnamed records on c have none.
check "daemon with topic routes joins" start_kafka_daemon two "${COMMON[@]}" \
    --set kafka.group_id=two --set "kafka.input_topics=a:fashion-mlp, b:fashion-b, c"
check "it warns that unnamed records on a topic without a model are dead-lettered" \
    grep -q " warning kafka: 2 models served (fashion-b, fashion-mlp) and no \[kafka\] default_model: records that name no model go to the dead-letter topic" "$LOG"
check "it logs topic b's model" grep -q "records from topic b that name no model go to 'fashion-b'" "$LOG"
"$KAFKA_TOOL" feed -b "$BOOT" -t a --count 30 --start 1000 --format data > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t b --count 20 --start 2000 --format data > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t a --count 10 --start 3000 --format json --model fashion-b > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t c --count 5 --start 4000 --format data > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t c --count 5 --start 5000 --format json > /dev/null
check "65 more outputs (215 in all)" collect out 215 "$WORK/two.out" --timeout 60
grep -E $'^img-(1|2|3|5)0[0-9][0-9]\t' "$WORK/two.out" > "$WORK/two.new"
check "topic a's to fashion-mlp, b's and those naming fashion-b to fashion-b" \
    models_in "$WORK/two.new" "fashion-b:30 fashion-mlp:35"
check "unnamed records on topic c: 5 dead letters" \
    wait_for 10 kstatus 'sum(k["dead_letters"].values()) == 5'
check "daemon stops cleanly" stop_daemon
finish
