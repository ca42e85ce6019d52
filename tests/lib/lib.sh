# tests/lib/lib.sh: helpers for every shell test under tests/. Each test script
# sources this, calls `check` for every assertion and ends with `finish`.
set -u
DLSERVE=${DLSERVE:?set DLSERVE to the dlserve binary}
SRC=${DLSERVE_SOURCE_ROOT:?set DLSERVE_SOURCE_ROOT}
DATA=/usr/share/datasets/fashion-mnist
WORK=$(mktemp -d /tmp/dlserve-test.XXXXXX)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
passed=0 failed=0

ok()   { passed=$((passed + 1)); echo "ok - $*"; }
bad()  { failed=$((failed + 1)); echo "FAIL - $*"; }
# check DESCRIPTION COMMAND...: passes when the command succeeds.
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }

# json_get FILE KEY: prints a top-level value of a one-line JSON file.
json_get() {
    /usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"
}

json_has() { json_get "$1" "$2" > /dev/null; }

# fails_with CMD_OUTPUT_FILE RC PATTERN: non-zero exit, exactly one line on
# stderr, matching PATTERN.
fails_with() {
    local errfile=$1 rc=$2 pattern=$3
    [ "$rc" -ne 0 ] && [ "$(wc -l < "$errfile")" -eq 1 ] && grep -q -- "$pattern" "$errfile"
}

# model_copy NAME: a private copy of a shipped model folder (model.json only).
model_copy() {
    mkdir -p "$WORK/models/$1"
    cp "$SRC/models/$1/model.json" "$WORK/models/$1/"
    echo "$WORK/models/$1"
}

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
