#!/bin/bash
# tests/deploy/test_image.sh: the container image of deploy/Containerfile,
# built and run here without a registry. The base is Debian 12 from
# Debian's own packages (mmdebstrap --variant=minbase), imported into
# podman; the Containerfile's stages are built on it as they stand: the
# build stage compiles dlserve inside the image with every feature forced
# on, the runtime stage brings the libraries, the user, volumes, health
# check and entry point, the serve stage the daemon.
#
# Checked: the image's metadata (user 10001, entry point, port, volumes,
# health check, stop signal); the container starts as uid 10001,
# /v2/health/ready answers from the host (network host) and from inside
# (podman exec), the health check passes, an infer request on a model
# mounted at /models is served; SIGTERM (podman stop) answers the 40
# requests held in the batcher (batches delayed 2 s) and the container
# exits 0. The image's dlserve links libcurl and libgrpc and no MPI or
# CUDA, exports spans to an OTLP collector, and the image's size is printed
# and bounded.
#
# The base tarball is cached in $DLSERVE_TEST_CACHE
# (/var/cache/dlserve-test), the images in podman's storage: the first run
# takes 2-3 minutes (mmdebstrap ~60 s, apt in the build and runtime
# stages ~60 s), later ones reuse both and compile dlserve only (~30 s).
# Exits 77 (SKIP) only when podman, buildah or mmdebstrap is missing and
# cannot be installed.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/scripts/lib.sh"

CACHE=${DLSERVE_TEST_CACHE:-/var/cache/dlserve-test}
BASE=localhost/dlserve-test-base:bookworm
IMAGE=localhost/dlserve:test
NAME=dlserve-test-$$
# Containers run here only under runc, with cgroupfs, on the host's network
# and with explicit limits (crun and the default limits are refused).
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
t_start=$SECONDS

if ! command -v podman > /dev/null || ! command -v buildah > /dev/null ||
       ! command -v mmdebstrap > /dev/null; then
    need_packages mmdebstrap buildah podman runc > /dev/null 2>&1 || true
fi
for tool in podman buildah mmdebstrap runc; do
    if ! command -v $tool > /dev/null; then
        echo "SKIP: $tool is not installed and could not be installed (apt-get install $tool)"
        exit 77
    fi
done

