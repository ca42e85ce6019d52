#!/usr/bin/env bash
# Kafka records and the operator's view, against a librdkafka mock cluster
# (kafka_tool mock): a record's W3C trace context (traceparent /
# tracestate headers) carried to its output and its dead letter, and
# kafka.max_record_age_ms sending records older than that (by their
# timestamp) to the dead-letter topic with kind "expired", as are records
# queued past their "timeout" parameter; the record latency histogram;
# the outputs in each [kafka] output_format, read back by a consumer
# written from the OIP documentation (read_outputs.py).
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
IN=in OUT=out DLQ=dlq
TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
# The three daemons below answer the same records in batches of their own,
# compared bit for bit by read_outputs.py: batch_invariant (set, because
# the comparison relies on it) and one configuration for all three
# (one inference thread each) give each answer the same bits in each.
KARGS=(--set kafka.input_topics=$IN --set kafka.output_topic=$OUT
       --set kafka.dead_letter_topic=$DLQ --set kafka.group_id=ops --set models.watch=false
       --set kafka.max_record_age_ms=600000 --set batching.max_queue_delay_us=1000000
       --set batching.eager=false --set batching.batch_invariant=true --set models.threads=1)

make_repo "$WORK/repo"
check "mock cluster up" start_mock $IN:2 $OUT:2 $DLQ:2
trap 'kill -9 ${PID:-} ${JSON_PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "daemon joins the group" start_kafka_daemon ops "${KARGS[@]}"

# 20 good records and 5 bad ones with a trace context; 5 invalid traces;
# 6 records an hour old (3 of them JSON, 3 binary) against a limit of 10
# minutes; then, once those are answered, 2 records that may queue 1 ms
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 20 --header "traceparent=$TP" \
    --header "tracestate=congo=t61rcWkgMzE" > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 5 --start 100 --bad shape \
    --header "traceparent=$TP" > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 5 --start 200 \
    --header "traceparent=${TP^^}" --header "tracestate=a=b" > /dev/null
old=$(( $(date +%s) * 1000 - 3600 * 1000 ))
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 3 --start 300 --timestamp $old > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t $IN --count 3 --start 303 --format binary --timestamp $old \
    > /dev/null
check "25 outputs" collect $OUT 25 "$WORK/out" --timeout 60
check "11 dead letters" collect $DLQ 11 "$WORK/dlq" --timeout 60
# The 2 late records come alone, into an empty queue: their batch waits
# the whole delay (1 s, eager off), a thousand times their 1 ms. (Sent
# with the others, they could join a batch whose delay was about to end
# and run within their 1 ms: on a loaded machine the feeds before them
# took about that delay.)
for i in 0 1; do
    printf 'late-%d|{"id":"late-%d","data":[%s],"parameters":{"timeout":1000}}\n' $i $i \
        "$(printf '0,%.0s' $(seq 783))0"
done | kcat -b "$BOOT" -P -t $IN -K'|'
check "13 dead letters" collect $DLQ 13 "$WORK/dlq" --timeout 60

# fields: key, partition, offset, timestamp, headers (k=v;k=v, '=' as \x3d), value
check "outputs of traced records carry traceparent and tracestate; others none" \
    $PY - "$WORK/out" "$TP" <<'PYEOF'
import sys
tp = sys.argv[2]
n = 0
for line in open(sys.argv[1]):
    key, part, off, ts, hdrs, value = line.rstrip("\n").split("\t", 5)
    h = dict(kv.split("=", 1) for kv in hdrs.split(";") if kv)
    i = int(key.split("-")[-1])
    if i < 20:
        assert h.get("traceparent") == tp, (key, h)
        assert h.get("tracestate") == "congo\\x3dt61rcWkgMzE", (key, h)
        n += 1
    else:
        assert "traceparent" not in h and "tracestate" not in h, (key, h)
assert n == 20, n
PYEOF
check "dead letters keep the record's trace headers; old records are 'expired'" \
    $PY - "$WORK/dlq" "$TP" <<'PYEOF'
