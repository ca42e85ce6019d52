#!/usr/bin/env bash
# Generate records over Kafka (the mock cluster of kafka_tool): 24 prompt
# records {"id", "model", "text_input", "parameters"} are answered once
# each with {"id", "model", "model_version", "text_output",
# "finish_reason"}, the text what HTTP's generate answers for the same
# prompt and parameters (batch_invariant), under at-least-once and under
# exactly-once (read_committed, no duplicate in a clean run), and under
# redis delivery (each result written once to a real redis-server, with
# the offsets: MONITOR counts the writes); malformed
# records, bad parameters, a model that does not generate and an unknown
# model go to the dead-letter topic with their kind.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
. "$SRC/tests/lib/lib_redis.sh"

make_lm_repo "$WORK/repo"
check "lm trains" test -s "$WORK/repo/lm/1/model.safetensors"
check "mock cluster up" start_mock gin:2 gout:2 gdlq:1 ein:2 eout:2 edlq:1 rin:2 rout:1 rdlq:1
trap 'kill -9 ${PID:-} ${MON:-} 2>/dev/null; [ -n "${RPID:-}" ] && stop_redis; stop_mock
      [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
COMMON=(--set batching.batch_invariant=true --set models.watch=false
        --set kafka.consumer.session.timeout.ms=6000
        --set kafka.consumer.heartbeat.interval.ms=500)

# prompts.py: 24 prompt records "key|value", then 4 bad ones
$PY - > "$WORK/prompts.txt" <<'PY'
import json
for i in range(24):
    rec = {"id": f"p-{i}", "model": "lm", "text_input": ["in the", "god ", "and", "light"][i % 4],
           "parameters": {"max_tokens": 1 + (i * 5) % 40, "seed": i,
                          "temperature": 0 if i % 3 == 0 else 0.8}}
    print(f"p-{i}|{json.dumps(rec)}")
print('b-json|{"id": "b-json", "text_input": ')
print('b-param|' + json.dumps({"id": "b-param", "model": "lm", "text_input": "a",
                               "parameters": {"top_p": 0}}))
print('b-plain|' + json.dumps({"id": "b-plain", "model": "plain", "text_input": "a"}))
print('b-nosuch|' + json.dumps({"id": "b-nosuch", "model": "nosuch", "text_input": "a"}))
PY

# check_outputs FILE: each of the 24 prompts answered once, with HTTP's text
cat > "$WORK/check.py" <<'PY'
import http.client, json, sys, urllib.parse
out, url = sys.argv[1], urllib.parse.urlparse(sys.argv[2])

def unescape(t):
    b, i = bytearray(), 0
    while i < len(t):
        if t[i] != "\\":
            b += t[i].encode(); i += 1
        elif t[i + 1] == "x":
            b.append(int(t[i + 2:i + 4], 16)); i += 4
        else:
            b += {"\\": b"\\", "t": b"\t", "r": b"\r", "n": b"\n"}[t[i + 1]]; i += 2
    return bytes(b)

prompts = {}
for line in open(sys.argv[3]):
    key, value = line.rstrip("\n").split("|", 1)
    if key.startswith("p-"):
        prompts[key] = json.loads(value)
seen = {}
if out.startswith("redis:"):   # redis delivery: the results under dlserve:result:<id>
    import subprocess
    for key in prompts:
        v = subprocess.run(["redis-cli", "-p", out[6:], "--raw", "get", "dlserve:result:" + key],
                           capture_output=True, check=True).stdout
        seen[key] = [json.loads(v)]
for line in open(out) if not out.startswith("redis:") else []:
    f = line.rstrip("\n").split("\t")
    key, value = unescape(f[0]).decode(), json.loads(unescape(f[5]))
    seen.setdefault(key, []).append(value)
assert set(seen) == set(prompts), sorted(set(prompts) ^ set(seen))
for key, values in seen.items():
    assert len(values) == 1, (key, len(values))
    v = values[0]
    assert set(v) == {"id", "model", "model_version", "text_output", "finish_reason"}, v
    assert v["id"] == key and v["model"] == "lm" and v["model_version"] == 1, v
    assert v["finish_reason"] in ("length", "stop"), v
    p = prompts[key]
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("POST", "/v2/models/lm/generate",
              json.dumps({"text_input": p["text_input"], "parameters": p["parameters"]}))
    h = json.loads(c.getresponse().read())
    assert h["text_output"] == v["text_output"] and h["finish_reason"] == v["finish_reason"], \
        (key, v, h)
print(f"{len(seen)} prompts answered once each, as HTTP answers them")
PY

# dead_kinds FILE: id=kind of each dead letter, sorted
dead_kinds() {
    $PY -c '
import sys
kinds = []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    h = dict(kv.split("=", 1) for kv in f[4].split(";") if "=" in kv)
    kinds.append(f[0] + "=" + h.get("dlserve-error-kind", "?"))
print(" ".join(sorted(kinds)))' "$1"
}
WANT="b-json=json b-nosuch=model b-param=input b-plain=model"

# ---- at-least-once -------------------------------------------------------------
check "an at-least-once daemon joins" start_kafka_daemon alo "${COMMON[@]}" \
    --set kafka.input_topics=gin --set kafka.output_topic=gout \
    --set kafka.dead_letter_topic=gdlq --set kafka.group_id=g1
kcat -b "$BOOT" -P -t gin -K'|' < "$WORK/prompts.txt"
check "at-least-once: 24 outputs" collect gout 24 "$WORK/gout.out" --timeout 90
check "... each prompt answered once, with HTTP's text" \
    $PY "$WORK/check.py" "$WORK/gout.out" "$URL" "$WORK/prompts.txt"
check "... the 4 bad records are dead letters of their kinds" \
    collect gdlq 4 "$WORK/gdlq.out" --timeout 30
check "... kinds: $WANT" test "$(dead_kinds "$WORK/gdlq.out")" = "$WANT"
check "... the generator is idle" sh -c "curl -s $URL/metrics |
    grep -qx 'dlserve_generate_sequences_running{model=\"lm\",version=\"1\"} 0'"
check "the at-least-once daemon stops cleanly" stop_daemon

# ---- exactly-once ----------------------------------------------------------------
check "an exactly-once daemon joins" start_kafka_daemon eos "${COMMON[@]}" \
    --set kafka.delivery=exactly-once --set kafka.input_topics=ein \
    --set kafka.output_topic=eout --set kafka.dead_letter_topic=edlq \
    --set kafka.group_id=g2 --set kafka.transactional_id=gen-eos-1 \
    --set kafka.commit_interval_ms=50
kcat -b "$BOOT" -P -t ein -K'|' < "$WORK/prompts.txt"
check "exactly-once: 24 committed outputs" \
    collect eout 24 "$WORK/eout.out" --read-committed --timeout 90
check "... none twice" test "$(summary "$WORK/eout.out" duplicates)" -eq 0
check "... each prompt answered once, with HTTP's text" \
    $PY "$WORK/check.py" "$WORK/eout.out" "$URL" "$WORK/prompts.txt"
check "... the dead letters, committed" \
    collect edlq 4 "$WORK/edlq.out" --read-committed --timeout 30
check "... kinds: $WANT" test "$(dead_kinds "$WORK/edlq.out")" = "$WANT"
check "... transactions committed" wait_for 10 kstatus 'k["transactions_committed"] > 0'
check "the exactly-once daemon stops cleanly" stop_daemon

# ---- redis delivery: results and offsets in one MULTI/EXEC ------------------------
if command -v redis-server > /dev/null; then
    check "redis-server up" start_redis
    redis-cli -p "$RPORT" monitor > "$WORK/monitor.log" &
    MON=$!
    check "a redis-delivery daemon joins" start_kafka_daemon rd "${COMMON[@]}" \
        --set kafka.delivery=redis --set redis.host=127.0.0.1 --set redis.port="$RPORT" \
        --set kafka.input_topics=rin --set kafka.output_topic=rout \
        --set kafka.dead_letter_topic=rdlq --set kafka.group_id=g3
    kcat -b "$BOOT" -P -t rin -K'|' < "$WORK/prompts.txt"
    check "redis: 24 results" wait_for 90 sh -c \
        "[ \$(redis-cli -p $RPORT --scan --pattern 'dlserve:result:p-*' | wc -l) -eq 24 ]"
    check "... each prompt answered, with HTTP's text" \
        $PY "$WORK/check.py" "redis:$RPORT" "$URL" "$WORK/prompts.txt"
    check "the redis-delivery daemon stops cleanly" stop_daemon
    kill "$MON" 2>/dev/null
    wait "$MON" 2>/dev/null
    check "MONITOR: each result written once" $PY -c '
import re, sys
n = {}
for line in open(sys.argv[1]):
    m = re.search(r"\"SET\" \"dlserve:result:(p-[0-9]+)\"", line, re.I)
    if m:
        n[m.group(1)] = n.get(m.group(1), 0) + 1
assert len(n) == 24 and set(n.values()) == {1}, n' "$WORK/monitor.log"
fi
finish
