#!/usr/bin/env bash
# run.sh HARNESS NAME OUTDIR: the fuzz suite's test of one harness. Replays
# every input of regress/NAME/ (each once: a parser that crashes, leaks,
# hangs or trips UBSan on one fails the test), then fuzzes from
# corpus/NAME/ (read only; new inputs go to a temporary folder) for
# DLSERVE_FUZZ_SECONDS seconds (10). A finding is written to
# OUTDIR/NAME-crash-<sha1> (or -leak-, -timeout-, -oom-) and fails the test:
# fix the parser, then keep the input in regress/NAME/.
set -euo pipefail
exe=$1 name=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
seconds=${DLSERVE_FUZZ_SECONDS:-10}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

work=$(mktemp -d "${TMPDIR:-/tmp}/dl_fuzz_$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
opts=(-rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -detect_leaks=1
      -error_exitcode=1 -timeout_exitcode=1
      -artifact_prefix="$out/$name-" -print_final_stats=1)
[ -f "$here/dict/$name.dict" ] && opts+=(-dict="$here/dict/$name.dict")

shopt -s nullglob
regress=("$here/regress/$name"/*)
if [ ${#regress[@]} -gt 0 ]; then
    echo "== $name: ${#regress[@]} regression inputs"
    "$exe" "${opts[@]}" "${regress[@]}" >"$work/regress.log" 2>&1 || {
        cat "$work/regress.log"
        echo "FAIL: a regression input of $name fails again"
        exit 1
    }
fi

echo "== $name: fuzzing ${seconds}s from corpus/$name"
mkdir -p "$work/corpus"
"$exe" "${opts[@]}" -max_total_time="$seconds" "$work/corpus" "$here/corpus/$name"
