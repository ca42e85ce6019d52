# scripts/lib.sh: helpers shared by scripts/test and scripts/demo.

# Installs the Debian packages that are missing; silent when none is.
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

# The packages the core build and its tests need.
CORE_PACKAGES=(gcc meson ninja-build pkg-config libopenblas-dev libjansson-dev
               zlib1g-dev dataset-fashion-mnist libopenmpi-dev openmpi-bin libdnnl-dev)
# The daemon: HTTP, gRPC (libgrpc's C core, protobuf-c and its compiler),
# configuration files, systemd, Kafka, Redis; curl and kcat for the demo.
SERVE_PACKAGES=(libmicrohttpd-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
                libinih-dev libsystemd-dev curl librdkafka-dev kcat
                libhiredis-dev libjemalloc-dev libcurl4-openssl-dev)
# What the test suites need besides: Criterion, the PyTorch peer, promtool,
# systemd-analyze, redis-server (each Redis test starts its own
# redis-server, and each Kafka or Redis test its own Kafka mock cluster, on
# free ports), Chromium, headless, for the status page, and clang with
# libFuzzer for the fuzz harnesses; mmdebstrap, buildah, podman and runc
# for the container image test (tests/deploy/test_image.sh), python3-yaml
# for the manifest test, python3-grpcio and python3-grpc-tools for the gRPC
# tests' client (generated from proto/ at test time), python3-onnx for the
# ONNX tests' models and checks (tests/py/onnx_models.py, onnx_eval.py); the data of the PaddlePaddle
# book's models (their prepare scripts; tests/cli/test_book_models.sh):
# bible-kjv-text, python3-sklearn (also the baselines of
# tests/py/book_baselines.py) and r-cran-dslabs.
TEST_PACKAGES=(libcriterion-dev python3-torch prometheus systemd redis-server chromium
               clang-14 libclang-rt-14-dev mmdebstrap buildah podman runc python3-yaml
               python3-grpcio python3-grpc-tools python3-onnx python3-jsonschema bible-kjv-text
               python3-sklearn r-cran-dslabs)
