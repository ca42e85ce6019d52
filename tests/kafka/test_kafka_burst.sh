#!/usr/bin/env bash
# A burst of 100,000 small records through a mock cluster with 16
# partitions, with low bounds: the queues stay within them (sampled from
# /metrics throughout: dlserve_kafka_in_flight <= dlserve_kafka_max_in_flight,
# dlserve_batcher_queued_samples <= dlserve_batcher_queue_limit_samples),
# intake stops at its bound without pausing its partitions, every
# record is answered, the record and buffer pools keep allocations within
# the intake bound, and consuming and producing run on threads of their
# own; then read again through a small librdkafka prefetch
# queue, whose stalled fetcher the daemon wakes.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
N=100000 MAX_IN_FLIGHT=2000 MAX_QUEUE=32

# tiny: 4 inputs, 3 classes, trained for an epoch on a few hundred rows
mkdir -p "$WORK/repo/tiny" "$WORK/data"
cp "$SRC/tests/kafka/tiny_model.json" "$WORK/repo/tiny/model.json"
$PY - "$WORK/data" "$WORK/records.txt" "$N" <<'PYEOF'
import random, sys
random.seed(1)
for name, n in (("train", 300), ("test", 60)):
    with open("%s/%s.csv" % (sys.argv[1], name), "w") as f:
        for i in range(n):
            c = i % 3
            f.write("%d,%s\n" % (c, ",".join("%.3f" % (c + random.random()) for _ in range(4))))
with open(sys.argv[2], "w") as f:
    for i in range(int(sys.argv[3])):
        v = ",".join("%.2f" % random.uniform(0, 3) for _ in range(4))
        f.write('r-%d|{"id":"r-%d","data":[%s]}\n' % (i, i, v))
PYEOF
"$DLSERVE" --train "$WORK/repo/tiny" --data "$WORK/data" --no-progress > /dev/null 2>&1
check "the tiny model trained" test -f "$WORK/repo/tiny/1/model.safetensors"

check "mock cluster up (16 partitions)" start_mock bin:16 bout:16 bout2:16 bdlq:2
trap 'kill -9 ${PID:-} ${SAMPLER:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "daemon joins the group" start_kafka_daemon burst --set models.watch=false \
    --set kafka.input_topics=bin --set kafka.output_topic=bout --set kafka.dead_letter_topic=bdlq \
    --set kafka.group_id=burst --set kafka.max_in_flight=$MAX_IN_FLIGHT \
    --set batching.max_queue_size=$MAX_QUEUE --set batching.max_batch_size=16

# /metrics sampled every 50 ms while the burst runs
( while :; do curl -s "$URL/metrics" | grep -E '^dlserve_(kafka_in_flight|kafka_max_in_flight|batcher_queued_samples|batcher_queue_limit_samples)' ; echo '--'; sleep 0.05; done ) \
    > "$WORK/samples.txt" 2>/dev/null &
SAMPLER=$!
produce() { kcat -b "$BOOT" -P -t bin -K'|' -X queue.buffering.max.messages=200000 \
                < "$WORK/records.txt"; }
check "kcat produces $N records" produce
check "every one of $N records answered" collect bout $N "$WORK/out" --timeout 120
kill $SAMPLER 2>/dev/null; wait $SAMPLER 2>/dev/null
check "no dead letters" kstatus 'sum(k["dead_letters"].values()) == 0'
check "intake stopped at its bound" kstatus 'k["pauses"] > 0'
# The output side drains all along: intake only stops polling, and the
# partitions never pause (a pause drops what librdkafka has prefetched).
check "no partition paused" kstatus 'k["partition_pauses"] == 0'

