#!/bin/bash
# tests/deploy/test_manifests.sh: the deployment files hold together with
# the daemon as built. Every YAML and JSON file under deploy/ and
# conf/{cluster,grafana,prometheus} parses; `kubectl kustomize` (or
# kustomize) builds the base and every overlay, or, where neither is
# installed, each kustomization's resources, files and patches are
# resolved by hand; every document built, the KServe files and the
# cluster MPIJob pass the upstream schemas of tests/deploy/schemas
# (Kubernetes' OpenAPI, the CRDs; strict: a misspelt or misplaced field
# fails; planted faults are caught) and dlserve's own rules; every
# dlserve.conf of the manifests passes `dlserve --check-config`; the
# KServe runtime's environment names real keys, its metrics annotations
# are where KServe reads them and it auto-selects the dlserve format only;
# the Service, the container, the probes, the NetworkPolicy and every
# dlserve.conf agree on the HTTP and gRPC ports (liveness and readiness
# are gRPC health probes); replicas spread over nodes and zones; training
# and serving share one ReadWriteMany claim; KEDA's Kafka trigger names
# the brokers, group and topic of the Kafka overlay; and on a live daemon
# (embedded Kafka, so that the Kafka families exist) the probes answer
# (the gRPC ones where dlserve links libgrpc), the training overlay's
# `dlserve --train` arguments, run under a local mpirun onto the claim's
# folder, publish a version that the daemon serves, and every metric name
# that the alert rules, the Grafana dashboard, the HPA, prometheus-adapter's
# rule and the KEDA ScaledObject use is in /metrics: a renamed metric, key,
# field or path fails here.
. "$(dirname "$0")/../lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
M="/usr/bin/python3 $SRC/tests/deploy/manifests.py"
K8S=$SRC/deploy/k8s
OVERLAYS=(kafka gpu keda monitoring training)
SCHEMAS=$SRC/tests/deploy/schemas

# ---- every file parses ----
mapfile -t files < <(find "$SRC/deploy" "$SRC/conf/cluster" "$SRC/conf/grafana" \
                          "$SRC/conf/prometheus" -name '*.yaml' -o -name '*.yml' -o -name '*.json')
check "${#files[@]} YAML/JSON files parse" $M parse "${files[@]}"
check "the files include the base, 5 overlays, KServe, Grafana and the alerts" \
    test "${#files[@]}" -ge 25

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
check "base: Deployment, Service, PodDisruptionBudget, HPA, claim, NetworkPolicy" \
    test "$(kinds base Deployment)$(kinds base Service)$(kinds base PodDisruptionBudget)$(kinds base HorizontalPodAutoscaler)$(kinds base PersistentVolumeClaim)$(kinds base NetworkPolicy)" = 111111
check "kafka overlay adds the Secret and the brokers' NetworkPolicy" \
    test "$(kinds kafka Secret)$(kinds kafka NetworkPolicy)" = 12
check "keda overlay: a ScaledObject (and its TriggerAuthentication) instead of the HPA" \
    test "$(kinds keda ScaledObject)$(kinds keda TriggerAuthentication)$(kinds keda HorizontalPodAutoscaler)" = 110
check "monitoring overlay adds the ServiceMonitor and the PrometheusRule" \
    test "$(kinds monitoring ServiceMonitor)$(kinds monitoring PrometheusRule)" = 11
check "training overlay: the base and an MPIJob, one claim" \
    test "$(kinds training Deployment)$(kinds training MPIJob)$(kinds training PersistentVolumeClaim)" = 111

# ---- schemas ----
# Every document of every build, the KServe files and the cluster MPIJob
# against the upstream schemas of tests/deploy/schemas (python3-jsonschema;
# strict: an object admits only the fields its schema lists) and dlserve's
# own rules (tests/deploy/schemas/README.md).
check "python3-jsonschema is installed (scripts/lib.sh TEST_PACKAGES)" \
    /usr/bin/python3 -c 'import jsonschema'
