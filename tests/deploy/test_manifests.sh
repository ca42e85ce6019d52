#!/bin/bash
# tests/deploy/test_manifests.sh: the deployment files hold together with
# the daemon as built. Every YAML and JSON file under deploy/ and
# conf/{cluster,grafana,prometheus} parses; `kubectl kustomize` (or
# kustomize) builds the base and every overlay, or, where neither is
# installed, each kustomization's resources, files and patches are
# resolved by hand; every dlserve.conf of the manifests passes
# `dlserve --check-config`; the KServe runtime's environment names real
# keys; the Service, the container, the probes and every dlserve.conf agree
# on the HTTP and gRPC ports (liveness and readiness are gRPC health
# probes); and on a live daemon (embedded Kafka, so that the Kafka families
# exist) the probes answer (the gRPC ones where dlserve links libgrpc), and
# every metric name that the alert
# rules, the Grafana dashboard, the HPA and the KEDA ScaledObject use is
# in /metrics: a renamed metric, key or path fails here.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
M="/usr/bin/python3 $SRC/tests/deploy/manifests.py"
K8S=$SRC/deploy/k8s
OVERLAYS=(kafka gpu keda monitoring)

# ---- every file parses ----
mapfile -t files < <(find "$SRC/deploy" "$SRC/conf/cluster" "$SRC/conf/grafana" \
                          "$SRC/conf/prometheus" -name '*.yaml' -o -name '*.yml' -o -name '*.json')
check "${#files[@]} YAML/JSON files parse" $M parse "${files[@]}"
check "the files include the base, 4 overlays, KServe, Grafana and the alerts" \
    test "${#files[@]}" -ge 20

# ---- kustomize ----
if kubectl kustomize --help > /dev/null 2>&1; then
    KUSTOMIZE=(kubectl kustomize)
elif command -v kustomize > /dev/null; then
    KUSTOMIZE=(kustomize build)
else
    KUSTOMIZE=()
    echo "# neither kubectl nor kustomize: kustomizations resolved by hand"
fi
# build DIR OUT: the kustomization's output.
build() {
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
        "${KUSTOMIZE[@]}" "$1" > "$2" 2> "$2.err"
    else
        $M resolve "$1" > "$2"
    fi
}
check "the base builds" build "$K8S/base" "$WORK/base.yaml"
for o in "${OVERLAYS[@]}"; do
    check "overlay $o builds" build "$K8S/overlays/$o" "$WORK/$o.yaml"
done
kinds() { grep -c "^kind: $2$" "$WORK/$1.yaml"; }
check "base: Deployment, Service, PodDisruptionBudget, HPA" \
    test "$(kinds base Deployment)$(kinds base Service)$(kinds base PodDisruptionBudget)$(kinds base HorizontalPodAutoscaler)" = 1111
check "kafka overlay adds the Secret" test "$(kinds kafka Secret)" = 1
check "keda overlay: a ScaledObject instead of the HPA" \
    test "$(kinds keda ScaledObject)$(kinds keda HorizontalPodAutoscaler)" = 10
check "monitoring overlay adds the ServiceMonitor" test "$(kinds monitoring ServiceMonitor)" = 1

# ---- the configuration ----
if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
    $M configmap "$WORK/base.yaml" "$WORK/base.conf"
    check "the base's ConfigMap passes dlserve --check-config" \
        "$DLSERVE" --check-config "$WORK/base.conf" > "$WORK/check.out"
    $M configmap "$WORK/kafka.yaml" "$WORK/kafka.conf"
    check "the kafka overlay's ConfigMap replaces the base's ([kafka] in it)" grep -q '^\[kafka\]' "$WORK/kafka.conf"
