#!/usr/bin/env bash
# vendor-headers.sh: gathers, on a machine that has them, the build inputs
# the GPU verification machine lacks, into the git-ignored shared-build/
# folder that travels with the working tree to that machine:
#   shared-build/include/jansson.h, jansson_config.h   (it has libjansson.so.4
#       but no headers; tests/gpu/run.sh builds against these)
#   shared-build/fashion-mnist/*.gz                     (the data set, ~30 MB,
#       when this machine has it; run.sh looks there first)
#
#   tests/gpu/vendor-headers.sh [DATA_DIR]   (default /usr/share/datasets/fashion-mnist)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$root/shared-build
data=${1:-/usr/share/datasets/fashion-mnist}

mkdir -p "$out/include"
for h in jansson.h jansson_config.h; do
    if [[ ! -f /usr/include/$h ]]; then
        echo "vendor-headers: /usr/include/$h not found (install libjansson-dev)" >&2
        exit 1
    fi
    cp /usr/include/$h "$out/include/"
done
echo "vendor-headers: jansson $(sed -n 's/^#define JANSSON_VERSION *"\(.*\)"/\1/p' "$out/include/jansson.h") headers in $out/include"

if ls "$data"/*-ubyte.gz > /dev/null 2>&1; then
    mkdir -p "$out/fashion-mnist"
    cp "$data"/*-ubyte.gz "$out/fashion-mnist/"
    echo "vendor-headers: Fashion-MNIST ($(du -sh "$out/fashion-mnist" | cut -f1)) in $out/fashion-mnist"
else
    echo "vendor-headers: no Fashion-MNIST in $data: run.sh will need DLSERVE_DATA" >&2
fi
