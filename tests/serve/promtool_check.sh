#!/usr/bin/env bash
# promtool_check.sh FILE: `promtool check metrics` on a scrape. The text
# must parse (exit 0 or 3), the only lint findings allowed are the three
# that Triton's own metric names cause (nv_inference_*: no _total suffix,
# _us units, _count on a counter: the names are kept for compatibility),
# and every other family must pass the linter cleanly (exit 0).
set -u
f=$1
out=$(promtool check metrics < "$f" 2>&1); rc=$?
echo "promtool: exit $rc"
[ -n "$out" ] && echo "$out"
[ $rc -eq 0 ] && exit 0
[ $rc -eq 3 ] || exit 1
bad=$(printf '%s\n' "$out" | grep -v '^$' | grep -Ev \
  '^nv_inference_[a-z_]+ (counter metrics should have "_total" suffix|metric names should not contain abbreviated units|non-histogram and non-summary metrics should not have "_count" suffix)$')
if [ -n "$bad" ]; then
    echo "unexpected findings:"; echo "$bad"; exit 1
fi
grep -v -E '^(# (HELP|TYPE) )?nv_inference_' "$f" | promtool check metrics