fi
for conf in "$K8S/base/dlserve.conf" "$K8S"/overlays/*/dlserve.conf; do
    check "${conf#"$SRC"/} passes dlserve --check-config" \
        env KAFKA_PASSWORD=secret "$DLSERVE" --check-config "$conf" > "$WORK/check.out"
done
KAFKA_PASSWORD=secret "$DLSERVE" --check-config "$K8S/overlays/kafka/dlserve.conf" > "$WORK/kafka.check"
check "the kafka overlay reads sasl.password from \${env:KAFKA_PASSWORD} (printed ***)" \
    sh -c "grep -q 'sasl.password = \*\*\*' '$WORK/kafka.check' && ! grep -q secret '$WORK/kafka.check'"
env -u KAFKA_PASSWORD "$DLSERVE" --check-config "$K8S/overlays/kafka/dlserve.conf" > /dev/null 2> "$WORK/nopw.err"
check "the kafka overlay fails without KAFKA_PASSWORD (the Secret is needed)" \
    fails_with "$WORK/nopw.err" $? 'environment variable KAFKA_PASSWORD is not set'
check "the Deployment passes KAFKA_PASSWORD from the Secret" \
    grep -q 'name: KAFKA_PASSWORD' "$WORK/kafka.yaml"
# conf_key FILE SECTION KEY: KEY's value in [SECTION] of a dlserve.conf (or
# of --check-config's output).
conf_key() {
    awk -v s="[$2]" -v k="$3" '/^\[/ { in_s = ($0 == s) } in_s && $1 == k && $2 == "=" { print $3 }' "$1"
}
mapfile -t kserve_env < <($M env "$SRC/deploy/kserve/servingruntime.yaml")
env "${kserve_env[@]}" "$DLSERVE" --check-config "$SRC/conf/dlserve.conf" > "$WORK/kserve.check"
check "the KServe runtime's environment sets port 8080 and /mnt/models" \
    sh -c "grep -qx 'port = 8080' '$WORK/kserve.check' && grep -qx 'dir = /mnt/models' '$WORK/kserve.check' &&
           grep -qx 'address = 0.0.0.0' '$WORK/kserve.check'"
kserve_grpc=$(conf_key "$WORK/kserve.check" grpc port)
check "the KServe runtime's environment sets gRPC port 8001 on 0.0.0.0" \
    test "$kserve_grpc $(conf_key "$WORK/kserve.check" grpc address)" = "8001 0.0.0.0"
check "the KServe runtime: protocols v2 and grpc-v2" \
    test "$($M protocols "$SRC/deploy/kserve/servingruntime.yaml")" = "v2 grpc-v2"
check "the KServe runtime: one port, http1 (a name Knative accepts) 8080" \
    test "$($M ports-of "$SRC/deploy/kserve/servingruntime.yaml" | tr '\n' ' ')" = "http1:8080 "
check "the gRPC InferenceService: one port, h2c, the runtime's gRPC port ($kserve_grpc)" \
    test "$($M ports-of "$SRC/deploy/kserve/inferenceservice-grpc.yaml" | tr '\n' ' ')" = "h2c:$kserve_grpc "
mapfile -t formats < <($M formats "$SRC/deploy/kserve/servingruntime.yaml" \
    "$SRC"/deploy/kserve/inferenceservice*.yaml)
check "the KServe runtime claims the dlserve and onnx formats" test "${formats[0]}" = "dlserve onnx"
check "each InferenceService names the dlserve runtime and a format it claims" \
    test "$(printf '%s\n' "${formats[@]:1}" | sort | tr '\n' ' ')" = "dlserve dlserve dlserve dlserve onnx dlserve "

# ---- ports and the stop ----
mapfile -t ports < <($M ports "$WORK/base.yaml")
conf_port=$(conf_key "$K8S/base/dlserve.conf" http port)
check "containerPort = Service targetPort = prometheus.io/port = http.port ($conf_port)" \
    test "${ports[*]}" = "$conf_port $conf_port $conf_port"
mapfile -t gports < <($M grpc-ports "$WORK/base.yaml")
grpc_port=$(conf_key "$K8S/base/dlserve.conf" grpc port)
check "gRPC containerPort = Service port = targetPort = grpc.port ($grpc_port)" \
    test "${gports[*]}" = "$grpc_port $grpc_port $grpc_port"
for conf in "$K8S/base/dlserve.conf" "$K8S"/overlays/*/dlserve.conf; do
    check "${conf#"$SRC"/}: gRPC on 0.0.0.0 port $grpc_port, as the Deployment" \
        test "$(conf_key "$conf" grpc address) $(conf_key "$conf" grpc port)" = "0.0.0.0 $grpc_port"
done
$M probes "$WORK/base.yaml" > "$WORK/probes"
check "the startup probe asks HTTP /v2/health/ready" \
    grep -qx "startupProbe http /v2/health/ready $conf_port" "$WORK/probes"
check "liveness and readiness are gRPC health probes on grpc.port" \
    sh -c "grep -qx 'livenessProbe grpc liveness $grpc_port' '$WORK/probes' &&
           grep -qx 'readinessProbe grpc - $grpc_port' '$WORK/probes'"
