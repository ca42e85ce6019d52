#!/usr/bin/env bash
# [models] control: poll (a rescan every poll_interval_s, no inotify) picks
# up a new version; explicit loads only `load` at start, the others through
# the repository API, and nothing by itself (not a new version on disk, not
# SIGHUP); load_threads = 4 loads every model at start, answering as one
# thread's; a bad control word stops start-up with file and line. The
# watch mode is test_reload.sh's. ~10 s.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
REPO=$WORK/models
make_repo "$REPO"
# a, b, c, d: fashion-mlp under other names
for m in a b c d; do
    mkdir -p "$REPO/$m/1"
    sed "s/\"name\": \"fashion-mlp\"/\"name\": \"$m\"/" "$REPO/fashion-mlp/model.json" \
        > "$REPO/$m/model.json"
    cp "$REPO/fashion-mlp/1/model.safetensors" "$REPO/$m/1/"
done
/usr/bin/python3 "$SRC/tests/py/make_request.py" 0 1 > "$WORK/req1.json"

# publish M V: version V of model M, written as training does (temp + rename).
publish() {
    mkdir -p "$REPO/$1/$2"
    cp "$REPO/$1/1/model.safetensors" "$REPO/$1/$2/.tmp"
    mv "$REPO/$1/$2/.tmp" "$REPO/$1/$2/model.safetensors"
}
served_version() {  # M: the newest version M serves
    code GET "/v2/models/$1" > /dev/null && jq_get 'd["versions"][0]'
}
wait_version() {  # M V: until M serves V (20 s)
    for _ in $(seq 200); do
        [ "$(served_version "$1" 2>/dev/null)" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
status_is() {  # EXPR VALUE: /status's EXPR (Python, on d) is VALUE
    code GET /status > /dev/null && [ "$(jq_get "$1")" = "$2" ]
}

# ---- a bad control word: file and line ----
printf '[models]\ndir = %s\ncontrol = sometimes\n' "$REPO" > "$WORK/bad.conf"
"$DLSERVE" --config "$WORK/bad.conf" > /dev/null 2> "$WORK/bad.err"; rc=$?
check "control = sometimes stops start-up" test $rc -ne 0
check "... naming file and line, and the words" \
    grep -q "bad.conf:3: \[models\] control 'sometimes' is invalid: expected watch, poll" \
    "$WORK/bad.err"
printf '[models]\ncontrol = explicit\nload = a, b/c\n' > "$WORK/bad2.conf"
"$DLSERVE" --config "$WORK/bad2.conf" > /dev/null 2> "$WORK/bad2.err"; rc=$?
check "a bad name in load stops start-up, naming file and line" sh -c \
    "[ $rc -ne 0 ] && grep -q \"bad2.conf:3: \[models\] load: 'b/c' is not a valid model name\" \
     '$WORK/bad2.err'"
"$DLSERVE" --models "$REPO" --set models.load=a > /dev/null 2> "$WORK/load.err"; rc=$?
check "load without control = explicit stops start-up" \
    sh -c "[ $rc -ne 0 ] && grep -q 'control = explicit' '$WORK/load.err'"

# ---- poll: a rescan every second, no inotify ----
start_daemon poll --models "$REPO" --set models.control=poll --set models.poll_interval_s=1
check "poll: daemon up" test -n "$PORT"
check "poll: /status says models_control poll" status_is 'd["models_control"]' poll
check "poll: the log says so" grep -q "control = poll: rescanning .* every 1 s" "$LOG"
publish a 2
check "poll: version 2 written into the folder is served" wait_version a 2
check "poll: the poll loaded it (no folder watch)" grep -q "poll: [0-9]* changes" "$LOG"
stop_daemon

# ---- explicit: load = a, then the repository API alone ----
start_daemon explicit --models "$REPO" --set models.control=explicit --set "models.load=a, nope"
check "explicit: daemon up" test -n "$PORT"
check "explicit: /status says models_control explicit" status_is 'd["models_control"]' explicit
check "explicit: a is ready" test "$(code GET /v2/models/a/ready)" = 200
check "explicit: b is not loaded (404)" test "$(code GET /v2/models/b/ready)" = 404
check "explicit: ... nor fashion-mlp" test "$(code GET /v2/models/fashion-mlp/ready)" = 404
check "explicit: the server is ready all the same" test "$(code GET /v2/health/ready)" = 200
code POST /v2/repository/index > /dev/null
check "explicit: the index lists b as unloaded" test \
    "$(jq_get '[(m["state"], m.get("reason")) for m in d if m["name"] == "b"]')" \
    = "[('UNAVAILABLE', 'unloaded')]"
check "explicit: the index says why nope, named in load, is not served" test \
    "$(jq_get '[m["reason"] for m in d if m["name"] == "nope"]')" \
    = "['no folder in the model repository']"
check "explicit: the log says so" grep -q "load names 'nope'" "$LOG"
check "explicit: loading b is 200" test "$(code POST /v2/repository/models/b/load)" = 200
check "explicit: b answers" \
    test "$(code POST /v2/models/b/infer --data-binary @"$WORK/req1.json")" = 200
check "explicit: unloading b is 200" test "$(code POST /v2/repository/models/b/unload)" = 200
check "explicit: b is gone again (404)" test "$(code GET /v2/models/b/ready)" = 404
check "explicit: a serves version 2" test "$(served_version a)" = 2
publish a 3
kill -HUP $PID
sleep 3   # longer than a folder watch's or a poll's reaction, and SIGHUP's
check "explicit: version 3 on disk is not loaded by itself, nor by SIGHUP" \
    test "$(served_version a)" = 2
check "explicit: SIGHUP was handled" grep -q "reloaded" "$LOG"
check "explicit: loading a is 200" test "$(code POST /v2/repository/models/a/load)" = 200
check "explicit: the load read a's folder again: version 3" test "$(served_version a)" = 3
stop_daemon
check "explicit: stops cleanly" test $? -eq 0

# ---- load_threads: 4 against 1, every model ready, the same answers ----
MODELS="fashion-mlp a b c d"
answers() {  # FILE: each model's answer to req1
    for m in $MODELS; do
        code POST "/v2/models/$m/infer" --data-binary @"$WORK/req1.json" > /dev/null
        jq_get 'd["outputs"]'
    done > "$1"
}
for n in 4 1; do
    start_daemon "threads$n" --models "$REPO" --set models.load_threads=$n \
        --set models.instances=1 --set models.watch=false
    check "load_threads=$n: daemon up" test -n "$PORT"
    check "load_threads=$n: /status says so" status_is 'd["model_load_threads"]' $n
    check "load_threads=$n: every model ready at start" status_is \
        'sorted(m["name"] for m in d["models"] if m["state"] == "READY")' \
        "['a', 'b', 'c', 'd', 'fashion-mlp']"
    answers "$WORK/answers$n"
    stop_daemon
done
check "load_threads=4: five versions loaded" \
    test "$(grep -c 'version [0-9]* loaded in' "$WORK/threads4.log")" = 5
check "load_threads=4 answers as load_threads=1" cmp -s "$WORK/answers4" "$WORK/answers1"
check "... and they are answers" grep -q "data" "$WORK/answers4"

finish