# within_bounds: every sample within its bound, and the queues were used
within_bounds() {
    $PY - "$WORK/samples.txt" "$MAX_IN_FLIGHT" "$MAX_QUEUE" <<'PYEOF'
import sys
flight = queued = 0
n = 0
bad = []
for line in open(sys.argv[1]):
    if line.startswith("--"):
        n += 1
        continue
    name, value = line.rsplit(" ", 1)
    v = float(value)
    if name == "dlserve_kafka_in_flight":
        flight = max(flight, v)
    elif name.startswith("dlserve_batcher_queued_samples"):
        queued = max(queued, v)
    elif name == "dlserve_kafka_max_in_flight" and v != int(sys.argv[2]):
        bad.append(line)
    elif name == "dlserve_batcher_queue_limit_samples" and v != int(sys.argv[3]):
        bad.append(line)
print("%d samples: in flight at most %d (bound %s), queued at most %d (bound %s)"
      % (n, flight, sys.argv[2], queued, sys.argv[3]))
sys.exit(0 if n > 5 and 0 < flight <= int(sys.argv[2]) and queued <= int(sys.argv[3])
         and not bad else 1)
PYEOF
}
check "sampled gauges never over their bounds" within_bounds

# The pipeline: records and input buffers come from pools, so the whole
# burst allocates no more of them than intake may hold at once (one per
# record without the pools); and consuming and producing ran on threads
# of their own, each of which did real work.
curl -s "$URL/metrics" > "$WORK/metrics1.txt"
grep -E '^dlserve_kafka_(records|buffers)_allocated_total' "$WORK/metrics1.txt"
check "records and input buffers allocated <= max_in_flight ($MAX_IN_FLIGHT) for $N records" \
    awk -v bound=$MAX_IN_FLIGHT '/^dlserve_kafka_(records|buffers)_allocated_total / {
            n++; if ($2 < 1 || $2 > bound) bad = 1 }
        END { exit !(n == 2 && !bad) }' "$WORK/metrics1.txt"
# stage_ticks NAME: CPU clock ticks (user + system) of the daemon's thread NAME
stage_ticks() {
    for t in /proc/$PID/task/*; do
        [ "$(cat "$t/comm")" = "$1" ] && awk '{ sub(/.*\) /, ""); print $12 + $13 }' "$t/stat"
    done
}
ticks_in=$(stage_ticks kafka-in) ticks_out=$(stage_ticks kafka-out)
echo "# CPU ticks: kafka-in ${ticks_in:-none}, kafka-out ${ticks_out:-none}"
check "consuming and producing ran on their own threads (kafka-in, kafka-out)" \
    test "${ticks_in:-0}" -gt 0 -a "${ticks_out:-0}" -gt 0
check "stops cleanly" stop_daemon

# The same backlog again, read by a new group with librdkafka's prefetch
# queue bounded at 32 KB and fetches of 4 KB a partition (64 KB in all):
# its fetcher stops after nearly every fetch (queued.max.messages.kbytes
# exceeded) and, left alone, would look again only at its broker thread's
# next tick, up to a second later, many times over. The daemon wakes it
# once the queue it saw near that bound is drained.
check "daemon with a small prefetch queue joins" start_kafka_daemon refill \
    --set models.watch=false --set kafka.input_topics=bin --set kafka.output_topic=bout2 \
    --set kafka.dead_letter_topic=bdlq --set kafka.group_id=refill \
    --set kafka.consumer.queued.max.messages.kbytes=32 \
    --set kafka.consumer.max.partition.fetch.bytes=4096
check "every one of $N records answered again" collect bout2 $N "$WORK/out2" --timeout 120
curl -s "$URL/metrics" > "$WORK/metrics2.txt"
grep '^dlserve_kafka_fetch_wakeups_total' "$WORK/metrics2.txt"
check "the fetcher was woken after its queue neared the bound" \
    awk '/^dlserve_kafka_fetch_wakeups_total / { found = $2 > 0 } END { exit !found }' \
    "$WORK/metrics2.txt"
check "no dead letters the second time" kstatus 'sum(k["dead_letters"].values()) == 0'
check "stops cleanly" stop_daemon
finish
