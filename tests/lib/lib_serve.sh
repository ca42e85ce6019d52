# tests/lib/lib_serve.sh: starting and stopping a real daemon for the
# serve, Kafka, Redis and soak tests (sourced after tests/lib/lib.sh).

# make_repo DIR: a model repository with fashion-mlp trained briefly (v1).
make_repo() {
    mkdir -p "$1/fashion-mlp"
    cp "$SRC/models/fashion-mlp/model.json" "$1/fashion-mlp/"
    "$DLSERVE" --train "$1/fashion-mlp" --epochs 1 --limit 3000 --threads 1 --no-progress \
        > /dev/null 2>&1
}

# start_daemon NAME ARGS...: starts dlserve on a free port; sets PID, PORT,
# URL and LOG. Fails if it is not ready within 30 s.
start_daemon() {
    local name=$1; shift
    LOG=$WORK/$name.log
    : > "$LOG"   # there to read before the daemon's shell opens it
    "$DLSERVE" --set http.port=0 "$@" > "$WORK/$name.out" 2> "$LOG" &
    PID=$!
    PORT=""
    for _ in $(seq 300); do
        PORT=$(sed -n 's/.*listening on https\?:\/\/[^:]*:\([0-9]*\).*/\1/p' "$LOG" | head -1)
        [ -n "$PORT" ] && break
        kill -0 $PID 2>/dev/null || break
        sleep 0.1
    done
    URL=http://127.0.0.1:$PORT
    [ -n "$PORT" ]
}

# stop_daemon [SECONDS]: SIGTERM, and the exit code within SECONDS (default
# 10; 124 if it hangs).
stop_daemon() {
    kill -TERM $PID 2>/dev/null
    local t0=$SECONDS
    while kill -0 $PID 2>/dev/null && [ $((SECONDS - t0)) -lt "${1:-10}" ]; do sleep 0.1; done
    if kill -0 $PID 2>/dev/null; then
        kill -9 $PID
        wait $PID 2>/dev/null
        return 124
    fi
    wait $PID
}

# code METHOD PATH [curl args...]: prints the HTTP status code; the body
# goes to $WORK/body.
code() {
    local method=$1 path=$2; shift 2
    curl -s -o "$WORK/body" -w '%{http_code}' -X "$method" "$URL$path" "$@"
}

# jq_get EXPR: evaluates a Python expression on the JSON in $WORK/body (as d).
jq_get() {
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
        "$WORK/body" "$1"
}
