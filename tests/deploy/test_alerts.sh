#!/bin/bash
# tests/deploy/test_alerts.sh: conf/prometheus/dlserve-alerts.yml against a
# live daemon. promtool checks the rules; then a real Prometheus server
# (scrape and evaluation every second, each rule's `for:` set to 0s)
# scrapes a daemon consuming from a Kafka mock cluster, and the alerts are
# provoked one after the other: inference failures (DlserveErrorRatio),
# malformed records (DlserveKafkaDeadLetters), a corrupt version dropped
# into the repository (DlserveVersionRefused), records served but not
# committed (DlserveKafkaLagGrowing: commits held back by a long
# kafka.commit_interval_ms), the model unloaded (DlserveModelNotReady),
# every broker down (DlserveKafkaBrokersDown), the daemon killed
# (DlserveDown). Each must fire once provoked, and none may fire before
# its provocation (checked at every step, first with nothing provoked).
# Before that: every alert's annotations.runbook_url is an absolute URL
# into docs/deploy.md whose anchor is a heading there, and the monitoring
# overlay's PrometheusRule holds exactly these rules.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
M="/usr/bin/python3 $SRC/tests/deploy/manifests.py"
RULES=$SRC/conf/prometheus/dlserve-alerts.yml
t_start=$SECONDS

for tool in prometheus promtool; do
    command -v $tool > /dev/null || { echo "SKIP: $tool is not installed (apt-get install prometheus)"; exit 77; }
done
# promtool_ok FILE: promtool check rules, its output shown on failure.
promtool_ok() {
    promtool check rules "$1" > "$WORK/promtool.out" 2>&1 || { sed 's/^/# /' "$WORK/promtool.out"; return 1; }
}
check "promtool check rules" promtool_ok "$RULES"
RUNBOOKS=https://dlserve.example.com/docs/deploy.md
check "every alert's runbook_url is $RUNBOOKS#<a heading of docs/deploy.md>" \
    $M runbooks "$RULES" "$SRC/docs/deploy.md" "$RUNBOOKS"
sed 's/#dlservedown"/#dlserve-down"/' "$RULES" > "$WORK/badanchor.yml"
check "a runbook_url to a missing heading is caught" \
    sh -c "! $M runbooks '$WORK/badanchor.yml' '$SRC/docs/deploy.md' '$RUNBOOKS' > /dev/null"
check "the PrometheusRule of overlays/monitoring holds the same rules" \
    $M same-rules "$RULES" "$SRC/deploy/k8s/overlays/monitoring/prometheusrule.yaml"
$M alerts "$RULES" "$WORK/rules.yml"
check "the rules with for: 0s still pass promtool" promtool_ok "$WORK/rules.yml"

# ---- the daemon, on a Kafka mock cluster ----
make_repo "$WORK/repo"
check "mock cluster up" start_mock ain:2 aout:2 adlq:1
trap 'kill -9 ${PID:-} ${PROM:-} 2>/dev/null; stop_mock; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
check "daemon joins the group" start_kafka_daemon alerts \
    --set kafka.input_topics=ain --set kafka.output_topic=aout --set kafka.dead_letter_topic=adlq \
    --set kafka.group_id=alerts \
    --set batching.eager=false --set batching.max_queue_delay_us=4000000 \
    --set batching.max_batch_size=1024
# (Batches run 4 s after their first sample, or once 1,024 samples wait:
# a burst of records shows as consumer lag for those 4 s.)

# ---- Prometheus ----
PPORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PURL=http://127.0.0.1:$PPORT
cat > "$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $WORK/rules.yml
scrape_configs:
  - job_name: dlserve
    static_configs:
      - targets: ["127.0.0.1:$PORT"]
