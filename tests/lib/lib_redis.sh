# tests/lib/lib_redis.sh: a redis-server of its own for each Redis test
# (sourced after tests/lib/lib.sh, which sets WORK).
PY=/usr/bin/python3

free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_redis: a redis-server on a free port, nothing saved; sets RPORT,
# RPID. Its first PONG is waited for 20 s (it starts in milliseconds).
start_redis() {
    RPORT=${RPORT:-$(free_port)}
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
        > "$WORK/redis-$RPORT.log" 2>&1 &
    RPID=$!
    for _ in $(seq 200); do
        [ "$(redis-cli -p "$RPORT" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    return 1
}

stop_redis() {
    kill "$RPID" 2>/dev/null
    wait "$RPID" 2>/dev/null || true
}
