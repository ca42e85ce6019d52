#!/usr/bin/env bash
# HTTP edges: a refusal decided before the body (413, 404, ...) is sent
# once the body has been read and discarded (for up to 10 s or 512 MiB),
# so that clients which send their whole body first (Python's urllib)
# read it, a 40 MiB one included; limits on URL length
# (414), header size (431) and connections (503, http.max_connections;
# past that and its 64 for answers, the listen backlog).
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
EDGES=$SRC/tests/serve/http_edges.py
mkdir -p "$WORK/repo"
check "daemon up" start_daemon edges --models "$WORK/repo" --set http.max_body_bytes=1048576 \
    --set http.max_connections=8
edge() { /usr/bin/python3 "$EDGES" "$PORT" "$@"; }
check "urllib reads the 413 of a body it sent whole" edge urllib_413
check "urllib reads the 404 of a body it sent whole" edge urllib_404
check "a chunked body over the limit: 413" edge chunked_413
check "the connection stays usable after a drained 413" edge keepalive_after_413
check "a body declared far over the limit: 413 at once" edge huge_declared
check "urllib sends 40 MiB (limit 1 MiB) and reads the 413" edge urllib_413_size 41943040
head -c 1500000 /dev/zero > "$WORK/big"
check "curl (Expect: 100-continue) gets 413 without sending" \
    test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/big")" = 413
check "URL too long: 414" edge url_414
check "headers too large: 431" edge header_431
check "connections over http.max_connections: 503 (Retry-After), then served" edge connections_503 8
check "the log names the connection limit" grep -q "too many connections" "$LOG"
check "past the hard limit a connection waits, then is answered" edge connections_backlog 8
check "no connection was accepted only to be closed" \
    sh -c "! grep -q 'reached connection limit' '$LOG'"
check "stops cleanly" stop_daemon
finish
