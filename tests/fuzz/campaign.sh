#!/usr/bin/env bash
# campaign.sh BUILD OUT SECONDS ROUNDS [NAME...]: a long fuzzing campaign,
# not a test. In each of ROUNDS rounds every harness (all ten, or those
# named) fuzzes SECONDS seconds at low priority (nice 10), one at a time,
# its corpus growing in OUT/corpus/NAME from corpus/NAME, findings in
# OUT/artifacts/. OUT/totals.tsv gets a line per run: harness, round,
# executions, cov, ft, exit status; `campaign.sh --sum OUT` adds them up
# per harness (the table of README.md). Two campaigns over disjoint
# harness lists use two cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
all=(records oip json ini set safetensors model_conf idx csv checkpoint)

if [ "${1:-}" = --sum ]; then
    # Executions add up over runs; coverage is the last run's (its corpus
    # holds every earlier run's).
    awk -F'\t' '{ n[$1] += $3; c[$1] = $4; f[$1] = $5; r[$1]++; if ($6 != 0) bad[$1]++ }
        END { for (h in n) printf "%s\t%d runs\t%d execs\tcov %s\tft %s\t%d failed runs\n",
                                  h, r[h], n[h], c[h], f[h], bad[h] }' "$2/totals.tsv" | sort
    exit 0
fi

build=$1 out=$2 seconds=$3 rounds=$4
shift 4
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
mkdir -p "$out/artifacts" "$out/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

for ((round = 1; round <= rounds; round++)); do
    for name in "${names[@]}"; do
        mkdir -p "$out/corpus/$name"
        log=$out/logs/$name.$round.log
        dict=()
        [ -f "$here/dict/$name.dict" ] && dict=(-dict="$here/dict/$name.dict")
        rc=0
        nice -n 10 "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" \
            -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -detect_leaks=1 \
            -print_final_stats=1 "${dict[@]}" -artifact_prefix="$out/artifacts/$name-" \
            "$out/corpus/$name" "$here/corpus/$name" >"$log" 2>&1 || rc=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
        cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
        ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
        printf '%s\t%d\t%s\t%s\t%s\t%d\n' "$name" "$round" "${execs:-0}" "${cov:-?}" \
            "${ft:-?}" "$rc" >>"$out/totals.tsv"
    done
done