cleanup() {
    "${PODMAN[@]}" rm -f -t 0 "$NAME" > /dev/null 2>&1
    # The images this run's build superseded (untagged, no children): the
    # stages' cached layers stay.
    podman image prune -f > /dev/null 2>&1
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# ---- the base: Debian 12 minbase, cached ----
mkdir -p "$CACHE"
if [ ! -s "$CACHE/bookworm-minbase.tar" ]; then
    t0=$SECONDS
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$CACHE/bookworm-minbase.tar.part" \
        > "$WORK/mmdebstrap.log" 2>&1 && mv "$CACHE/bookworm-minbase.tar.part" "$CACHE/bookworm-minbase.tar"
    echo "# mmdebstrap: $((SECONDS - t0)) s"
fi
check "the Debian 12 minbase tarball is there ($CACHE)" test -s "$CACHE/bookworm-minbase.tar"
if ! podman image exists "$BASE"; then
    podman import -q "$CACHE/bookworm-minbase.tar" "$BASE" > /dev/null
fi
check "the base is imported as $BASE" podman image exists "$BASE"

# ---- the image, every stage of deploy/Containerfile ----
# The build stage compiles dlserve inside the image with the features the
# Containerfile forces on (ARG FEATURES): a -dev package missing from it
# fails here as it would for a user. The context is the source tree less
# .dockerignore's entries (the suite's own build folders).
check "the Containerfile forces every feature on (ARG FEATURES)" \
    sh -c "grep -A1 '^ARG FEATURES=' '$SRC/deploy/Containerfile' | grep -q -- -Dotlp=enabled &&
           grep -A1 '^ARG FEATURES=' '$SRC/deploy/Containerfile' | grep -q -- -Dgrpc=enabled"
# quiet LOG COMMAND...: the command with its output in LOG (shown on failure).
quiet() {
    local log=$1; shift
    "$@" >> "$log" 2>&1 && return 0
    tail -n 20 "$log" | sed 's/^/# /'
    return 1
}
t0=$SECONDS
check "deploy/Containerfile builds the serving image on the Debian base" \
    quiet "$WORK/build.log" "${PODMAN[@]}" build --format docker --network host "${LIMITS[@]}" \
        --layers --target serve --build-arg BASE="$BASE" -t "$IMAGE" \
        -f "$SRC/deploy/Containerfile" "$SRC"
echo "# image build: $((SECONDS - t0)) s"
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "# image size: $((size / 1000000)) MB (podman image inspect)"
check "the image is under 400 MB ($((size / 1000000)) MB)" test "$size" -lt 400000000

# in_image PROGRAM ARGS...: runs a program of the image in a throw-away container.
in_image() {
    "${PODMAN[@]}" run --rm --network host "${LIMITS[@]}" --health-interval disable --entrypoint "$1" "$IMAGE" "${@:2}"
}
# The runtime stage carries every library the daemon needs.
in_image /usr/bin/ldd /usr/bin/dlserve > "$WORK/ldd" 2>&1
check "every shared library of dlserve resolves in the image" \
    sh -c "grep -q libopenblas '$WORK/ldd' && ! grep 'not found' '$WORK/ldd'"
check "the image's dlserve links libcurl and libgrpc, neither MPI nor CUDA" \
    sh -c "grep -q libcurl '$WORK/ldd' && grep -q libgrpc '$WORK/ldd' &&
           ! grep -E 'libmpi|libcuda|libcudart|libnccl' '$WORK/ldd'"

inspect() { podman image inspect --format "$1" "$IMAGE"; }
check "image user is 10001" test "$(inspect '{{.Config.User}}')" = "10001:10001"
check "entry point is the daemon with /etc/dlserve/dlserve.conf" \
    test "$(inspect '{{json .Config.Entrypoint}}')" = \
         '["/usr/bin/dlserve","--config","/etc/dlserve/dlserve.conf"]'
check "ports 8000 (HTTP) and 8001 (gRPC) are exposed" \
    sh -c "podman image inspect --format '{{json .Config.ExposedPorts}}' '$IMAGE' | grep -q 8000/tcp &&
           podman image inspect --format '{{json .Config.ExposedPorts}}' '$IMAGE' | grep -q 8001/tcp"
check "/models and /etc/dlserve are volumes" \
    sh -c "podman image inspect --format '{{json .Config.Volumes}}' '$IMAGE' | grep -q '/models' &&
           podman image inspect --format '{{json .Config.Volumes}}' '$IMAGE' | grep -q '/etc/dlserve'"
check "the health check asks /v2/health/ready" \
    sh -c "podman image inspect --format '{{json .Config.Healthcheck}}' '$IMAGE' | grep -q /v2/health/ready"
check "the stop signal is SIGTERM" test "$(inspect '{{.Config.StopSignal}}')" = SIGTERM
in_image /usr/bin/dlserve --check-config /etc/dlserve/dlserve.conf > "$WORK/conf" 2>&1
check "the image's dlserve.conf listens on every address, models in /models" \
    sh -c "grep -q '^address = 0.0.0.0$' '$WORK/conf' && grep -q '^dir = /models$' '$WORK/conf'"
check "the image's dlserve.conf: gRPC on every address, port 8001" \
    test "$(awk '/^\[/ { g = ($0 == "[grpc]") } g && /^(address|port) = / { printf "%s ", $3 }' \
            "$WORK/conf")" = "0.0.0.0 8001 "

# ---- the container ----
make_repo "$WORK/repo"
chmod -R a+rX "$WORK/repo"
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
PORT=$(free_port)
GPORT=$(free_port)
URL=http://127.0.0.1:$PORT
# A collector for the image's OTLP span export (libcurl in the image).
SPANS=$WORK/spans.jsonl
touch "$SPANS"
/usr/bin/python3 "$SRC/tests/serve/otlp_receiver.py" "$WORK/rport" "$SPANS" &
RPID=$!
trap 'kill -9 $RPID 2>/dev/null; cleanup' EXIT
for _ in $(seq 100); do [ -s "$WORK/rport" ] && break; sleep 0.1; done
t0=$SECONDS
"${PODMAN[@]}" run -d --name "$NAME" --network host "${LIMITS[@]}" \
    --health-interval disable -e DLSERVE_HTTP_PORT="$PORT" -e DLSERVE_GRPC_PORT="$GPORT" \
    -e DLSERVE_TRACE_OTLP_ENDPOINT="http://127.0.0.1:$(cat "$WORK/rport")/v1/traces" \
    -e DLSERVE_TRACE_FLUSH_MS=50 -e DLSERVE_BATCHING_EAGER=false \
    -e DLSERVE_BATCHING_MAX_QUEUE_DELAY_US=2000000 -e DLSERVE_BATCHING_MAX_BATCH_SIZE=4096 \
    -v "$WORK/repo:/models:ro" "$IMAGE" \
    > /dev/null 2> "$WORK/run.err"
check "the container starts" test $? -eq 0
# (--health-interval disable: no systemd timer for the health check here;
# `podman healthcheck run` below runs it.)
for _ in $(seq 100); do
    [ "$(code GET /v2/health/ready)" = 200 ] && break
    sleep 0.2
done
echo "# ready after $((SECONDS - t0)) s"
check "/v2/health/ready is 200 from the host" test "$(code GET /v2/health/ready)" = 200
check "/v2/health/ready is 200 from inside (podman exec)" \
    podman exec "$NAME" curl -fsS -o /dev/null "http://127.0.0.1:$PORT/v2/health/ready"
check "the image's health check passes" podman healthcheck run "$NAME"
pid=$(podman inspect --format '{{.State.Pid}}' "$NAME")
check "the daemon runs as uid 10001" test "$(stat -c %u "/proc/$pid")" = 10001
check "the daemon is PID 1 of the container, the image's dlserve" \
    test "$(podman exec "$NAME" cat /proc/1/cmdline | tr '\0' ' ')" = \
         "/usr/bin/dlserve --config /etc/dlserve/dlserve.conf "
/usr/bin/python3 "$SRC/tests/py/make_request.py" 0 8 > "$WORK/req8.json"
check "an infer request on the model mounted at /models is served" \
    test "$(code POST /v2/models/fashion-mlp/infer -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req8.json")" = 200