builds=("$WORK/base.yaml")
for o in "${OVERLAYS[@]}"; do builds+=("$WORK/$o.yaml"); done
check "every manifest passes its schema" \
    $M validate "$SCHEMAS" "${builds[@]}" "$SRC"/deploy/kserve/*.yaml "$SRC/conf/cluster/mpijob.yaml"
# Planted faults: each must fail, and the validator must name it (a
# crash is no catch).
# plant IN OUT PYTHON: OUT is IN's documents after PYTHON (d: each one).
plant() {
    /usr/bin/python3 -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    exec(sys.argv[3])
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))' "$@"
}
# caught FILE TEXT: validate fails on FILE, and TEXT is in what it prints.
caught() {
    ! $M validate "$SCHEMAS" "$1" > "$WORK/caught.out" && grep -qF -- "$2" "$WORK/caught.out"
}
RT=$SRC/deploy/kserve/servingruntime.yaml
plant "$RT" "$WORK/rt-meta.yaml" \
    'd["metadata"]["annotations"] = d["spec"].pop("annotations")'
check "planted: the runtime's prometheus.kserve.io annotations under metadata fail" \
    caught "$WORK/rt-meta.yaml" 'prometheus.kserve.io/port: KServe reads it from spec.annotations'
check "planted: ... and the KServe runtime check fails on them too" \
    sh -c "! $M kserve-runtime '$WORK/rt-meta.yaml' > /dev/null"
plant "$RT" "$WORK/rt-typo.yaml" 'd["spec"]["annotation"] = d["spec"].pop("annotations")'
check "planted: spec.annotation (a misspelt field) fails" \
    caught "$WORK/rt-typo.yaml" \
        "spec: Additional properties are not allowed ('annotation' was unexpected)"
plant "$RT" "$WORK/rt-onnx.yaml" 'd["spec"]["supportedModelFormats"][1]["priority"] = 1'
check "planted: a priority on the onnx format, not auto-selected, fails" \
    caught "$WORK/rt-onnx.yaml" 'onnx: a priority needs autoSelect: true'
plant "$WORK/base.yaml" "$WORK/dep-typo.yaml" \
    'd.get("kind") == "Deployment" and d["spec"]["template"]["spec"].update(topologySpreadConstraint=[])'
check "planted: a Deployment with topologySpreadConstraint (misspelt) fails" \
    caught "$WORK/dep-typo.yaml" "'topologySpreadConstraint' was unexpected"
plant "$WORK/base.yaml" "$WORK/dep-type.yaml" \
    'd.get("kind") == "Deployment" and d["spec"].update(replicas="two")'
check "planted: a Deployment with replicas: \"two\" (not an integer) fails" \
    caught "$WORK/dep-type.yaml" "spec.replicas: 'two' is not of type 'integer'"
plant "$WORK/keda.yaml" "$WORK/keda-typo.yaml" \
    'd.get("kind") == "ScaledObject" and d["spec"]["triggers"][0]["metadata"].update(lagTreshold="5")'
check "planted: a kafka trigger with lagTreshold (misspelt) fails" \
    caught "$WORK/keda-typo.yaml" "lagTreshold: not a key of KEDA's kafka scaler"
plant "$SRC/conf/cluster/mpijob.yaml" "$WORK/mpi-typo.yaml" \
    'w = d["spec"]["mpiReplicaSpecs"]["Worker"]
w["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"'
check "planted: an MPIJob worker container with imagePullPolcy (misspelt) fails" \
    caught "$WORK/mpi-typo.yaml" "'imagePullPolcy' was unexpected"
plant "$SRC/deploy/kserve/inferenceservice.yaml" "$WORK/isvc-meta.yaml" \
    'd["metadata"]["label"] = {"a": "b"}'
check "planted: an InferenceService with metadata.label (not ObjectMeta's) fails" \
    caught "$WORK/isvc-meta.yaml" \
        "metadata: Additional properties are not allowed ('label' was unexpected)"
printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n' > "$WORK/pod.yaml"
check "planted: a kind without a schema fails" \
    caught "$WORK/pod.yaml" 'no schema for v1 Pod'

# ---- the configuration ----
# conf_key FILE SECTION KEY: KEY's value in [SECTION] of a dlserve.conf (or
# of --check-config's output).
conf_key() {
    awk -v s="[$2]" -v k="$3" '/^\[/ { in_s = ($0 == s) } in_s && $1 == k && $2 == "=" { print $3 }' "$1"
}
# The pods read a claim that other nodes write: every dlserve.conf of the
# manifests rescans it ([models] control = poll).
for conf in "$K8S/base/dlserve.conf" "$K8S"/overlays/*/dlserve.conf; do
    check "${conf#"$SRC"/}: [models] control = poll, poll_interval_s = 10" \
        test "$(conf_key "$conf" models control) $(conf_key "$conf" models poll_interval_s)" = "poll 10"
