/* perf.h: what dlserve-perf (perf.c) measures through: a target runs one
 * measurement window at a time; HTTP's is in perf.c, Kafka's in
 * perf_kafka.c, gRPC's in perf_grpc.c. */
#ifndef DL_PERF_H
#define DL_PERF_H

#include "http_load.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct perf_target perf_target;
struct perf_target {
    /* One window: rate 0 closed loop (the level's concurrency in flight),
     * else open loop at rate requests a second; figures in st, as
     * hl_run's. */
    bool (*run)(perf_target *t, double rate, double seconds, hl_stats *st, char *err,
                size_t err_len);
    /* Prepares a level: value requests in flight (closed loop), or
     * connections for an open loop at rate value. */
    bool (*level)(perf_target *t, double value, bool rate_mode, int connections, char *err,
                  size_t err_len);
    void (*close)(perf_target *t);
    char what[1024];   /* a line for the report */
    /* The first failed answer since the last level(), where the target can
     * say more than an HTTP status (gRPC: the status code and details);
     * empty: none. */
    char first_error[512];
};

typedef struct perf_kafka_opts {
    const char *brokers;
    const char *input_topic, *output_topic, *dead_letter_topic;
} perf_kafka_opts;

/* A Kafka target producing request (an infer request body with "model";
 * each record gets an "id" and the same key) to the input topic and
 * matching the output topic's records by key; dead letters count as
 * errors. NULL with a message in err when it cannot start, or when
 * dlserve-perf was built without librdkafka. */
perf_target *perf_kafka_target(const perf_kafka_opts *o, json_t *request, char *err,
                               size_t err_len);

/* gRPC (the Open Inference Protocol's GRPCInferenceService) through
 * libgrpc's C core. */
typedef struct perf_grpc_opts {
    const char *target;              /* HOST:PORT */
    const char *model;
    const char *const *headers;      /* "Name: value", sent as metadata */
    int         nheaders;
    int         channels;            /* each its own HTTP/2 connection */
    int         threads;             /* completion queues polled, one a thread */
} perf_grpc_opts;

#define PERF_GRPC_MAX_DIMS 8

/* One input of a ModelInferRequest: its values, packed little-endian, go
 * to raw_input_contents. */
typedef struct perf_grpc_input {
    const char *name, *datatype;
    int64_t     shape[PERF_GRPC_MAX_DIMS];
    size_t      ndims;
    const void *raw;
    size_t      raw_len;
} perf_grpc_input;

/* The model's metadata by the ModelMetadata call, as HTTP's
 * GET /v2/models/MODEL gives it ({"inputs": [{"name", "datatype",
 * "shape"}, ...]}). NULL with a message in err when the call fails (the
 * server's status and details) or dlserve-perf was built without libgrpc. */
json_t *perf_grpc_metadata(const perf_grpc_opts *o, char *err, size_t err_len);

/* A gRPC target sending ModelInfer with the n inputs (copied) in
 * raw_input_contents; one call is made first, and a refusal is its
 * error. Closed loop: the level's concurrency of calls in flight over
 * o->channels channels; open loop: a call started when each is due. NULL
 * with a message in err when it cannot start. */
perf_target *perf_grpc_target(const perf_grpc_opts *o, const perf_grpc_input *in, size_t n,
                              char *err, size_t err_len);

#endif
