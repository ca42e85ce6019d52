#!/usr/bin/env bash
# Exactly-once delivery against the mock cluster: outputs and dead letters
# are visible to read_committed readers only once their transaction
# commits; a failed delivery aborts the transaction and rewinds to the
# committed offsets; a fenced producer stops intake and says so while HTTP
# serves.
#
# The mock does not store offsets sent inside a transaction
# (send_offsets_to_transaction): a rewind therefore goes back to the
# beginning of each partition, and records whose transaction had committed
# come out again. That is the mock's limit, not the protocol's: the test
# checks the call sequence (commits, an abort, the rewind) and that every
# id reaches the output, and counts those duplicates without bounding them.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"

make_repo "$WORK/repo"
check "mock cluster up" start_mock ein:4 eout:4 edlq:2
trap 'kill -9 ${PID:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
EOS=(--set kafka.delivery=exactly-once --set kafka.input_topics=ein --set kafka.output_topic=eout
     --set kafka.dead_letter_topic=edlq --set kafka.group_id=eg --set kafka.transactional_id=eos-1
     --set kafka.commit_interval_ms=50 --set models.watch=false
     --set kafka.consumer.session.timeout.ms=6000 --set kafka.consumer.heartbeat.interval.ms=500)

check "daemon with a transactional producer" start_kafka_daemon eos "${EOS[@]}"
"$KAFKA_TOOL" feed -b "$BOOT" -t ein --count 1000 --format json > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t ein --count 500 --start 1000 --format binary > /dev/null
"$KAFKA_TOOL" feed -b "$BOOT" -t ein --count 5 --bad shape > /dev/null
check "read_committed: 1,500 outputs" collect eout 1500 "$WORK/eout.out" --read-committed --timeout 60
check "read_committed: no duplicates in a clean run" test "$(summary "$WORK/eout.out" duplicates)" -eq 0
check "read_committed: the dead letters, in their transactions" \
    collect edlq 5 "$WORK/edlq.out" --read-committed --timeout 30
check "transactions committed" wait_for 10 kstatus 'k["transactions_committed"] > 0'
check "no transaction aborted yet" kstatus 'k["transactions_aborted"] == 0'

# A produce request fails for good: the transaction cannot commit. The
# daemon aborts it, rewinds to the committed offsets and serves again.
# (The error is armed while no one else produces: the daemon is stopped,
# the records are fed, then the daemon's first produce request fails.)
check "stopped before arming the failure" stop_daemon
"$KAFKA_TOOL" feed -b "$BOOT" -t ein --count 300 --start 2000 --format binary > /dev/null
check "the next produce request will fail" mock_cmd err Produce 1 MSG_SIZE_TOO_LARGE
check "restarted" start_kafka_daemon eos-again "${EOS[@]}"
check "the transaction was aborted" wait_for 30 kstatus 'k["transactions_aborted"] >= 1'
check "the log says it aborted and rewound" \
    sh -c "grep -q 'transaction aborted' '$LOG' && grep -q 'rewound 4 partitions' '$LOG'"
check "commits go on after the abort" wait_for 30 kstatus 'k["transactions_committed"] > 0 and not k.get("fatal")'
check "every id of 1,800 reaches the committed output" \
    collect eout 1800 "$WORK/eout2.out" --read-committed --timeout 90
echo "# replayed after the rewind (the mock kept no transactional offsets): $(summary "$WORK/eout2.out" duplicates)"

# Fencing: the broker answers PRODUCER_FENCED, as it does when another
# producer took the same transactional.id (the mock does not fence by
# itself, so the answer is injected into its EndTxn responses).
check "the broker will answer PRODUCER_FENCED" mock_cmd err EndTxn 3 PRODUCER_FENCED
"$KAFKA_TOOL" feed -b "$BOOT" -t ein --count 50 --start 3000 --format binary > /dev/null
check "fenced: intake stops, /status says why" \
    wait_for 30 kstatus '"fenced" in k.get("fatal", "").lower()'
check "/metrics: dlserve_kafka_up 0" sh -c "curl -s $URL/metrics | grep -qx 'dlserve_kafka_up 0'"
$PY "$SRC/tests/py/make_request.py" 0 1 > "$WORK/req.json"
check "HTTP keeps serving on the fenced daemon" sh -c "curl -s -o /dev/null -w '%{http_code}' \
    -d @'$WORK/req.json' $URL/v2/models/fashion-mlp/infer | grep -qx 200"
check "the fenced daemon stops cleanly" stop_daemon
finish
