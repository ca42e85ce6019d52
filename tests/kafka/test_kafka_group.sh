#!/usr/bin/env bash
# Many daemons, one consumer group, against a librdkafka mock cluster
# (kafka_tool mock): three daemons share 24 input partitions (each shows
# its share in /status: kafka.assigned_partitions and kafka.assignment), a
# keyed stream flows in, one daemon is killed with SIGKILL mid-stream, and
# the two survivors take its partitions over (keeping their own: the
# assignment is cooperative-sticky). Every record is answered; duplicates
# (at-least-once) come only from the partitions of the dead member, whose
# records answered but not yet committed are consumed again: they are
# counted and reported.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
N=6000 RATE=1000
# A member that dies is noticed after session.timeout.ms: 6 s, not
# librdkafka's 45 s, with heartbeats to match.
KARGS=(--set kafka.input_topics=in --set kafka.output_topic=out
       --set kafka.dead_letter_topic=dlq --set kafka.group_id=grp --set models.watch=false
       --set kafka.consumer.session.timeout.ms=6000
       --set kafka.consumer.heartbeat.interval.ms=500)
PIDS=() URLS=()

make_repo "$WORK/repo"
check "mock cluster up" start_mock in:24 out:24 dlq:2
trap 'kill -9 ${PIDS[*]:-} ${FEED:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
# Member 2 commits every 2 s, so that it dies holding answered records
# whose offsets are not committed yet: they are answered again.
for i in 0 1 2; do
    check "daemon $i joins the group" start_kafka_daemon "m$i" "${KARGS[@]}" \
        --set kafka.commit_interval_ms=$([ $i = 2 ] && echo 2000 || echo 100)
    PIDS[i]=$PID URLS[i]=$URL
done

# assigned_of I: member I's assignment, "topic/partition" a line.
assigned_of() {
    curl -s "${URLS[$1]}/status" |
        $PY -c 'import json,sys; print("\n".join(json.load(sys.stdin)["kafka"]["assignment"]))'
}

# shares_are MEMBERS...: the members' assignments cover the 24 partitions
# once, in equal shares (24 / the members). Equal shares mark the end of a
# cooperative rebalance: partitions move in two rounds, and between them
# every partition may be held once in uneven shares (8, 12 and 4 seen on a
# busy machine), some of them about to move; an assignment read then is
# not the one a member keeps.
shares_are() {
    local all="" i a
    for i in "$@"; do
        a=$(assigned_of "$i")
        [ "$(printf '%s\n' "$a" | grep -c .)" -eq $((24 / $#)) ] || return 1
        all+=$a$'\n'
    done
    [ "$(printf '%s' "$all" | grep -c .)" -eq 24 ] &&
        [ "$(printf '%s' "$all" | sort -u | grep -c .)" -eq 24 ]
}
check "the three members share the 24 partitions" wait_for 60 shares_are 0 1 2
for i in 0 1 2; do
    assigned_of $i > "$WORK/before.$i"
    echo "# member $i: $(grep -c . "$WORK/before.$i") partitions"
done

# A keyed stream of N records (keys img-0 .. img-N-1) at RATE a second;
# member 2 is killed once it has answered some, while the stream flows.
"$KAFKA_TOOL" feed -b "$BOOT" -t in --count $N --rate $RATE > "$WORK/feed.json" 2>&1 &
FEED=$!
URL=${URLS[2]}
check "member 2 answers records" wait_for 30 kstatus 'k["outputs"] >= 100'
# Margin: the stream lasts 6 s (N at RATE); member 2, a third of it, has
# 100 answered about 0.3 s in, plus its latency and a poll (0.2 s).
check "the stream still flows when member 2 is killed" kill -0 $FEED
kill -9 "${PIDS[2]}"
wait "${PIDS[2]}" 2>/dev/null
check "the feeder produced every record" wait $FEED

check "the survivors take over every partition" wait_for 60 shares_are 0 1
for i in 0 1; do
    assigned_of $i > "$WORK/after.$i"
    echo "# member $i after: $(grep -c . "$WORK/after.$i") partitions"
done
# kept I: member I still holds every partition it held before.
kept() {
    ! comm -23 <(sort "$WORK/before.$1") <(sort "$WORK/after.$1") | grep -q .
}
check "cooperative-sticky: member 0 kept its own partitions" kept 0
check "cooperative-sticky: member 1 kept its own partitions" kept 1
check "every record answered" collect out $N "$WORK/out" --timeout 90
# The survivors settle (nothing in flight), then the topic is read whole.
for i in 0 1; do
    URL=${URLS[$i]}
    check "member $i settles" wait_for 30 kstatus 'k["in_flight"] == 0'
done
check "the output topic read whole" \
    "$KAFKA_TOOL" collect -b "$BOOT" -t out --idle 2 --timeout 60 --out "$WORK/all" \
    > "$WORK/all.summary"
check "duplicates only from the dead member's partitions" \
    $PY - "$WORK/all" "$WORK/before.2" $N <<'PYEOF'
import collections, sys
path, dead_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
dead = {l.strip() for l in open(dead_path) if l.strip()}
seen = collections.defaultdict(list)
for line in open(path):
    key, part, off, ts, hdrs, value = line.rstrip("\n").split("\t", 5)
    h = dict(kv.split("=", 1) for kv in hdrs.split(";") if kv)
    seen[key].append("%s/%s" % (h["dlserve-source-topic"], h["dlserve-source-partition"]))
assert len(seen) == n, ("distinct keys", len(seen), n)
dups = {k: v for k, v in seen.items() if len(v) > 1}
extra = sum(len(v) - 1 for v in dups.values())
stray = {k: v for k, v in dups.items() if not set(v) <= dead}
print("# %d records answered, %d of them more than once (%d extra outputs), all from the "
      "dead member's %d partitions" % (n, len(dups), extra, len(dead)))
assert not stray, ("duplicates from a survivor's partition", list(stray.items())[:5])
PYEOF
for i in 0 1; do
    PID=${PIDS[$i]}
    check "member $i stops cleanly" stop_daemon 30
done
finish
