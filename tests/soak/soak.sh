#!/usr/bin/env bash
# tests/soak/soak.sh [MINUTES]: the daemon under mixed load for MINUTES
# (default 10; SOAK_SECONDS overrides): HTTP inference at a steady rate, a
# Kafka stream (at-least-once) through a mock cluster of three brokers, a
# new model version every SOAK_VERSION_EVERY seconds (30), Redis (the
# registry and a copy of the results) restarted twice, and every broker
# down for SOAK_OUTAGE_SECONDS (20). It ends with a report: failed HTTP
# requests other than 503s that say why (must be 0), Kafka records
# answered (every one, at least once), the resident memory slope (KiB/min,
# least squares over VmRSS sampled every second), open file descriptors
# and threads at the start and the end. Run like a benchmark:
#   DLSERVE=build/dlserve KAFKA_TOOL=build/tests/kafka_tool \
#   DLSERVE_SOURCE_ROOT=$PWD tests/soak/soak.sh 10
# The soak suite of meson runs it for 60 s (asserting the outcomes, no
# timing). SOAK_HTTP_RATE (50/s) and SOAK_KAFKA_RATE (50/s) set the load;
# SOAK_REPORT names a file for the report's JSON.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
. "$SRC/tests/lib/lib_redis.sh"
SECS=${SOAK_SECONDS:-$(( ${1:-10} * 60 ))}
HTTP_RATE=${SOAK_HTTP_RATE:-50}
KAFKA_RATE=${SOAK_KAFKA_RATE:-50}
VERSION_EVERY=${SOAK_VERSION_EVERY:-30}
OUTAGE=${SOAK_OUTAGE_SECONDS:-20}
NREC=$((KAFKA_RATE * SECS))
echo "# soak: ${SECS} s, HTTP ${HTTP_RATE}/s, Kafka ${KAFKA_RATE}/s ($NREC records), a version" \
     "every ${VERSION_EVERY} s, Redis restarted twice, every broker down for ${OUTAGE} s"

REPO=$WORK/repo M=$WORK/repo/fashion-mlp   # start_kafka_daemon serves $WORK/repo
make_repo "$REPO"
$PY "$SRC/tests/py/make_request.py" 0 1 > "$WORK/req.json"
MOCK_BROKERS=3
check "mock cluster of 3 brokers up" start_mock sin:16 sout:16 sdlq:2
check "redis-server up" start_redis
trap 'kill -9 ${PID:-} ${FEED:-} ${COLLECT:-} ${LOAD:-} 2>/dev/null; stop_redis; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "daemon joins the group" start_kafka_daemon soak --set kafka.input_topics=sin \
    --set kafka.output_topic=sout --set kafka.dead_letter_topic=sdlq --set kafka.group_id=soak \
    --set redis.host=127.0.0.1 --set redis.port="$RPORT" --set redis.results=true \
    --set kafka.consumer.reconnect.backoff.max.ms=1000 \
    --set kafka.producer.reconnect.backoff.max.ms=1000 || { finish; exit 1; }

# publish V: version V's weights, written as training does (temp + rename)
publish() {
    mkdir -p "$M/$1"
    cp "$M/1/model.safetensors" "$M/$1/.tmp"
    mv "$M/$1/.tmp" "$M/$1/model.safetensors"
}
sample() {   # T: one line "T rss_kib fds threads"
    local rss thr
    rss=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$PID/status)
    thr=$(sed -n 's/^Threads:[[:space:]]*//p' /proc/$PID/status)
    echo "$1 $rss $(ls /proc/$PID/fd | wc -l) $thr" >> "$WORK/samples.txt"
}
restart_redis() {
    stop_redis
    sleep 2
    start_redis
}

"$KAFKA_TOOL" collect -b "$BOOT" -t sout --count $NREC --timeout $((SECS + 300)) \
    > "$WORK/out.summary" 2> "$WORK/out.err" &
COLLECT=$!
"$KAFKA_TOOL" feed -b "$BOOT" -t sin --count $NREC --rate "$KAFKA_RATE" --format binary \
    --timeout $((SECS + 120)) > "$WORK/feed.json" 2> "$WORK/feed.err" &
FEED=$!
$PY "$SRC/tests/soak/http_steady.py" "$URL/v2/models/fashion-mlp/infer" "$WORK/req.json" \
    "$HTTP_RATE" "$WORK/http.json" &
LOAD=$!

