#!/usr/bin/env bash
# SIGHUP recreates the Kafka clients on a rotated ${file:} value while a
# stream flows: [kafka.client] client.id comes from a file; its content
# changes and SIGHUP makes the daemon stop its clients (records handed to
# the batcher answered and committed) and start new ones, which resume
# from the committed offsets. /status shows the new client.id, and every
# one of the records produced before, during and after the reload is
# answered exactly once (at-least-once, the default delivery). The mock
# cluster has no SASL (tests/kafka/test_kafka_conf.sh), so a rotated
# password cannot be checked against a broker that requires it: client.id,
# read from its file the same way, stands in for it. ~20 s.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

N=3000
make_repo "$WORK/repo"
check "mock cluster up" start_mock rin:4 rout:4 rdlq:1
trap 'kill -9 ${PID:-} ${FEED:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
printf 'dlserve-old\n' > "$WORK/client-id"
cat > "$WORK/dlserve.conf" <<EOF
[models]
watch = false
[kafka]
input_topics = rin
output_topic = rout
dead_letter_topic = rdlq
group_id = reload
[kafka.client]
client.id = \${file:$WORK/client-id}
[kafka.consumer]
session.timeout.ms = 6000
EOF
check "daemon joins the group" start_kafka_daemon reload --config "$WORK/dlserve.conf"
check "/status: client.id from the file" wait_for 10 kstatus 'k["client_id"] == "dlserve-old"'

# N records over about 10 s; the reload once a third are answered
"$KAFKA_TOOL" feed -b "$BOOT" -t rin --count $N --rate 300 --format binary \
    > "$WORK/feed.out" 2> "$WORK/feed.err" &
FEED=$!
check "a third of the stream answered" wait_for 30 kstatus "k['outputs'] >= $((N / 3))"
printf 'dlserve-new\n' > "$WORK/client-id"
kill -HUP "$PID"
check "the log names the property" wait_for 30 \
    grep -q "conf: kafka.client.client.id changed: applied" "$LOG"
check "the log says the clients were recreated" wait_for 30 \
    grep -q "kafka: clients recreated with the reloaded configuration" "$LOG"
check "/status: the new client.id" wait_for 30 kstatus 'k["client_id"] == "dlserve-new"'
check "the stream was still flowing then" kill -0 "$FEED"
check "the new consumer joins the group" wait_for 60 kstatus 'k.get("assigned_partitions", 0) == 4'
check "every record produced" wait "$FEED"
FEED=
check "$N records answered" collect rout $N "$WORK/out" --timeout 60
# then everything the topic holds, until 3 s without a record: an answer
# given twice would come after the N-th distinct one
"$KAFKA_TOOL" collect -b "$BOOT" -t rout --idle 3 --timeout 60 > "$WORK/all.summary"
cat "$WORK/all.summary"; echo
check "none lost" test "$(summary "$WORK/all" distinct)" -eq $N
check "none answered twice" test "$(summary "$WORK/all" duplicates)" -eq 0
check "SIGTERM: exit 0" stop_daemon 30
finish