check "it answers 8 classes" test "$(jq_get 'len(d["outputs"][0]["data"])')" -ge 8
for _ in $(seq 100); do grep -q '"kind": 2' "$SPANS" && break; sleep 0.1; done
check "the image exports the request's spans over OTLP (built with libcurl)" \
    grep -q '"kind": 2' "$SPANS"
kill -9 $RPID 2>/dev/null
wait $RPID 2>/dev/null   # gone before the drain below waits for its requests

# ---- SIGTERM drains ----
# Batches run 2 s after their first request (DLSERVE_BATCHING_*; 4,096
# samples a batch, so that the 40 requests' 320 never fill one and run
# early): the requests sent next are queued when SIGTERM comes, and must
# be answered.
for i in $(seq 40); do
    curl -s -o "$WORK/drain.$i" -w '%{http_code}\n' -H 'Content-Type: application/json' \
        --data-binary @"$WORK/req8.json" "$URL/v2/models/fashion-mlp/infer" > "$WORK/drain.code.$i" &
done
queued() {
    for _ in $(seq 50); do
        curl -s "$URL/metrics" | grep -q '^dlserve_batcher_queued_samples{model="fashion-mlp"} [1-9]' &&
            return 0
        sleep 0.1
    done
    return 1
}
check "requests are queued when the stop comes" queued
t0=$SECONDS
podman stop -t 30 "$NAME" > /dev/null
wait
echo "# podman stop: $((SECONDS - t0)) s"
check "SIGTERM: the container exits 0 (drained, not killed)" \
    test "$(podman inspect --format '{{.State.ExitCode}}' "$NAME")" = 0
check "every request queued before the stop was answered 200" \
    sh -c "cat '$WORK'/drain.code.* | grep -c '^200$' | grep -qx 40"
check "the daemon logged its stop" sh -c "podman logs '$NAME' 2>&1 | grep -qi 'stop'"

echo "# test_image: $((SECONDS - t_start)) s in all"
finish
