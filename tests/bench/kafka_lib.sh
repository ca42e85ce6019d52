# kafka_lib.sh: shell helpers shared by the Kafka benchmarks (kafka_vs_python,
# kafka_latency, kafka_scale): a fashion-mlp repository, a kafka_tool mock
# cluster, daemons with the shipped defaults, /metrics, CPU ticks from /proc
# and rates from collected output topics. Sourced, not run; the caller sets
# `set -euo pipefail`, NAME (its name, for messages) and calls kb_setup.
# shellcheck shell=bash

PY=/usr/bin/python3
HZ=$(getconf CLK_TCK)
kb_pids=()
kb_cleanup() {
    local p
    for p in "${kb_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap kb_cleanup EXIT

kb_die() { echo "${NAME:-kafka_lib}: $*" >&2; exit 1; }

# kb_setup SRC BUILD: checks the build, copies dlserve and kafka_tool into
# OUT_DIR (a rebuild mid-run changes nothing) and trains fashion-mlp for one
# short epoch into OUT_DIR/repo (the weights matter only as the same weights
# on each side). Sets D, KT, REPO.
kb_setup() {
    local src=$1 build=$2
    case $build in /*) ;; *) [ -d "$build" ] || build=$src/$build ;; esac
    if [ ! -x "$build/dlserve" ] || [ ! -x "$build/tests/kafka_tool" ]; then
        echo "$NAME: $build/dlserve or tests/kafka_tool not found (build first)" >&2
        exit 2
    fi
    mkdir -p "$OUT_DIR/repo/fashion-mlp"
    cp "$build/dlserve" "$build/tests/kafka_tool" "$OUT_DIR/"
    D=$OUT_DIR/dlserve KT=$OUT_DIR/kafka_tool REPO=$OUT_DIR/repo
    cp "$src/models/fashion-mlp/model.json" "$REPO/fashion-mlp/"
    "$D" --train "$REPO/fashion-mlp" --epochs 1 --limit 3000 --no-progress > /dev/null 2>&1 ||
        kb_die "training fashion-mlp failed"
}

# kb_mock TOPIC:PARTITIONS...: starts a mock cluster (kafka_tool mock, its
# own process) with those topics; sets B (bootstrap) and MOCK_PID.
kb_mock() {
    local args=() t
    for t in "$@"; do args+=(--topic "$t"); done
    mkfifo "$OUT_DIR/mock.in"
    "$KT" mock "${args[@]}" < "$OUT_DIR/mock.in" > "$OUT_DIR/mock.out" 2>&1 &
    MOCK_PID=$!
    kb_pids+=("$MOCK_PID")
    exec 7> "$OUT_DIR/mock.in"
    B=
    for _ in $(seq 300); do
        B=$(sed -n 's/^bootstrap=//p' "$OUT_DIR/mock.out")
        [ -n "$B" ] && break
        sleep 0.1
    done
    [ -n "$B" ] || kb_die "the mock cluster did not start: $(cat "$OUT_DIR/mock.out")"
}

# kb_daemon NAME GROUP IN OUT [ARGS]: a daemon with the shipped defaults
# (conf/dlserve.conf is every built-in default) but for brokers, topics,
# group, model folder and an HTTP port of its own (0: any free port, as
# several daemons and other programs share the machine); ARGS are more
# --set options. Its log is OUT_DIR/NAME.log; sets dpid.
kb_daemon() {
    local name=$1 group=$2 in=$3 out=$4
    shift 4
    "$D" --models "$REPO" --set http.port=0 --set kafka.brokers="$B" \
        --set kafka.input_topics="$in" --set kafka.output_topic="$out" \
        --set kafka.dead_letter_topic=dlq --set kafka.group_id="$group" \
        "$@" 2> "$OUT_DIR/$name.log" &
    dpid=$!
    kb_pids+=("$dpid")
}

# kb_port NAME: daemon NAME's HTTP port, from its log (waits for it: the
# port is logged once the models are loaded).
kb_port() {
    local port=
    for _ in $(seq 1200); do
        port=$(sed -n 's/.*listening on http:[^ ]*:\([0-9]*\),.*/\1/p' "$OUT_DIR/$1.log" 2> /dev/null | head -1)
        [ -n "$port" ] && { echo "$port"; return 0; }
        sleep 0.05
    done
    kb_die "daemon $1 logged no HTTP port in 60 s: $(tail -3 "$OUT_DIR/$1.log")"
}

# kb_metric PORT NAME: the value of the unlabelled metric NAME (0 if none).
kb_metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { v = int($2) } END { print v + 0 }'
}

