#!/usr/bin/env bash
# Many daemons, one consumer group, with the delivery modes that promise
# each result once, against a librdkafka mock cluster (kafka_tool mock)
# and a real redis-server.
#
# redis delivery: three daemons share 24 input partitions, a keyed stream
# flows in, one daemon is killed with SIGKILL mid-stream, and the two
# survivors take its partitions over from the offsets stored in Redis.
# Every record has its result in Redis, and Redis's MONITOR shows each
# result written once across the kill (results and offsets go together in
# one MULTI/EXEC, so what the dead member wrote is not written again).
#
# exactly-once: three daemons in one group, each with the default
# transactional id (dlserve-<group_id>-<host>-<http port>), run side by
# side: their ids differ, none is fenced, each commits transactions, and
# every record reaches the output for read_committed readers. The mock
# fences no producer whose id another takes, so the ids themselves are
# checked in /status (kafka.transactional_id). It does not store offsets
# sent in a transaction either, so a partition that moves starts again from
# its beginning: the records are fed once the members share the
# partitions, and duplicates are counted, not bounded.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
. "$SRC/tests/lib/lib_redis.sh"
N=6000 RATE=1000
PIDS=() URLS=()

make_repo "$WORK/repo"
check "mock cluster up" start_mock rin:24 rdlq:2 ein:24 eout:24 edlq:2
check "redis-server up" start_redis
trap 'kill -9 ${PIDS[*]:-} ${FEED:-} ${MON:-} 2>/dev/null; stop_redis; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# A member that dies is noticed after session.timeout.ms: 6 s, not
# librdkafka's 45 s, with heartbeats to match.
COMMON=(--set models.watch=false --set kafka.consumer.session.timeout.ms=6000
        --set kafka.consumer.heartbeat.interval.ms=500)

# start_members ARGS...: members 0, 1 and 2 of a group, one after another.
start_members() {
    local i
    for i in 0 1 2; do
        start_kafka_daemon "$NAME$i" "$@" || return 1
        PIDS[i]=$PID URLS[i]=$URL
    done
}

# mstatus I EXPR: prints EXPR on member I's /status "kafka" object (k).
mstatus() {
    curl -s "${URLS[$1]}/status" |
        $PY -c 'import json,sys; k=json.load(sys.stdin)["kafka"]; print(eval(sys.argv[1]))' "$2"
}