import sys
tp = sys.argv[2]
kinds = {}
for line in open(sys.argv[1]):
    key, part, off, ts, hdrs, value = line.rstrip("\n").split("\t", 5)
    h = dict(kv.split("=", 1) for kv in hdrs.split(";") if kv)
    kinds[key] = h["dlserve-error-kind"]
    if key.startswith("bad-shape-"):
        assert h.get("traceparent") == tp, (key, h)
    if key in ("img-300", "img-301", "img-302", "img-303", "img-304", "img-305"):
        assert "max_record_age_ms" in h["dlserve-error"], h
    if key.startswith("late-"):
        assert "timeout expired" in h["dlserve-error"], h
assert sorted(k for k, v in kinds.items() if v == "expired") == \
    ["img-30%d" % i for i in range(6)] + ["late-0", "late-1"], kinds
assert sorted(k for k, v in kinds.items() if v == "input") == \
    ["bad-shape-10%d" % i for i in range(5)], kinds
PYEOF
# A dead letter is counted once its delivery is reported, which may come
# just after a reader sees it: the counters are waited for (10 s).
check "/metrics counts 8 expired dead letters" wait_for 10 \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_kafka_dead_letters_total{reason=\"expired\"} 8'"
check "/metrics counts the 2 timeouts" wait_for 10 \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_request_timeouts_total{model=\"fashion-mlp\",version=\"1\"} 2'"
check "/status counts them by reason" wait_for 10 kstatus 'k["dead_letters"]["expired"] == 8'
check "the dead letter's log line names the trace" \
    grep -q "dead letter .*(input).*trace=4bf92f3577b34da6a3ce929d0e0e4736" "$LOG"
# The latency from each record's timestamp to its output's delivery
# report: the 25 outputs, none of the dead letters.
check "/metrics: 25 record latencies (create_time), a histogram promtool reads" \
    wait_for 10 sh -c "curl -s $URL/metrics > '$WORK/metrics.txt' && grep -qx \
        'dlserve_kafka_record_latency_seconds_count{timestamp_type=\"create_time\"} 25' \
        '$WORK/metrics.txt'"
check "... with buckets from 1 ms to 10 s" \
    grep -qx 'dlserve_kafka_record_latency_seconds_bucket{timestamp_type="create_time",le="0.001"} [0-9]*' \
    "$WORK/metrics.txt"
check "... and +Inf holding all 25" \
    grep -qx 'dlserve_kafka_record_latency_seconds_bucket{timestamp_type="create_time",le="+Inf"} 25' \
    "$WORK/metrics.txt"
if command -v promtool > /dev/null; then
    check "promtool check metrics passes" "$SRC/tests/serve/promtool_check.sh" "$WORK/metrics.txt"
fi
check "/status: record_latency" kstatus \
    '(k["record_latency"]["create_time"]["count"] == 25 and
      k["record_latency"]["create_time"]["p99_ms"] is not None and
      k["record_latency"]["log_append_time"]["count"] == 0)'
check "/status: this member's share of the group, both partitions" \
    kstatus 'k["assigned_partitions"] == 2 and sorted(k["assignment"]) == ["in/0", "in/1"]'
check "daemon stops cleanly" stop_daemon

# [kafka] output_format: two more groups read the same records and write
# them as OIP InferenceResponses, JSON and binary; a consumer written from
# the protocol reads both back and finds each answer as the dlserve form
# above gave it (ids, shapes, probabilities, class and label).
for t in out-json out-bin dlq-json dlq-bin; do mock_cmd topic $t 2; done
check "an oip-json daemon joins" start_kafka_daemon fmt-json "${KARGS[@]}" \
    --set kafka.group_id=fmt-json --set kafka.output_topic=out-json \
    --set kafka.dead_letter_topic=dlq-json --set kafka.output_format=oip-json
JSON_PID=$PID
check "an oip-binary daemon joins" start_kafka_daemon fmt-bin "${KARGS[@]}" \
    --set kafka.group_id=fmt-bin --set kafka.output_topic=out-bin \
    --set kafka.dead_letter_topic=dlq-bin --set kafka.output_format=oip-binary
check "25 oip-json outputs" collect out-json 25 "$WORK/out-json" --timeout 60
check "25 oip-binary outputs" collect out-bin 25 "$WORK/out-bin" --timeout 60
check "the OIP forms answer as the dlserve form" \
    $PY "$SRC/tests/kafka/read_outputs.py" "$WORK/out" "$WORK/out-json" "$WORK/out-bin" 25
check "the oip-binary daemon stops cleanly" stop_daemon
PID=$JSON_PID
check "the oip-json daemon stops cleanly" stop_daemon
finish
