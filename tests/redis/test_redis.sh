#!/usr/bin/env bash
# Redis with a real redis-server: the effectively-once sink (results and
# consumed offsets in one MULTI/EXEC) through a kill -9, counted with
# MONITOR; intake stopped, then its partitions paused, while Redis is away
# with redis delivery; Redis stopped and restarted while the daemon serves
# HTTP and Kafka; a version published by `dlserve --train --publish`
# afterwards is loaded; training progress in /status.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
. "$SRC/tests/lib/lib_redis.sh"

make_repo "$WORK/repo"
check "mock cluster up" start_mock rin:24 rout:4 rdlq:2 ain:4 aout:4
check "redis-server up" start_redis
trap 'kill -9 ${PID:-} ${MON:-} 2>/dev/null; stop_redis; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
R=(--set redis.host=127.0.0.1 --set redis.port=$RPORT --set models.watch=false
   --set kafka.consumer.session.timeout.ms=6000 --set kafka.consumer.heartbeat.interval.ms=500)
results() { redis-cli -p $RPORT --scan --pattern 'dlserve:result:*' | wc -l; }
results_are() { [ "$(results)" -eq "$1" ]; }

# ---- redis delivery: kill -9 mid-stream, every result written once ----------
redis-cli -p $RPORT monitor > "$WORK/monitor.log" &
MON=$!
RD=(--set kafka.delivery=redis --set kafka.input_topics=rin --set kafka.output_topic=rout
    --set kafka.dead_letter_topic=rdlq --set kafka.group_id=rg "${R[@]}")
check "daemon with redis delivery" start_kafka_daemon rd1 "${RD[@]}"
"$KAFKA_TOOL" feed -b "$BOOT" -t rin --count 20000 --rate 4000 --format binary > "$WORK/feed" &
FEED=$!
check "results flowing before the kill" wait_for 60 sh -c "[ \$(redis-cli -p $RPORT --scan --pattern 'dlserve:result:*' | wc -l) -ge 5000 ]"
kill -9 $PID
wait $PID 2>/dev/null
wait $FEED
check "restarted" start_kafka_daemon rd2 "${RD[@]}"
check "20,000 results in Redis" wait_for 120 sh -c "[ \$(redis-cli -p $RPORT --scan --pattern 'dlserve:result:*' | wc -l) -eq 20000 ]"
check "the stored offsets reach the end of every partition" wait_for 20 $PY - "$RPORT" <<'PYEOF'
import subprocess, sys
port = sys.argv[1]
h = subprocess.run(["redis-cli", "-p", port, "hgetall", "dlserve:offsets:rg:rin"],
                   capture_output=True, text=True).stdout.split()
stored = dict(zip(h[::2], map(int, h[1::2])))
sys.exit(0 if len(stored) == 24 and sum(stored.values()) == 20000 else 1)
PYEOF
check "stops cleanly" stop_daemon
kill $MON
wait $MON 2>/dev/null
MON=""
once() {
    $PY - "$WORK/monitor.log" <<'PYEOF'
import collections, re, sys
n = collections.Counter(m.group(1) for m in
                        re.finditer(r'"SET" "dlserve:result:([^"]+)"', open(sys.argv[1]).read()))
twice = [k for k, c in n.items() if c != 1]
print("# %d ids written, %d more than once %s" % (len(n), len(twice), twice[:5]))
sys.exit(0 if len(n) == 20000 and not twice else 1)
PYEOF
}
check "MONITOR: every id's result was written exactly once across the kill" once
check "results and offsets went together (MULTI/EXEC)" grep -q '"MULTI"' "$WORK/monitor.log"
check "a result holds the prediction" sh -c \
    "redis-cli -p $RPORT get dlserve:result:img-7 | grep -q '\"model\":\"fashion-mlp\"'"
check "results expire (TTL set)" sh -c "[ \$(redis-cli -p $RPORT ttl dlserve:result:img-7) -gt 0 ]"

# ---- backpressure: with redis delivery and Redis away, intake stops at ---------
# max_in_flight and its partitions pause after a second; once Redis is back
# every record is answered.
check "topic pin" mock_cmd topic pin 4
PB=(--set kafka.delivery=redis --set kafka.input_topics=pin --set kafka.output_topic=rout
    --set kafka.dead_letter_topic=rdlq --set kafka.group_id=pg --set kafka.max_in_flight=200
    "${R[@]}")
