#!/usr/bin/env bash
# check_includes.sh [SRC]: the daemon's library boundaries (src/serve/meson.build).
# Only src/serve/http/ may include microhttpd.h, only src/serve/kafka/
# librdkafka's headers (and src/perf/perf_kafka.c, the load generator's
# Kafka client, outside the daemon), only src/redis/ hiredis's, only
# src/serve/component_otlp.c libcurl's, only src/serve/grpc/ libgrpc's (and
# src/perf/perf_grpc.c, the load generator's gRPC client).
# Prints each file that crosses a boundary and exits 1; exits 0 when none does.
#
# With --self-test, plants a crossing in a copy of SRC and fails unless the
# check catches it (so the check cannot pass by reading nothing).
set -euo pipefail

check() {   # check SRC
    local src=$1 bad=0 f
    # header pattern, the folders or files allowed to include it ('|' between)
    local rules=('microhttpd\.h' 'serve/http/'
                 'librdkafka/rdkafka(_mock)?\.h' 'serve/kafka/|perf/perf_kafka.c'
                 'hiredis/' 'redis/'
                 'curl/curl\.h' 'serve/component_otlp.c'
                 'grpc/' 'serve/grpc/|perf/perf_grpc.c')
    local i
    for ((i = 0; i < ${#rules[@]}; i += 2)); do
        while IFS= read -r f; do
            local allowed="" a
            IFS='|' read -r -a allow <<< "${rules[i+1]}"
            for a in "${allow[@]}"; do
                case "${f#"$src"/}" in "$a"*) allowed=1 ;; esac
            done
            [ -n "$allowed" ] || { echo "boundary crossed: $f includes ${rules[i]//\\/}"; bad=1; }
        done < <(grep -rlE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]${rules[i]}" \
                      --include='*.c' --include='*.h' "$src" || true)
    done
    return $bad
}

if [ "${1:-}" = --self-test ]; then
    src=${2:?usage: check_includes.sh --self-test SRC}
    check "$src" || exit 1
    [ "$(grep -rlE '#include <microhttpd\.h>' --include='*.[ch]' "$src/serve/http" | wc -l)" -gt 0 ] ||
        { echo "self-test: no file in $src/serve/http includes microhttpd.h"; exit 1; }
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    for planted in 'serve/daemon.c:#include <microhttpd.h>' \
                   'serve/oip/oip_scan.c:#include <librdkafka/rdkafka.h>' \
                   'serve/http/http_request.c:#  include "librdkafka/rdkafka_mock.h"' \
                   'serve/kafka/kafka.c:#include <hiredis/hiredis.h>' \
                   'serve/batcher.c:#include <grpc/grpc.h>' \
                   'perf/perf.c:#include <librdkafka/rdkafka.h>' \
                   'perf/perf_kafka.c:#include <grpc/grpc.h>'; do
        rm -rf "$tmp/src"; cp -r "$src" "$tmp/src"
        echo "${planted#*:}" >> "$tmp/src/${planted%%:*}"
        if check "$tmp/src" >/dev/null; then
            echo "self-test: the check missed '${planted#*:}' in ${planted%%:*}"; exit 1
        fi
    done
    echo "include boundaries hold; 7 planted crossings caught"
    exit 0
fi
check "${1:-$(dirname "$0")/../../src}"
