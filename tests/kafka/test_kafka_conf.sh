#!/usr/bin/env bash
# The Kafka clients' configuration, on the embedded mock cluster: the
# [kafka.client] properties reach every client the daemon makes (the
# consumer's and the producer's effective configuration, logged at debug
# level, hold them) and the per-client sections override them; secrets
# come from ${env:} and ${file:} and appear nowhere (--check-config, the
# log, /status); security properties in [kafka.consumer] alone stop the
# start; --check-config applies --set and has librdkafka check every
# property, naming the file and line of one it refuses (sasl.jaas.config). librdkafka 2.0.2's mock cluster has no SASL (it does not answer
# SaslHandshake, nor has rdkafka_mock.h a setting for it) and no TLS: the
# SASL clients here try PLAIN and fail against it, which shows they use it.
. "$DLSERVE_SOURCE_ROOT/tests/lib/lib.sh"
. "$SRC/tests/lib/lib_serve.sh"
. "$SRC/tests/lib/lib_kafka.sh"
trap 'kill -9 ${PID:-} 2>/dev/null; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT

ENV_SECRET=kafka-pw-Zq81env FILE_SECRET=key-pw-Xv27file TOKEN=http-tok-Lm55file
printf '%s\n' "$FILE_SECRET" > "$WORK/key-password"
printf '%s\n' "$TOKEN" > "$WORK/http-token"
mkdir -p "$WORK/repo"
cat > "$WORK/dlserve.conf" <<CONF
[http]
token = \${file:$WORK/http-token}
[log]
debug = kafka
[kafka]
embedded = true
[kafka.client]
security.protocol = sasl_plaintext
sasl.mechanisms = PLAIN
sasl.username = \${env:KAFKA_USER}
sasl.password = \${env:KAFKA_PASSWORD}
ssl.key.password = \${file:$WORK/key-password}
client.rack = rack-all
[kafka.producer]
client.rack = rack-producer
CONF
export KAFKA_USER=svc-dlserve KAFKA_PASSWORD=$ENV_SECRET

# no_secret FILE: none of the three secrets is in FILE
no_secret() { ! grep -q -e "$ENV_SECRET" -e "$FILE_SECRET" -e "$TOKEN" "$1"; }

"$DLSERVE" --check-config "$WORK/dlserve.conf" > "$WORK/check.out" 2>&1
check "--check-config shows [kafka.client], secrets as ***" \
    grep -qz $'\n\\[kafka.client\\]\nsecurity.protocol = sasl_plaintext\nsasl.mechanisms = PLAIN\nsasl.username = svc-dlserve\nsasl.password = \\*\\*\\*\nssl.key.password = \\*\\*\\*\nclient.rack = rack-all\n\n\\[kafka.producer\\]\nclient.rack = rack-producer\n' "$WORK/check.out"
check "--check-config shows the http token as ***" grep -qx 'token = \*\*\*' "$WORK/check.out"
check "--check-config shows no secret" no_secret "$WORK/check.out"

check "daemon starts" start_daemon client --config "$WORK/dlserve.conf" --models "$WORK/repo"
check "its Kafka clients start" wait_for 20 grep -q "kafka: consuming" "$LOG"
# effective PROPERTY=VALUE CLIENT: the client's logged configuration has it
effective() { grep "kafka: $2 client configuration" "$LOG" | grep -q -- " $1\( \|$\)"; }
for client in consumer producer; do
    for p in security.protocol=sasl_plaintext sasl.mechanisms=PLAIN \
             sasl.username=svc-dlserve 'sasl.password=\*\*\*' 'ssl.key.password=\*\*\*'; do
        check "$client gets $p" effective "$p" $client
    done
done
check "[kafka.client] reaches the consumer" effective client.rack=rack-all consumer
check "[kafka.producer] overrides it for the producer" effective client.rack=rack-producer producer
check "ours stay under [kafka.client] (group.id)" effective group.id=dlserve consumer
# a member gone silent leaves the group after 10 s, not librdkafka's 45
check "the consumer's group session is 10 s" effective session.timeout.ms=10000 consumer
check "... with a heartbeat a second" effective heartbeat.interval.ms=1000 consumer
# the embedded (mock) cluster answers a fetch only once its wait is over
check "on the embedded cluster a fetch waits 1 ms" effective fetch.wait.max.ms=1 consumer
check "the clients try SASL PLAIN on the (SASL-less) mock" \
    wait_for 20 grep -q "SASL Handshake not supported by broker (required by mechanism PLAIN)" "$LOG"
curl -s -H "Authorization: Bearer $TOKEN" "$URL/status" > "$WORK/status.json"
check "/status answers with the token from the file" grep -q '"kafka"' "$WORK/status.json"
check "/status shows no secret" no_secret "$WORK/status.json"
check "daemon stops cleanly" stop_daemon
check "the log shows no secret" no_secret "$LOG"