done
# A dlserve without [models] control (older than the manifests) refuses
# the two keys: its checks then read copies without them.
if "$DLSERVE" --config-reference | grep -qw control; then
    has_control=1
else
    has_control=""
    echo "# dlserve has no [models] control: the configurations are checked without it"
fi
# conf_for FILE: FILE, or a copy without control and poll_interval_s.
conf_for() {
    if [ -n "$has_control" ]; then echo "$1"; return; fi
    local out
    out=$WORK/noctl.$(echo "$1" | md5sum | cut -c1-8).conf
    grep -Ev '^(control|poll_interval_s) = ' "$1" > "$out"
    echo "$out"
}
if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
    $M configmap "$WORK/base.yaml" "$WORK/base.conf"
    check "the base's ConfigMap passes dlserve --check-config" \
        "$DLSERVE" --check-config "$(conf_for "$WORK/base.conf")" > "$WORK/check.out"
    $M configmap "$WORK/kafka.yaml" "$WORK/kafka.conf"
    check "the kafka overlay's ConfigMap replaces the base's ([kafka] in it)" grep -q '^\[kafka\]' "$WORK/kafka.conf"
fi
for conf in "$K8S/base/dlserve.conf" "$K8S"/overlays/*/dlserve.conf; do
    check "${conf#"$SRC"/} passes dlserve --check-config" \
        env KAFKA_PASSWORD=secret "$DLSERVE" --check-config "$(conf_for "$conf")" > "$WORK/check.out"
done
if [ -n "$has_control" ]; then
    "$DLSERVE" --check-config "$K8S/base/dlserve.conf" > "$WORK/base.check"
    check "--check-config of the base shows control = poll" \
        test "$(conf_key "$WORK/base.check" models control)" = poll
fi
KAFKA_CONF=$(conf_for "$K8S/overlays/kafka/dlserve.conf")
KAFKA_PASSWORD=secret "$DLSERVE" --check-config "$KAFKA_CONF" > "$WORK/kafka.check"
check "the kafka overlay reads sasl.password from \${env:KAFKA_PASSWORD} (printed ***)" \
    sh -c "grep -q 'sasl.password = \*\*\*' '$WORK/kafka.check' && ! grep -q secret '$WORK/kafka.check'"
env -u KAFKA_PASSWORD "$DLSERVE" --check-config "$KAFKA_CONF" > /dev/null 2> "$WORK/nopw.err"
check "the kafka overlay fails without KAFKA_PASSWORD (the Secret is needed)" \
    fails_with "$WORK/nopw.err" $? 'environment variable KAFKA_PASSWORD is not set'
check "the Deployment passes KAFKA_PASSWORD from the Secret" \
    grep -q 'name: KAFKA_PASSWORD' "$WORK/kafka.yaml"
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
check "the KServe runtime: prometheus.kserve.io/* in spec.annotations (on the pods), autoSelect for dlserve only" \
    $M kserve-runtime "$RT"

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
mapfile -t netpol < <($M netpol "$WORK/base.yaml")
check "NetworkPolicy: ingress to the HTTP (API, /metrics) and gRPC ports only" \
    test "${netpol[0]}" = "$conf_port/TCP $grpc_port/TCP"
check "NetworkPolicy: egress to DNS only in the base" test "${netpol[1]}" = "53/TCP 53/UDP"
mapfile -t netpol < <($M netpol "$WORK/kafka.yaml")
broker_ports=$(conf_key "$K8S/overlays/kafka/dlserve.conf" kafka brokers | tr ',' '\n' |
               sed 's/.*://; s|$|/TCP|' | sort -u | tr '\n' ' ')
check "kafka overlay: egress to DNS and the brokers' ports (${broker_ports% })" \
    test "${netpol[1]}" = "$(echo "53/TCP 53/UDP $broker_ports" | tr ' ' '\n' | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//')"
check "replicas spread over nodes and zones (constraints select the pods)" \
    test "$($M spread "$WORK/base.yaml")" = "kubernetes.io/hostname topology.kubernetes.io/zone"
mapfile -t trigger < <($M kafka-trigger "$WORK/keda.yaml")
check "KEDA's kafka trigger: the overlay's brokers, group and input topic" \
    test "${trigger[*]}" = "$(conf_key "$K8S/overlays/kafka/dlserve.conf" kafka brokers) $(conf_key "$K8S/overlays/kafka/dlserve.conf" kafka group_id) $(conf_key "$K8S/overlays/kafka/dlserve.conf" kafka input_topics)"
check "KEDA: no Prometheus trigger (its query would hard-code a namespace)" \
    sh -c "! grep -q 'type: prometheus' '$WORK/keda.yaml'"
check "the ServiceMonitor and PrometheusRule carry release: kube-prometheus-stack" \
    test "$(grep -c '^    release: kube-prometheus-stack$' "$WORK/monitoring.yaml")" = 2

# ---- one claim for training and serving ----
$M claims "$WORK/training.yaml" > "$WORK/claims"
read -r claim modes < <(grep -v '^deployment\|^mpijob' "$WORK/claims")
check "one claim ($claim), ReadWriteMany" \
    test "$(grep -vc '^deployment\|^mpijob' "$WORK/claims") $modes" = "1 ReadWriteMany"
read -r _ dep_claim dep_sub dep_mount < <(grep '^deployment' "$WORK/claims")
check "the Deployment serves $dep_sub/ of $claim at $dep_mount = [models] dir" \
    test "$dep_claim $dep_mount" = "$claim $(conf_key "$K8S/base/dlserve.conf" models dir)"
check "every MPIJob pod with a claim mounts $claim" \
    test "$(grep '^mpijob' "$WORK/claims" | awk '{print $2}' | sort -u)" = "$claim"
read -r _ _ job_mount < <(grep '^mpijob' "$WORK/claims" | head -1)
$M train-args "$WORK/training.yaml" > "$WORK/train.args"
read -r ranks slots < "$WORK/train.args"
check "mpirun -n ($ranks) = Worker replicas x slotsPerWorker ($slots), several ranks" \
    test "$ranks" = "$slots" -a "$ranks" -ge 2
mapfile -t train_args < <(tail -n +2 "$WORK/train.args")
train_dir=$(printf '%s\n' "${train_args[@]}" | grep -A1 -x -- --train | tail -1)
check "the job trains $train_dir, a model of the served folder $job_mount/$dep_sub" \
    test "${train_dir%/*}" = "$job_mount/$dep_sub"

$M probes "$WORK/base.yaml" > "$WORK/probes"
check "the startup probe asks HTTP /v2/health/ready" \
    grep -qx "startupProbe http /v2/health/ready $conf_port" "$WORK/probes"
check "liveness and readiness are gRPC health probes on grpc.port" \
    sh -c "grep -qx 'livenessProbe grpc liveness $grpc_port' '$WORK/probes' &&
           grep -qx 'readinessProbe grpc - $grpc_port' '$WORK/probes'"
read -r _ grace sleep_s < <(grep '^grace' "$WORK/probes")
check "terminationGracePeriodSeconds ($grace) covers preStop ($sleep_s s) and 45 s of drain" \
    test "$grace" -ge $((sleep_s + 45))

# ---- a live daemon: probes, the training recipe and metric names ----
# The claim is $WORK/claim: the daemon serves its $dep_sub/ folder, as the
# Deployment does; the data set sits in datasets/ beside it.
REPO=$WORK/claim/$dep_sub
make_repo "$REPO"
# The onnx format: a version folder holding only model.onnx.
mkdir -p "$REPO/mlp-onnx/1"
"$DLSERVE" --export "$REPO/fashion-mlp" --onnx "$REPO/mlp-onnx/1/model.onnx" > /dev/null
# The gRPC probes are asked where dlserve serves gRPC (it links libgrpc), on
# a free port: the environment's DLSERVE_GRPC_PORT=0 keeps it off otherwise.
grpc_set=()
if ldd "$DLSERVE" | grep -q 'libgrpc\.so'; then
    live_grpc=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    grpc_set=(--set grpc.port="$live_grpc" --set grpc.address=127.0.0.1)
else
    echo "# dlserve is built without gRPC: the gRPC probes are not asked"
fi
# A rescan every second here (the manifests say 10 s).
poll_set=()
[ -n "$has_control" ] && poll_set=(--set models.poll_interval_s=1)
check "the daemon starts on the base's dlserve.conf with an embedded Kafka cluster" \
    start_daemon d --config "$(conf_for "$K8S/base/dlserve.conf")" --set http.address=127.0.0.1 \
        --models "$REPO" --kafka-embedded "${grpc_set[@]}" "${poll_set[@]}"
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
# The training overlay's job, as its launcher runs it: the same dlserve
# arguments under mpirun, the job's mount ($job_mount) being the claim's
# folder here; 2 ranks, one short epoch (the last of repeated options
# counts).
mkdir -p "$WORK/claim/datasets"
ln -s "$DATA" "$WORK/claim/datasets/fashion-mnist"
local_args=("${train_args[@]/#$job_mount/$WORK/claim}")
check "the MPIJob's dlserve --train (2 ranks, local mpirun) writes version 2 onto the claim" \
    sh -c '"$@" > "'"$WORK"'/train.out" 2>&1' _ \
        mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp \
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -n 2 \
        "$DLSERVE" "${local_args[@]}" --epochs 1 --limit 3000 --threads 1
check "... its summary names version 2 and 2 ranks" \
    grep -q '"version":2,.*"ranks":2' "$WORK/train.out"
for _ in $(seq 600); do
    [ "$(code GET /v2/models/fashion-mlp/versions/2/ready)" = 200 ] && break
    sleep 0.1
done
check "the daemon serves the published version 2 (rescanned)" \
    test "$(code GET /v2/models/fashion-mlp/versions/2/ready)" = 200
check "an infer request is answered by version 2" \
    test "$(code POST /v2/models/fashion-mlp/versions/2/infer -H 'Content-Type: application/json' \
            --data-binary @"$WORK/req8.json")" = 200
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
ADAPTER=$K8S/overlays/monitoring/prometheus-adapter-values.yaml
mapfile -t used < <($M metrics "$SRC/conf/prometheus/dlserve-alerts.yml" \
    "$SRC/conf/grafana/dlserve.json" "$K8S/overlays/keda/scaledobject.yaml" "$K8S/base/hpa.yaml" \
    "$ADAPTER")
check "${#used[@]} metric names used by the alerts, dashboard, autoscalers and adapter" \
    test "${#used[@]}" -ge 20
check "each of them is in the live /metrics" $M known "$WORK/metrics" "${used[@]}"
check "a name not in /metrics is caught (dlserve_kafka_lag)" \
    sh -c "! $M known '$WORK/metrics' dlserve_kafka_lag > /dev/null"
mapfile -t adapter_q < <($M metrics "$ADAPTER")
check "prometheus-adapter's queries name dlserve_batcher_queued_samples (in /metrics)" \
    sh -c "test '${adapter_q[*]}' = dlserve_batcher_queued_samples && $M known '$WORK/metrics' ${adapter_q[*]}"
check "the HPA's Pods metric is the one prometheus-adapter's rule exposes" \
    test "$(grep -A1 'metric:' "$K8S/base/hpa.yaml" | sed -n 's/.*name: //p')" = "$($M adapter "$ADAPTER")"
check "the daemon stops with 0" stop_daemon 60

finish
