#!/usr/bin/env bash
# SIGTERM after the Kafka cluster is gone (its process killed, so that no
# connection is even refused): the group cannot be left, and librdkafka's
# own close waits for the group coordinator forever. The daemon gives up
# after 5 s, says so, and exits 0 once its group session has timed out
# (session.timeout.ms, 6 s here).
. "$DLSERVE_SOURCE_ROOT/tests/cli/lib.sh"
. "$SRC/tests/serve/lib_serve.sh"
. "$SRC/tests/kafka/lib_kafka.sh"

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

# exited_within SECONDS: SIGTERM, then exit 0 within SECONDS (else killed)
exited_within() {
    kill -TERM "$PID"
    local t0=$SECONDS
    while kill -0 "$PID" 2> /dev/null && [ $((SECONDS - t0)) -lt "$1" ]; do sleep 0.1; done
    echo "# exited after $((SECONDS - t0)) s"
    if kill -0 "$PID" 2> /dev/null; then
        kill -9 "$PID"
        wait "$PID" 2> /dev/null
        tail -n 5 "$LOG" | sed 's/^/# /'
        return 1
    fi
    wait "$PID"
}
check "SIGTERM with no cluster: exit 0 within 20 s" exited_within 20
check "the log says the group was not left" grep -q "group stop not left after 5000 ms" "$LOG"
finish
