/* perf.h: what dlserve-perf (perf.c) measures through: a target runs one
 * measurement window at a time; HTTP's is in perf.c, Kafka's in
 * perf_kafka.c. */
#ifndef DL_PERF_H
#define DL_PERF_H

#include "http_load.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

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

#endif
