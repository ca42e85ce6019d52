#!/usr/bin/env bash
# SIGHUP on a rotated Redis password while a stream flows: redis-server
# requires a password, which the daemon reads from a file
# (`password = ${file:...}`); with redis delivery, records stream in, the
# file and the server's requirepass change, and SIGHUP makes the daemon
# replace its status link and registry watcher and recreate the Kafka
# clients, whose sink connects with the new password. Every connection
# made with the old one is then killed: the stream goes on only if the
# daemon really uses the new password. Every record's result is in Redis,
# and /status shows every link connected. ~20 s.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
. "$SRC/tests/lib/lib_redis.sh"

N=2000
make_repo "$WORK/repo"
check "mock cluster up" start_mock hin:4 hout:1 hdlq:1
check "redis-server up" start_redis
trap 'kill -9 ${PID:-} ${FEED:-} 2>/dev/null; stop_redis; stop_mock
      [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# rcli PASSWORD ARGS...: redis-cli on the test's server
rcli() { redis-cli -p "$RPORT" --no-auth-warning -a "$@"; }
# results_are PASSWORD N: N result keys in Redis
results_are() { [ "$(rcli "$1" --scan --pattern 'dlserve:result:*' | wc -l)" -ge "$2" ]; }
links_up() {
    curl -s "$URL/status" | $PY -c 'import json, sys
l = json.load(sys.stdin)["redis"]["links"]
sys.exit(0 if len(l) == 3 and all(x["connected"] for x in l) else 1)'
}
check "redis-server requires pw1" test "$(rcli '' config set requirepass pw1)" = OK
printf 'pw1\n' > "$WORK/redis-password"
cat > "$WORK/dlserve.conf" <<CONF
[models]
watch = false
[redis]
host = 127.0.0.1
port = $RPORT
password = \${file:$WORK/redis-password}
[kafka]
delivery = redis
input_topics = hin
output_topic = hout
dead_letter_topic = hdlq
group_id = redis-reload
[kafka.consumer]
session.timeout.ms = 6000
CONF
check "daemon joins the group" start_kafka_daemon redis-reload --config "$WORK/dlserve.conf"

"$KAFKA_TOOL" feed -b "$BOOT" -t hin --count $N --rate 300 --format binary \
    > "$WORK/feed.out" 2> "$WORK/feed.err" &
FEED=$!
check "a third of the stream in Redis" wait_for 30 results_are pw1 $((N / 3))
printf 'pw2\n' > "$WORK/redis-password"
check "redis-server requires pw2" test "$(rcli pw1 config set requirepass pw2)" = OK
kill -HUP "$PID"
check "the log names redis.password, applied" wait_for 30 \
    grep -q "conf: redis.password changed (.*): applied" "$LOG"
check "the log says the Redis links were recreated" wait_for 30 \
    grep -q "redis: links recreated with the reloaded configuration" "$LOG"
check "the log says the Kafka clients were recreated" wait_for 60 \
    grep -q "kafka: clients recreated with the reloaded configuration" "$LOG"
rcli pw2 client kill type normal > /dev/null
rcli pw2 client kill type pubsub > /dev/null
check "the stream was still flowing then" kill -0 "$FEED"
check "every record produced" wait "$FEED"
FEED=
check "every record's result in Redis" wait_for 60 results_are pw2 $N
check "/status: the watcher, the sink and the status link connected" wait_for 30 links_up
check "no authentication error after the reload" \
    sh -c "! sed -n '/daemon: reloaded/,\$p' '$LOG' | grep -i 'WRONGPASS\|NOAUTH\|invalid password'"
check "SIGTERM: exit 0" stop_daemon 30
finish
