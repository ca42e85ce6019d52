/* component.c: what every build knows of the daemon's optional components:
 * whether the configuration asks for each, and the stand-ins that refuse
 * to start one this dlserve was built without. */
#include "serve/component.h"

bool component_redis_wanted(const dl_serve_conf *c)
{
    return c->redis.host[0] != '\0';
}

bool component_kafka_wanted(const dl_serve_conf *c)
{
    return c->kafka.brokers[0] != '\0' || c->kafka.embedded;
}

bool component_grpc_wanted(const dl_serve_conf *c)
{
    return c->grpc.port != 0;
}

bool component_otlp_wanted(const dl_serve_conf *c)
{
    return c->trace.otlp_endpoint[0] != '\0';
}

const component component_redis_missing = {
    .name = "redis",
    .wanted = component_redis_wanted,
    .missing = "[redis] host is set but this dlserve was built without Redis (hiredis)",
};

const component component_kafka_missing = {
    .name = "kafka",
    .wanted = component_kafka_wanted,
    .missing = "[kafka] is configured but this dlserve was built without Kafka (librdkafka)",
};

const component component_otlp_missing = {
    .name = "trace",
    .wanted = component_otlp_wanted,
    .missing = "[trace] otlp_endpoint is set but this dlserve was built without span export "
               "(libcurl)",
};

const component component_grpc_missing = {
    .name = "grpc",
    .wanted = component_grpc_wanted,
    .missing = "[grpc] port is set but this dlserve was built without gRPC (libgrpc, "
               "protobuf-c); set grpc.port = 0",
};