# shares_are MEMBERS...: the members' assignments cover the 24 partitions
# once, in equal shares (24 / the members): the end of a cooperative
# rebalance, whose two rounds may hold every partition once in uneven
# shares in between (test_kafka_group.sh).
shares_are() {
    local all="" i a
    for i in "$@"; do
        a=$(mstatus "$i" '"\n".join(k["assignment"])')
        [ "$(printf '%s\n' "$a" | grep -c .)" -eq $((24 / $#)) ] || return 1
        all+=$a$'\n'
    done
    [ "$(printf '%s' "$all" | grep -c .)" -eq 24 ] &&
        [ "$(printf '%s' "$all" | sort -u | grep -c .)" -eq 24 ]
}

# ---- redis delivery: one of three members killed, each result written once ----
redis-cli -p $RPORT monitor > "$WORK/monitor.log" &
MON=$!
NAME=r
RD=(--set kafka.delivery=redis --set kafka.input_topics=rin --set kafka.dead_letter_topic=rdlq
    --set kafka.group_id=rg --set redis.host=127.0.0.1 --set redis.port=$RPORT "${COMMON[@]}")
check "three members with redis delivery join the group" start_members "${RD[@]}"
check "the three members share the 24 partitions" wait_for 60 shares_are 0 1 2
for i in 0 1 2; do
    mstatus $i '"\n".join(k["assignment"])' > "$WORK/before.$i"
    echo "# member $i: $(grep -c . "$WORK/before.$i") partitions"
done
"$KAFKA_TOOL" feed -b "$BOOT" -t rin --count $N --rate $RATE --format binary > "$WORK/feed" 2>&1 &
FEED=$!
URL=${URLS[2]}
check "member 2 writes results" wait_for 30 kstatus 'k["outputs"] >= 100'
# Margin: the stream lasts 6 s (N at RATE); member 2, a third of it, has
# 100 answered about 0.3 s in, plus its latency and a poll (0.2 s).
check "the stream still flows when member 2 is killed" kill -0 $FEED
kill -9 "${PIDS[2]}"
wait "${PIDS[2]}" 2>/dev/null
check "the feeder produced every record" wait $FEED
check "the survivors take over every partition" wait_for 60 shares_are 0 1
for i in 0 1; do
    mstatus $i '"\n".join(k["assignment"])' > "$WORK/after.$i"
    echo "# member $i after: $(grep -c . "$WORK/after.$i") partitions"
done
took_over() {   # every partition of the dead member is now a survivor's
    ! comm -23 <(sort "$WORK/before.2") <(sort -u "$WORK/after.0" "$WORK/after.1") | grep -q .
}
check "the dead member's partitions went to the survivors" took_over
results_are() { [ "$(redis-cli -p $RPORT --scan --pattern 'dlserve:result:*' | wc -l)" -eq "$1" ]; }
check "$N results in Redis" wait_for 90 results_are $N
offsets_at_end() {   # the stored offsets reach the end of every partition
    $PY - "$RPORT" "$N" <<'PYEOF'
import subprocess, sys
h = subprocess.run(["redis-cli", "-p", sys.argv[1], "hgetall", "dlserve:offsets:rg:rin"],
                   capture_output=True, text=True).stdout.split()
stored = dict(zip(h[::2], map(int, h[1::2])))
sys.exit(0 if len(stored) == 24 and sum(stored.values()) == int(sys.argv[2]) else 1)
PYEOF
}
check "the stored offsets reach the end of every partition" wait_for 30 offsets_at_end
for i in 0 1; do
    URL=${URLS[$i]}
    check "member $i settles" wait_for 30 kstatus 'k["in_flight"] == 0'
    PID=${PIDS[$i]}
    check "member $i stops cleanly" stop_daemon 30
done
kill $MON
wait $MON 2>/dev/null
MON=""
once() {
    $PY - "$WORK/monitor.log" "$N" <<'PYEOF'
import collections, re, sys
log = open(sys.argv[1]).read()
n = collections.Counter(re.findall(r'"SET" "dlserve:result:([^"]+)"', log))
twice = [k for k, c in n.items() if c != 1]
print("# %d ids written in %d MULTI/EXEC, %d more than once %s"
      % (len(n), log.count('"EXEC"'), len(twice), twice[:5]))
sys.exit(0 if len(n) == int(sys.argv[2]) and not twice else 1)
PYEOF
}
check "MONITOR: every id's result was written exactly once across the kill" once

# ---- exactly-once: three members, default transactional ids, none fenced ------
NAME=e
PIDS=() URLS=()
EOS=(--set kafka.delivery=exactly-once --set kafka.input_topics=ein --set kafka.output_topic=eout
     --set kafka.dead_letter_topic=edlq --set kafka.group_id=eg --set kafka.commit_interval_ms=50
     "${COMMON[@]}")
check "three exactly-once members join the group" start_members "${EOS[@]}"
check "the three members share the 24 partitions" wait_for 60 shares_are 0 1 2
for i in 0 1 2; do
    mstatus $i 'k["transactional_id"]' > "$WORK/txn.$i"
    echo "# member $i: transactional id $(cat "$WORK/txn.$i")"
done
id_is_mine() {   # id_is_mine I: member I's id names the group, the host and its port
    grep -qx "dlserve-eg-$(hostname)-${URLS[$1]##*:}" "$WORK/txn.$1"
}
for i in 0 1 2; do
    check "member $i's id is dlserve-eg-<host>-<its http port>" id_is_mine $i
done
check "three distinct transactional ids" \
    test "$(cat "$WORK/txn.0" "$WORK/txn.1" "$WORK/txn.2" | sort -u | wc -l)" -eq 3
"$KAFKA_TOOL" feed -b "$BOOT" -t ein --count 2000 --format binary > /dev/null
check "read_committed: every id of 2,000 reaches the output" \
    collect eout 2000 "$WORK/eout.out" --read-committed --timeout 90
echo "# read_committed duplicates: $(summary "$WORK/eout.out" duplicates)"
for i in 0 1 2; do
    URL=${URLS[$i]}
    check "member $i commits transactions, not fenced" wait_for 30 \
        kstatus 'k["transactions_committed"] > 0 and "fatal" not in k'
done
for i in 0 1 2; do
    PID=${PIDS[$i]}
    check "member $i stops cleanly" stop_daemon 30
done
finish
