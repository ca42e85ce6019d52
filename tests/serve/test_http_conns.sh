#!/usr/bin/env bash
# 1,000 concurrent keep-alive connections to one daemon: every request is
# answered, the daemon holds them all with a bounded number of threads
# (connections do not cost threads), and /status's in-flight count comes
# back to 0. The client is tests/serve/many_conns.py (standard library).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
CONNS=1000
SECOND=10          # a second request on every 10th connection: 100
HTTP_THREADS=2
# The bound: the HTTP event loops plus a fixed allowance for the rest of
# the daemon (main thread, acceptor, batcher worker, model watcher, and
# room for library helper threads); the daemon runs 6 in all on 2 loops.
# Before the event loops it was one thread per connection: over 1,000 here.
MAX_THREADS=$((HTTP_THREADS + 8))

# The client, and the daemon it starts, each need a descriptor a connection.
ulimit -n 4096 2> /dev/null || ulimit -n "$(ulimit -Hn)"
check "the descriptor limit allows $CONNS connections" test "$(ulimit -n)" -ge $((CONNS + 200))

REPO=$WORK/models
make_repo "$REPO"
check "a trained version to serve" test -s "$REPO/fashion-mlp/1/model.safetensors"
/usr/bin/python3 "$SRC/tests/py/make_request.py" 5 1 > "$WORK/req1.json"

start_daemon conns --models "$REPO" --set http.threads=$HTTP_THREADS --set models.threads=1
check "daemon starts and logs its port" test -n "$PORT"
check "the log names the event-loop threads" grep -q "listening on .*, $HTTP_THREADS threads" "$LOG"
check "a first infer request is 200" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 200

/usr/bin/python3 "$SRC/tests/serve/many_conns.py" "$URL/v2/models/fashion-mlp/infer" \
    "$WORK/req1.json" "$PID" $CONNS $SECOND "$WORK/conns.json"
check "the client ran to the end" test -s "$WORK/conns.json"
r() { /usr/bin/python3 -c 'import json,sys; print(eval(sys.argv[2], {}, json.load(open(sys.argv[1]))))' \
    "$WORK/conns.json" "$1" 2> /dev/null; }
want=$((CONNS + CONNS / SECOND))
check "every request is answered ($want)" test "$(r answers)" = $want
check "every answer is 200" test "$(r 'codes.get("200", 0)')" = $want
check "every answer is a prediction (10 probabilities summing to 1)" test "$(r bad_bodies)" = 0
check "no connection was closed by the daemon (keep-alive)" test "$(r closed)" = 0
check "the daemon held all $CONNS connections at once (sockets: $(r daemon_sockets))" \
    test "$(r daemon_sockets)" -ge $CONNS
check "threads stayed bounded: at most $MAX_THREADS (saw $(r max_threads))" \
    test "$(r max_threads)" -le $MAX_THREADS -a "$(r max_threads)" -gt 0
check "in flight is 0 with $CONNS idle connections open" test "$(r in_flight)" = 0

code GET /status > /dev/null
check "in flight is 0 once they closed" test "$(jq_get 'd["http"]["requests_in_flight"]')" = 0
code GET /metrics > /dev/null
check "metrics count every request a success" /usr/bin/python3 - "$WORK/body" $((want + 1)) <<'PY'
import re, sys
t = open(sys.argv[1]).read()
ok = sum(float(v) for v in re.findall(r'^nv_inference_request_success\{[^}]*\} (\S+)', t, re.M))
sys.exit(not ok == int(sys.argv[2]))
PY
check "SIGTERM: exit 0 within 10 s" stop_daemon

finish