# the transactional producer (exactly-once) gets them too, and its default
# transactional id (dlserve-<group_id>-<host>-<http port>); its
# transactions need the broker, so here plaintext, from the command line (a
# later [kafka.client] setting)
check "an exactly-once daemon starts" start_daemon eos --config "$WORK/dlserve.conf" \
    --models "$WORK/repo" --set kafka.delivery=exactly-once \
    --set kafka.client.security.protocol=plaintext
check "... its Kafka clients start" wait_for 20 grep -q "kafka: consuming" "$LOG"
for p in security.protocol=plaintext sasl.username=svc-dlserve 'sasl.password=\*\*\*' \
         client.rack=rack-producer "transactional.id=dlserve-dlserve-$(hostname)-$PORT"; do
    check "transactional producer gets $p" effective "$p" "transactional producer"
done
check "... and stops" stop_daemon
check "... its log shows no secret" no_secret "$LOG"

# security properties for one client alone are refused, naming file, section, key
printf '[kafka]\nembedded = true\n[kafka.consumer]\nsasl.mechanisms = PLAIN\n' > "$WORK/bad.conf"
"$DLSERVE" --config "$WORK/bad.conf" --set http.port=0 --models "$WORK/repo" \
    > /dev/null 2> "$WORK/bad.err"
rc=$?
check "sasl.* in [kafka.consumer] alone refused at start (exit 2)" fails_with "$WORK/bad.err" $rc \
    "bad.conf:4: \[kafka.consumer\] sasl.mechanisms: security properties .* set them in \[kafka.client\]"
[ $rc -eq 2 ] || bad "exit code $rc, not 2"
printf '[kafka.producer]\nssl.ca.location = /etc/ca.pem\n' > "$WORK/bad.conf"
"$DLSERVE" --check-config "$WORK/bad.conf" > /dev/null 2> "$WORK/bad.err"
check "ssl.* in [kafka.producer] alone refused by --check-config" fails_with "$WORK/bad.err" $? \
    "bad.conf:2: \[kafka.producer\] ssl.ca.location: .*\[kafka.client\]"

# --check-config sets every property as the daemon does, so that librdkafka
# refuses what it would refuse at start, naming the file and line
printf '[kafka]\nembedded = true\n[kafka.client]\nsasl.mechanisms = PLAIN\nsasl.jaas.config = %s\n' \
    'org.apache.kafka.common.security.plain.PlainLoginModule required;' > "$WORK/jaas.conf"
"$DLSERVE" --check-config "$WORK/jaas.conf" > /dev/null 2> "$WORK/jaas.err"; rc=$?
check "--check-config refuses sasl.jaas.config with file:line and librdkafka's reason" \
    fails_with "$WORK/jaas.err" $rc \
    "jaas.conf:5: Kafka property 'sasl.jaas.config': Java JAAS configuration is not supported"
[ $rc -eq 2 ] || bad "exit code $rc, not 2"
printf '[kafka.consumer]\nsession.timeout.ms = 10000\nfetch.wait.max.ms = soon\n' > "$WORK/bad.conf"
"$DLSERVE" --check-config "$WORK/bad.conf" > /dev/null 2> "$WORK/bad.err"
check "... a bad value in [kafka.consumer]" fails_with "$WORK/bad.err" $? \
    "bad.conf:3: Kafka property 'fetch.wait.max.ms': Invalid value"
printf '[kafka.producer]\nlinger.ms = 5\nno.such.property = 1\n' > "$WORK/bad.conf"
"$DLSERVE" --check-config "$WORK/bad.conf" > /dev/null 2> "$WORK/bad.err"
check "... an unknown property in [kafka.producer]" fails_with "$WORK/bad.err" $? \
    "bad.conf:3: Kafka property 'no.such.property': No such configuration property"
# the --set options of the same command line apply, and are checked too
"$DLSERVE" --check-config "$WORK/dlserve.conf" --set http.port=9123 \
    --set kafka.consumer.client.rack=rack-set --port 9124 > "$WORK/set.out" 2>&1
check "--check-config applies --set (last one wins)" grep -qx 'port = 9124' "$WORK/set.out"
check "... to the raw sections too" grep -qz $'\n\\[kafka.consumer\\]\nclient.rack = rack-set\n' \
    "$WORK/set.out"
"$DLSERVE" --check-config "$WORK/dlserve.conf" --set kafka.client.sasl.jaas.config=x \
    > /dev/null 2> "$WORK/set.err"
check "... a bad --set property is refused" fails_with "$WORK/set.err" $? \
    "^dlserve: --set: Kafka property 'sasl.jaas.config': Java JAAS"
"$DLSERVE" --check-config "$WORK/dlserve.conf" --set kafka.delivery=exactly-once \
    --set kafka.producer.transactional.id=tx-1 > /dev/null 2>&1
check "... exactly-once's transactional producer checks" test $? -eq 0

unset KAFKA_PASSWORD
"$DLSERVE" --check-config "$WORK/dlserve.conf" > /dev/null 2> "$WORK/unset.err"
check "an unset \${env:} variable is refused with file:line" fails_with "$WORK/unset.err" $? \
    "dlserve.conf:11: \[kafka.client\] sasl.password: environment variable KAFKA_PASSWORD is not set"
finish