EOF
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" > "$WORK/prometheus.log" 2>&1 &
PROM=$!
# query_ok PROMQL: the query returns at least one series.
query_ok() {
    curl -s "$PURL/api/v1/query" --data-urlencode "query=$1" > "$WORK/q.json" &&
        /usr/bin/python3 -c 'import json,sys; sys.exit(not json.load(open(sys.argv[1]))["data"]["result"])' "$WORK/q.json"
}
check "Prometheus scrapes the daemon" wait_for 30 query_ok 'up{job="dlserve"} == 1'
check "it loaded the 7 rules" sh -c "curl -s '$PURL/api/v1/rules' | grep -o '\"type\":\"alerting\"' | grep -c . | grep -qx 7"

# firing: the names of the firing alerts, sorted, space-separated.
firing() {
    curl -s "$PURL/api/v1/alerts" | /usr/bin/python3 -c '
import json, sys
a = json.load(sys.stdin)["data"]["alerts"]
print(" ".join(sorted({x["labels"]["alertname"] for x in a if x["state"] == "firing"})))'
}
PROVOKED=""
# fires NAME: NAME fires within 30 s, and nothing fires that was not
# provoked yet (NAME included).
fires() {
    PROVOKED="$PROVOKED $1"
    wait_for 30 sh -c "curl -s '$PURL/api/v1/alerts' | grep -q '\"alertname\":\"$1\".*\"state\":\"firing\"\\|\"state\":\"firing\".*\"alertname\":\"$1\"'" ||
        { echo "# firing: $(firing)"; return 1; }
    only_provoked
}
only_provoked() {
    local a
    for a in $(firing); do
        case " $PROVOKED " in *" $a "*) ;; *) echo "# unprovoked: $a"; return 1 ;; esac
    done
}

# ---- nothing provoked: nothing fires ----
/usr/bin/python3 "$SRC/tests/py/make_request.py" 0 8 > "$WORK/req8.json"
check "an infer request is served" \
    test "$(code POST /v2/models/fashion-mlp/infer -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req8.json")" = 200
check "records are served" sh -c "'$KAFKA_TOOL' feed -b '$BOOT' -t ain --count 20 > /dev/null"
check "their outputs are written (a lag of 20 meanwhile, under the threshold)" \
    wait_for 30 kstatus 'k["outputs"] >= 20'
sleep 3   # more evaluations on the healthy daemon
check "nothing provoked: no alert fires" test -z "$(firing)"

# ---- each alert, provoked ----
bad='{"inputs":[{"name":"input","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}'
for _ in 1 2 3; do code POST /v2/models/fashion-mlp/infer -d "$bad" > /dev/null; done
check "inference failures: DlserveErrorRatio fires (alone)" fires DlserveErrorRatio

"$KAFKA_TOOL" feed -b "$BOOT" -t ain --count 3 --bad badjson > /dev/null
check "malformed records: DlserveKafkaDeadLetters fires" fires DlserveKafkaDeadLetters

mkdir "$WORK/repo/fashion-mlp/2"
head -c 4096 /dev/urandom > "$WORK/repo/fashion-mlp/2/model.safetensors"
check "a corrupt version 2: DlserveVersionRefused fires" fires DlserveVersionRefused
check "version 1 still serves (no DlserveModelNotReady)" \
    test "$(code POST /v2/models/fashion-mlp/infer -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req8.json")" = 200
rm -r "$WORK/repo/fashion-mlp/2"

"$KAFKA_TOOL" feed -b "$BOOT" -t ain --count 400 > /dev/null
check "400 records waiting: DlserveKafkaLagGrowing fires" fires DlserveKafkaLagGrowing

check "the model unloaded" test "$(code POST /v2/repository/models/fashion-mlp/unload)" = 200
check "DlserveModelNotReady fires" fires DlserveModelNotReady

check "every broker down" mock_cmd down all
check "DlserveKafkaBrokersDown fires" fires DlserveKafkaBrokersDown

kill -9 "$PID"
wait "$PID" 2> /dev/null
check "the daemon killed: DlserveDown fires" fires DlserveDown

kill "$PROM"
wait "$PROM" 2> /dev/null
PROM=""
echo "# test_alerts: $((SECONDS - t_start)) s"
finish
