#!/usr/bin/env bash
# SIGTERM after the Kafka cluster is gone (its process killed, so that no
# connection is even refused): the group cannot be left, and librdkafka's
# own close waits for the group coordinator forever. The daemon gives up
# after 5 s, says so, and exits 0 once its group session has timed out
# (session.timeout.ms, 6 s here).
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

make_repo "$WORK/repo"
check "mock cluster up" start_mock sin:8 sout:8 sdlq:2
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "daemon joins the group" start_kafka_daemon stop --set kafka.input_topics=sin \
    --set kafka.output_topic=sout --set kafka.dead_letter_topic=sdlq --set kafka.group_id=stop \
    --set models.watch=false --set kafka.consumer.session.timeout.ms=6000
"$KAFKA_TOOL" feed -b "$BOOT" -t sin --count 2000 --format binary > /dev/null
check "2,000 records answered" collect sout 2000 "$WORK/out" --timeout 60
check "the cluster killed" kill -9 "$MOCK_PID"
wait "$MOCK_PID" 2> /dev/null
check "/metrics: no broker up" wait_for 20 \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_kafka_brokers_up 0'"

# 5 s of trying to leave, then the 6-s session: about 11 s, 9 s of margin
check "SIGTERM with no cluster: exit 0 within 20 s" stop_daemon 20
check "the log says the group was not left" grep -q "group stop not left after 5000 ms" "$LOG"
finish
