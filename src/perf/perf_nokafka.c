/* perf_nokafka.c: dlserve-perf's Kafka target in a build without
 * librdkafka (perf.h): says so. */
#include "perf.h"

#include <stdio.h>

perf_target *perf_kafka_target(const perf_kafka_opts *o, json_t *request, char *err,
                               size_t err_len)
{
    (void)o;
    (void)request;
    snprintf(err, err_len, "-i kafka is not built in (this build has no librdkafka)");
    return NULL;
}
