#!/usr/bin/env bash
# burst_rounds.sh: how often a burst of connections opened at one instant
# goes unanswered. Not in the test suite (it measures a rate over many
# rounds); test_http.sh's "one event loop" part sends such bursts.
#
#   DLSERVE=build/dlserve DLSERVE_SOURCE_ROOT=. tests/serve/burst_rounds.sh \
#       ROUNDS [REQUESTS [--set KEY=VALUE...]]
#
# One daemon serving fashion-cnn (trained briefly here) with one event loop
# (http.threads=1, as test_http.sh's part; later --set arguments override
# it). Each round, curl opens 128 connections at once (--parallel
# --parallel-immediate) and sends REQUESTS (default 128) single-image infer
# requests over them, each given up after 10 s. A round still running
# after 3 s gets a line on what the server's sockets hold then (ss): how
# many requests are still unread by the server, how many connections have
# had an answer. The last line: rounds with a request unanswered, of
# ROUNDS. Before the event loops ran libmicrohttpd's epoll themselves
# (http_loop.c), 7 rounds of 300 at 128 requests and 10 of 100 at 640
# stalled, every request of the round unread.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
rounds=${1:?usage: burst_rounds.sh ROUNDS [REQUESTS [--set KEY=VALUE...]]}
requests=${2:-128}
shift $(( $# < 2 ? $# : 2 ))
mkdir -p "$WORK/cnn/fashion-cnn"
cp "$SRC/models/fashion-cnn/model.json" "$WORK/cnn/fashion-cnn/"
"$DLSERVE" --train "$WORK/cnn/fashion-cnn" --epochs 1 --limit 256 --threads 1 --no-progress \
    > /dev/null 2>&1
/usr/bin/python3 "$SRC/tests/py/make_request.py" 3 1 > "$WORK/req1.json"
start_daemon burst --models "$WORK/cnn" --set http.threads=1 --set batching.max_batch_size=64 \
    --set batching.direct_max_us=100000 \
    "$@" || { echo "the daemon did not start"; exit 1; }
# max-time in each transfer's block: "next" resets the options before it.
for i in $(seq "$requests"); do
    [ "$i" -gt 1 ] && echo next
    echo "url = \"$URL/v2/models/fashion-cnn/infer\""
    echo "data-binary = \"@$WORK/req1.json\""
    echo "output = \"/dev/null\""
    echo "write-out = \"%{http_code}\\n\""
    echo "max-time = 10"
done > "$WORK/burst.cfg"

# at_3s: the server's established sockets: open, request unread, answered.
at_3s() {
    ss -tni state established "( sport = :$PORT )" > "$WORK/ss" 2>&1
    printf '  [at 3 s: %d open, %d with a request unread, %d answered]' \
        "$(grep -c '^[0-9]' "$WORK/ss")" "$(awk '$1 ~ /^[0-9]+$/ && $1 > 0' "$WORK/ss" | wc -l)" \
        "$(grep -c bytes_acked "$WORK/ss")"
}

stalled=0
for r in $(seq "$rounds"); do
    t0=$(date +%s.%N)
    curl -s --no-progress-meter --parallel --parallel-immediate --parallel-max 128 \
        -K "$WORK/burst.cfg" > "$WORK/codes" &
    cpid=$!
    for _ in $(seq 30); do kill -0 $cpid 2>/dev/null || break; sleep 0.1; done
    note=""
    kill -0 $cpid 2>/dev/null && note=$(at_3s)
    wait $cpid
    answered=$(grep -c '^200$' "$WORK/codes")
    [ "$answered" -ne "$requests" ] && stalled=$((stalled + 1))
    printf 'round %d: %d of %d answered, %.2f s%s\n' "$r" "$answered" "$requests" \
        "$(echo "$(date +%s.%N) - $t0" | bc)" "$note"
done
echo "$stalled of $rounds rounds with requests unanswered"
stop_daemon