check "daemon with redis delivery, 200 records in flight" start_kafka_daemon pb "${PB[@]}"
check "Redis away" stop_redis
"$KAFKA_TOOL" feed -b "$BOOT" -t pin --count 2000 --format binary > /dev/null
check "intake stops at 200 records held" wait_for 30 kstatus 'k["in_flight"] == 200 and k["paused"]'
check "its partitions pause after a second" wait_for 20 kstatus 'k["partition_pauses"] >= 1'
check "Redis back (empty: it keeps nothing on disk)" start_redis
check "2,000 results in Redis" wait_for 60 results_are 2000
check "intake resumed" wait_for 10 kstatus 'not k["paused"] and k["in_flight"] == 0'
check "stops cleanly" stop_daemon

# ---- Redis goes away and comes back while the daemon serves --------------------
AL=(--set kafka.input_topics=ain --set kafka.output_topic=aout --set kafka.dead_letter_topic=rdlq
    --set kafka.group_id=ag --set redis.results=true "${R[@]}")
check "daemon with Redis (registry, result sink)" start_kafka_daemon al "${AL[@]}"
"$DLSERVE" --train "$WORK/repo/fashion-mlp" --epochs 1 --limit 2000 --threads 1 --no-progress \
    --publish --set redis.host=127.0.0.1 --set redis.port=$RPORT > "$WORK/train1.out" 2> "$WORK/train1.err"
check "--publish: version 2 announced and loaded" wait_for 20 sh -c \
    "curl -s $URL/v2/models/fashion-mlp | grep -q '\"versions\":\[\"2\"\]'"
check "the registry hash names version 2 and its sha256" sh -c \
    "[ \"\$(redis-cli -p $RPORT hget dlserve:model:fashion-mlp version)\" = 2 ] &&
     [ \"\$(redis-cli -p $RPORT hget dlserve:model:fashion-mlp sha256)\" = \"\$(sha256sum '$WORK/repo/fashion-mlp/2/model.safetensors' | cut -d' ' -f1)\" ]"
check "/status shows the training progress" sh -c \
    "curl -s $URL/status | $PY -c 'import json,sys; t=json.load(sys.stdin)[\"redis\"][\"training\"][\"fashion-mlp\"]; sys.exit(0 if t[\"epoch\"] == 1 and t[\"step\"] > 0 else 1)'"
stop_redis
$PY "$SRC/tests/py/make_request.py" 0 1 > "$WORK/req.json"
check "Redis down: HTTP keeps serving" sh -c "curl -s -o /dev/null -w '%{http_code}' \
    -d @'$WORK/req.json' $URL/v2/models/fashion-mlp/infer | grep -qx 200"
"$KAFKA_TOOL" feed -b "$BOOT" -t ain --count 200 --format binary > /dev/null
check "Redis down: Kafka keeps serving" collect aout 200 "$WORK/aout.out" --timeout 30
check "Redis down: /status says so" wait_for 10 sh -c \
    "curl -s $URL/status | $PY -c 'import json,sys; l=json.load(sys.stdin)[\"redis\"][\"links\"]; sys.exit(0 if not any(x[\"connected\"] for x in l) else 1)'"
check "Redis down: /metrics says so" sh -c "curl -s $URL/metrics | grep -q '^dlserve_redis_up{role=\"registry\"} 0$'"
check "redis-server back on the same port" start_redis
check "the registry reconnects" wait_for 20 sh -c \
    "curl -s $URL/metrics | grep -q '^dlserve_redis_up{role=\"registry\"} 1$'"
"$DLSERVE" --train "$WORK/repo/fashion-mlp" --epochs 1 --limit 2000 --threads 1 --no-progress \
    --publish --set redis.host=127.0.0.1 --set redis.port=$RPORT > "$WORK/train2.out" 2> "$WORK/train2.err"
check "a version published after the outage (3) is loaded" wait_for 20 sh -c \
    "curl -s $URL/v2/models/fashion-mlp | grep -q '\"versions\":\[\"3\"\]'"
"$KAFKA_TOOL" feed -b "$BOOT" -t ain --count 20 --start 500 --format binary > /dev/null
check "the result sink writes again (at-least-once mode with [redis] results)" wait_for 20 \
    sh -c "[ -n \"\$(redis-cli -p $RPORT get dlserve:result:img-519)\" ]"
check "stops cleanly" stop_daemon
finish
