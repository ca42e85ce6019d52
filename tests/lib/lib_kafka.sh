# tests/lib/lib_kafka.sh: a Kafka mock cluster and its helpers for the
# Kafka, Redis, status page and soak tests (sourced after tests/lib/lib.sh
# and tests/lib/lib_serve.sh). The cluster runs in kafka_tool
# (tests/tools/kafka_tool.c), outside the daemon, so that it survives the
# daemon being killed.
KAFKA_TOOL=${KAFKA_TOOL:?set KAFKA_TOOL to the kafka_tool binary}
PY=/usr/bin/python3

# start_mock TOPIC:PARTITIONS...: sets MOCK_PID and BOOT; commands go
# through mock_cmd, answers to $WORK/mock.out. MOCK_BROKERS brokers
# (default 1). Up is waited for 30 s, an answer to a command 20 s: each
# takes milliseconds, and the bounds cost nothing when it comes.
start_mock() {
    mkfifo "$WORK/mock.in"
    "$KAFKA_TOOL" mock --brokers "${MOCK_BROKERS:-1}" $(printf -- '--topic %s ' "$@") \
        < "$WORK/mock.in" \
        > "$WORK/mock.out" 2> "$WORK/mock.err" &
    MOCK_PID=$!
    exec 7> "$WORK/mock.in"
    BOOT=""
    for _ in $(seq 300); do
        BOOT=$(sed -n 's/^bootstrap=//p' "$WORK/mock.out")
        [ -n "$BOOT" ] && break
        sleep 0.1
    done
    [ -n "$BOOT" ]
}

# mock_cmd COMMAND...: one command to the cluster; waits for its answer.
mock_cmd() {
    local n; n=$(grep -c '' "$WORK/mock.out")
    echo "$*" >&7
    for _ in $(seq 200); do
        [ "$(grep -c '' "$WORK/mock.out")" -gt "$n" ] && break
        sleep 0.1
    done
    tail -1 "$WORK/mock.out" | grep -qx ok
}

stop_mock() {
    exec 7>&-
    kill "$MOCK_PID" 2>/dev/null
    wait "$MOCK_PID" 2>/dev/null || true
}

# start_kafka_daemon NAME ARGS...: the daemon on $BOOT with the test's
# repository, ready once it has joined the group (partitions assigned).
# Joining a group that has members takes two cooperative rebalances (the
# first assigns the newcomer nothing while the others give partitions up),
# each of which librdkafka 2.0's mock holds for session.timeout.ms less a
# second, however soon the members rejoin (tests/bench/kafka_rejoin): 60 s
# leaves room for a slow sanitizer build or a machine whose cores are all
# busy (with one core spinning and two tests running, a second member's
# join once took over 30 s). When it fails, the daemon's log tail is shown.
start_kafka_daemon() {
    local name=$1; shift
    start_daemon "$name" --models "$WORK/repo" --set kafka.brokers="$BOOT" "$@" || return 1
    for _ in $(seq 600); do
        grep -q "assigned [1-9]" "$LOG" && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$LOG" | sed 's/^/# /'
    return 1
}

# kstatus EXPR: succeeds when EXPR holds on /status's "kafka" object (k).
kstatus() {
    curl -s "$URL/status" > "$WORK/status.json" &&
        $PY -c 'import json,sys; k=json.load(open(sys.argv[1])).get("kafka",{}); sys.exit(0 if eval(sys.argv[2]) else 1)' \
            "$WORK/status.json" "$1"
}

# kget EXPR: prints EXPR on /status's "kafka" object (k).
kget() {
    curl -s "$URL/status" > "$WORK/status.json" &&
        $PY -c 'import json,sys; k=json.load(open(sys.argv[1])).get("kafka",{}); print(eval(sys.argv[2]))' \
            "$WORK/status.json" "$1"
}

# wait_for SECONDS COMMAND...: until the command succeeds.
wait_for() {
    local t=$1; shift
    local end=$((SECONDS + t))
    while [ $SECONDS -lt $end ]; do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}

# collect TOPIC COUNT FILE [args]: reads TOPIC until COUNT distinct keys.
collect() {
    local topic=$1 count=$2 out=$3; shift 3
    "$KAFKA_TOOL" collect -b "$BOOT" -t "$topic" --count "$count" --out "$out" "$@" \
        > "$out.summary" 2> "$out.err"
}

# summary FILE KEY: a number from a collect summary.
summary() {
    $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1.summary" "$2"
}
