#!/usr/bin/env bash
# Model lifecycle under load: a new version through the folder watch and
# through SIGHUP with zero failed requests, a corrupt version refused while
# the old keeps answering, the load/unload API, 100 reloads with flat
# resident memory, and SIGTERM under load answering every accepted request.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/lib_serve.sh"
REQ=$SRC/tests/py/make_request.py
LOAD=$SRC/tests/serve/load.py
REPO=$WORK/models
M=$REPO/fashion-mlp
make_repo "$REPO"
/usr/bin/python3 "$REQ" 0 1 > "$WORK/req1.json"

# publish V: version V's weights, written as training does (temp + rename).
publish() {
    mkdir -p "$M/$1"
    cp "$M/1/model.safetensors" "$M/$1/.tmp"
    mv "$M/$1/.tmp" "$M/$1/model.safetensors"
}
served_version() {
    code GET /v2/models/fashion-mlp > /dev/null && jq_get 'd["versions"][0]'
}
wait_version() {  # V: until version V is served (30 s: a load takes milliseconds)
    for _ in $(seq 300); do
        [ "$(served_version 2>/dev/null)" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# ---- folder watch and SIGHUP under load ----
start_daemon watch --models "$REPO"
check "daemon up" test -n "$PORT"
/usr/bin/python3 "$LOAD" "$URL/v2/models/fashion-mlp/infer" "$WORK/req1.json" 60 4 "$WORK/load1.json" > /dev/null &
loadpid=$!
sleep 1
publish 2
check "the folder watch picks up version 2" wait_version 2
kill -HUP $PID
publish 3
check "version 3 is served" wait_version 3
mkdir -p "$M/4" && head -c 5000 /dev/urandom > "$M/4/.tmp" && mv "$M/4/.tmp" "$M/4/model.safetensors"
kill -HUP $PID
# refused4: /status says why version 4 was refused (the watch or SIGHUP
# tried it); waited for, 30 s at most, before version 3 is asked for
refused4() { code GET /status > /dev/null && grep -q "version 4 refused" "$WORK/body"; }
for _ in $(seq 300); do refused4 && break; sleep 0.1; done
check "/status says why version 4 was refused" refused4
check "a corrupt version 4 is refused: version 3 keeps serving" test "$(served_version)" = 3
check "the log says why" grep -q "version 4 refused" "$LOG"
touch "$WORK/load1.json.stop"
wait $loadpid
cat "$WORK/load1.json"; echo
check "zero failed requests while versions changed" /usr/bin/python3 - "$WORK/load1.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(not (r["requests"] > 50 and r["codes"] == {"200": r["requests"]} and r["dropped"] == 0))
PY
rm -rf "$M/4"

# ---- load / unload through the repository API ----
check "unload is 200" test "$(code POST /v2/repository/models/fashion-mlp/unload)" = 200
check "an unloaded model answers 404" test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 404
check "load is 200" test "$(code POST /v2/repository/models/fashion-mlp/load)" = 200
check "after load it answers" test "$(code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json")" = 200
check "load of an unknown model is 404 or 400" sh -c "c=\$(curl -s -o /dev/null -w '%{http_code}' -X POST $URL/v2/repository/models/nope/load); [ \$c = 404 ] || [ \$c = 400 ]"
stop_daemon

# ---- 100 reloads: resident memory stays flat ----
start_daemon reloads --models "$REPO" --set models.watch=false
rss() { awk '/VmRSS/ {print $2}' /proc/$PID/status; }
v=10
for i in $(seq 1 110); do
    v=$((v + 1))
    mkdir -p "$M/$v" && ln "$M/1/model.safetensors" "$M/$v/model.safetensors"
    kill -HUP $PID
    wait_version $v || break
    code POST /v2/models/fashion-mlp/infer --data-binary @"$WORK/req1.json" > /dev/null
    rm -rf "$M/$((v - 1))"
    [ "$i" = 10 ] && before=$(rss)
done
after=$(rss)
echo "resident memory after 10 reloads ${before} kB, after 110 ${after} kB"
check "110 reloads all served the new version" test "$(served_version)" = $v
check "resident memory flat over 100 reloads (growth < 8 MB)" test $((after - before)) -lt 8192
stop_daemon

# ---- SIGTERM under load: every accepted request is answered ----
start_daemon term --models "$REPO"
/usr/bin/python3 "$LOAD" "$URL/v2/models/fashion-mlp/infer" "$WORK/req1.json" 30 16 "$WORK/load2.json" \
    --close --stop-on-503 > /dev/null &
loadpid=$!
# answered N: the daemon has answered N requests (/metrics)
answered() {
    curl -s "$URL/metrics" | /usr/bin/python3 -c 'import re, sys
n = sum(float(v) for v in re.findall(r"^nv_inference_request_success\{[^}]*\} (\S+)", sys.stdin.read(), re.M))
sys.exit(not n >= int(sys.argv[1]))' "$1"
}
# SIGTERM once the load is under way (50 answered, more than the 20 checked
# below), however long the clients took to start: 30 s at most
for _ in $(seq 300); do answered 50 && break; sleep 0.1; done
t0=$SECONDS
stop_daemon; rc=$?
check "SIGTERM under load: exit 0 ($rc)" test $rc -eq 0
check "SIGTERM under load: within 10 s" test $((SECONDS - t0)) -le 10
wait $loadpid
cat "$WORK/load2.json"; echo
check "every accepted request got an answer" /usr/bin/python3 - "$WORK/load2.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(not (r["requests"] > 20 and r["dropped"] == 0 and set(r["codes"]) <= {"200", "503"}))
PY
check "the log says it answered queued requests" grep -q "stopping" "$LOG"

finish