read -r _ grace sleep_s < <(grep '^grace' "$WORK/probes")
check "terminationGracePeriodSeconds ($grace) covers preStop ($sleep_s s) and 45 s of drain" \
    test "$grace" -ge $((sleep_s + 45))

# ---- a live daemon: probes and metric names ----
make_repo "$WORK/repo"
# The onnx format: a version folder holding only model.onnx.
mkdir -p "$WORK/repo/mlp-onnx/1"
"$DLSERVE" --export "$WORK/repo/fashion-mlp" --onnx "$WORK/repo/mlp-onnx/1/model.onnx" > /dev/null
# The gRPC probes are asked where dlserve serves gRPC (it links libgrpc), on
# a free port: the environment's DLSERVE_GRPC_PORT=0 keeps it off otherwise.
grpc_set=()
if ldd "$DLSERVE" | grep -q 'libgrpc\.so'; then
    live_grpc=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    grpc_set=(--set grpc.port="$live_grpc" --set grpc.address=127.0.0.1)
else
    echo "# dlserve is built without gRPC: the gRPC probes are not asked"
fi
check "the daemon starts on the base's dlserve.conf with an embedded Kafka cluster" \
    start_daemon d --config "$K8S/base/dlserve.conf" --set http.address=127.0.0.1 \
        --models "$WORK/repo" --kafka-embedded "${grpc_set[@]}"
while read -r kind proto what _; do
    [ "$kind" = grace ] && continue
    if [ "$proto" = http ]; then
        check "$kind $what answers 200" test "$(code GET "$what")" = 200
    elif [ ${#grpc_set[@]} -gt 0 ]; then
        check "$kind: gRPC health (service \"${what#-}\") answers SERVING" \
            $M grpc-health "127.0.0.1:$live_grpc" "${what#-}"
    fi
done < "$WORK/probes"
/usr/bin/python3 "$SRC/tests/py/make_request.py" 0 8 > "$WORK/req8.json"
check "an infer request is served (per-model metrics exist)" \
    test "$(code POST /v2/models/fashion-mlp/infer -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req8.json")" = 200
check "the onnx format's model (1/model.onnx alone) is ready" \
    test "$(code GET /v2/models/mlp-onnx/versions/1/ready)" = 200
# The Kafka component starts after HTTP: its cluster's address is logged.
boot=""
for _ in $(seq 300); do
    boot=$(sed -n 's/.*embedded Kafka cluster at \([0-9.:]*\).*/\1/p' "$LOG" | head -1)
    [ -n "$boot" ] && break
    sleep 0.1
done
check "the embedded Kafka cluster started" test -n "$boot"
if [ -n "${KAFKA_TOOL:-}" ] && [ -n "$boot" ]; then
    check "records are fed to the embedded cluster" \
        sh -c "'$KAFKA_TOOL' feed -b '$boot' -t dlserve-in --count 20 > /dev/null"
    for _ in $(seq 100); do
        curl -s "$URL/metrics" | grep -q '^dlserve_kafka_outputs_total [1-9]' && break
        sleep 0.1
    done
fi
curl -s "$URL/metrics" > "$WORK/metrics"
mapfile -t used < <($M metrics "$SRC/conf/prometheus/dlserve-alerts.yml" \
    "$SRC/conf/grafana/dlserve.json" "$K8S/overlays/keda/scaledobject.yaml" "$K8S/base/hpa.yaml")
check "${#used[@]} metric names used by the alerts, dashboard and autoscalers" \
    test "${#used[@]}" -ge 20
check "each of them is in the live /metrics" $M known "$WORK/metrics" "${used[@]}"
check "a name not in /metrics is caught (dlserve_kafka_lag)" \
    sh -c "! $M known '$WORK/metrics' dlserve_kafka_lag > /dev/null"
check "the autoscalers use dlserve_batcher_queued_samples and dlserve_kafka_consumer_lag" \
    sh -c "grep -q dlserve_batcher_queued_samples '$K8S/overlays/keda/scaledobject.yaml' &&
           grep -q dlserve_kafka_consumer_lag '$K8S/overlays/keda/scaledobject.yaml' &&
           grep -q dlserve_batcher_queued_samples '$K8S/base/hpa.yaml'"
check "the daemon stops with 0" stop_daemon 60

finish