# kb_delivered PORT COUNT: waits until the daemon on PORT counts COUNT
# outputs delivered (acknowledged by the broker).
kb_delivered() {
    local n
    for _ in $(seq 3000); do
        n=$(kb_metric "$1" dlserve_kafka_outputs_total)
        [ "$n" -ge "$2" ] && return 0
        sleep 0.1
    done
    kb_die "the daemon on port $1 delivered $n of $2 outputs in 300 s"
}

# kb_wait_log FILE PATTERN: waits (60 s at most) until FILE holds PATTERN.
kb_wait_log() {
    for _ in $(seq 6000); do
        grep -qs -- "$2" "$1" && return 0
        sleep 0.01
    done
    kb_die "$1: no '$2' in 60 s"
}

# kb_ticks PID: CPU ticks (utime + stime) of a process or of a thread (PID/task/TID).
kb_ticks() { cut -d')' -f2 "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

# kb_thread_ticks PID: one line "NAME TICKS" per thread of PID, librdkafka's
# rdk:brokerN threads under one name, rdk:broker*.
kb_thread_ticks() {
    local t name
    for t in /proc/"$1"/task/*; do
        name=$(cat "$t/comm" 2> /dev/null) || continue
        case $name in rdk:broker*) name='rdk:broker*' ;; esac
        echo "${name// /_} $(kb_ticks "$1/task/${t##*/}" 2> /dev/null || echo 0)"
    done
}

# kb_snap PID [NAME=PID...]: one line "NAME TICKS" per thread of PID (as
# kb_thread_ticks) and per extra process, in one awk: quick enough to be
# taken every few milliseconds.
kb_snap() {
    local files=(/proc/"$1"/task/*/stat) extra=() kv
    shift
    for kv in "$@"; do files+=("/proc/${kv#*=}/stat"); extra+=("$kv"); done
    awk -v extra="${extra[*]}" '
        BEGIN {
            n = split(extra, e, " ")
            for (i = 1; i <= n; i++) { split(e[i], kv, "="); proc["/proc/" kv[2] "/stat"] = kv[1] }
        }
        FNR == 1 {
            n = split($0, a, ") ")
            name = substr(a[1], index(a[1], "(") + 1)
            split(a[n], f, " ")
            if (name ~ /^rdk:broker/) name = "rdk:broker*"
            if (FILENAME in proc) name = proc[FILENAME]
            gsub(/ /, "_", name)
            print name, f[12] + f[13]
        }' "${files[@]}" 2> /dev/null || true
}

# kb_snap_until FILE PATTERN OUT PID [NAME=PID...]: takes kb_snap PID ...
# again and again until FILE holds PATTERN (60 s at most), and keeps in OUT
# the last one taken before a look that did not find it: the CPU just
# before the event that PATTERN logs.
kb_snap_until() {
    local file=$1 pattern=$2 out=$3
    shift 3
    rm -f "$out"
    for _ in $(seq 6000); do
        kb_snap "$@" > "$out.next"
        if grep -qs -- "$pattern" "$file"; then
            if [ -s "$out" ]; then rm -f "$out.next"; else mv "$out.next" "$out"; fi
            return 0
        fi
        mv "$out.next" "$out"
        sleep 0.01   # what runs before the event is idle: no need to spin
    done
    kb_die "$file: no '$pattern' in 60 s"
}

# kb_collect TOPIC COUNT FILE: reads COUNT outputs of TOPIC into FILE
# (kafka_tool collect --out: key, partition, offset, timestamp, headers, value).
kb_collect() {
    "$KT" collect -b "$B" -t "$1" --count "$2" --timeout 120 --out "$3" > /dev/null ||
        kb_die "collect $1: fewer than $2 distinct outputs"
}

# kb_span FILE: records/s of a collected topic, its records over the span
# from its first output's timestamp to its last (the producer sets it when
# it takes the output).
kb_span() {
    $PY -c '
import sys
ts = [int(l.split("\t")[3]) for l in open(sys.argv[1])]
print("%.0f" % (len(ts) / max(1e-3, (max(ts) - min(ts)) / 1000)))' "$1"
}

# kb_us_rec TICKS COUNT: CPU microseconds a record.
kb_us_rec() { $PY -c "print('%.1f' % ($1 * 1e6 / $HZ / $2))"; }
