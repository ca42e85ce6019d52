#!/usr/bin/env bash
# run.sh TEST_PROGRAM [ARGS]: runs a Criterion test program and fails it
# when LeakSanitizer reported a leak. Criterion runs each test in a child
# process and counts the test by what the child reported, not by how it
# exited, so a leak found at the child's exit would pass unnoticed.
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2> "$log"
rc=$?
cat "$log" >&2
if grep -q 'ERROR: LeakSanitizer' "$log"; then
    echo "run.sh: LeakSanitizer reported a leak (above)" >&2
    exit 1
fi
exit $rc