# The schedule: Redis restarts at a third and two thirds, the brokers go
# down around the middle, versions every VERSION_EVERY seconds.
T0=$SECONDS version=1 redis_restarts=0 outage=none
OUT_AT=$(( (SECS - OUTAGE) / 2 ))
while :; do
    t=$((SECONDS - T0))
    [ $t -ge "$SECS" ] && break
    sample $t
    if [ $t -ge $(( version * VERSION_EVERY )) ]; then
        version=$((version + 1)); publish $version
        echo "# $t s: version $version published"
    fi
    if [ $redis_restarts -lt 2 ] && [ $t -ge $(( (redis_restarts + 1) * SECS / 3 )) ]; then
        restart_redis; redis_restarts=$((redis_restarts + 1))
        echo "# $t s: Redis restarted"
    fi
    if [ $outage = none ] && [ $t -ge $OUT_AT ]; then
        mock_cmd down all; outage=on
        echo "# $t s: every broker down"
    fi
    if [ $outage = on ] && [ $t -ge $((OUT_AT + OUTAGE)) ]; then
        mock_cmd up all; outage=over
        echo "# $t s: every broker up"
    fi
    sleep 1
done
touch "$WORK/http.json.stop"
wait $LOAD; LOAD=""
sample $SECS
check "the broker outage was seen (dlserve_kafka_broker_outages_total 1)" \
    sh -c "curl -s $URL/metrics | grep -qx 'dlserve_kafka_broker_outages_total 1'"
check "the feeder delivered every record" wait $FEED
FEED=""
check "every Kafka record answered (at-least-once: each id at least once)" wait $COLLECT
COLLECT=""
check "no dead letters" kstatus 'sum(k["dead_letters"].values()) == 0'
check "the newest version is served" \
    sh -c "curl -s $URL/v2/models/fashion-mlp | grep -q '\"versions\":\[\"$version\"'"
check "stops cleanly" stop_daemon

# The report: HTTP outcomes, Kafka outcomes, memory slope, fds and threads.
$PY - "$WORK/http.json" "$WORK/out.summary" "$WORK/samples.txt" "$NREC" "$SECS" \
    > "$WORK/report.json" <<'PYEOF'
import json, sys
http = json.load(open(sys.argv[1]))
out = json.load(open(sys.argv[2]))
rows = [list(map(int, l.split())) for l in open(sys.argv[3]) if len(l.split()) == 4]
n = len(rows)
ts = [r[0] / 60.0 for r in rows]
rss = [r[1] for r in rows]
def slope_of(ts, ys):   # least squares, KiB a minute
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    den = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / den if den else 0.0
slope = slope_of(ts, rss)
late = slope_of(ts[n // 2:], rss[n // 2:])   # without the warm-up
last = slope_of(ts[3 * n // 4:], rss[3 * n // 4:])
# RSS at each whole minute (and at the end): where it steps, and whether it settles
by_minute = [r[1] for r in rows if r[0] % 60 == 0] + [rows[-1][1]]
bad = sum(v for k, v in http["codes"].items() if k not in ("200", "503"))
# fds and threads: the first sample after the clients connected (5 s in)
start = next((r for r in rows if r[0] >= 5), rows[0])
print(json.dumps({
    "seconds": int(sys.argv[5]),
    "http": {"requests": http["requests"], "codes": http["codes"],
             "failed": bad + http["errors"], "no_answer": http["errors"],
             "error_reasons": http["error_reasons"], "503_reasons": http["503"]},
    "kafka": {"fed": int(sys.argv[4]), "answered_distinct": out["distinct"],
              "duplicates": out["duplicates"]},
    "rss_kib": {"start": start[1], "end": rows[-1][1], "max": max(rss),
                "slope_kib_per_min": round(slope, 1),
                "slope_kib_per_min_second_half": round(late, 1),
                "slope_kib_per_min_last_quarter": round(last, 1),
                "by_minute": by_minute},
    "fds": {"start": start[2], "end": rows[-1][2]},
    "threads": {"start": start[3], "end": rows[-1][3]},
}, indent=1))
PYEOF
cat "$WORK/report.json"
[ -n "${SOAK_REPORT:-}" ] && cp "$WORK/report.json" "$SOAK_REPORT"
rep() { $PY -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' \
        "$WORK/report.json" "$1"; }
check "no failed HTTP request (other than 503s that say why)" \
    rep 'r["http"]["failed"] == 0 and all(r["http"]["503_reasons"])'
check "HTTP was served throughout" rep 'r["http"]["codes"].get("200", 0) > 0'
check "every Kafka record answered" rep 'r["kafka"]["answered_distinct"] == r["kafka"]["fed"]'
check "no growth in open file descriptors" rep 'r["fds"]["end"] <= r["fds"]["start"]'
check "no growth in threads" rep 'r["threads"]["end"] <= r["threads"]["start"]'
finish
