/* perf_grpc_missing.c: dlserve-perf's gRPC target in a build without
 * libgrpc (perf.h): says so. */
#include "perf.h"

#include <stdio.h>

static const char missing[] = "-i grpc is not built in (this build has no libgrpc)";

json_t *perf_grpc_metadata(const perf_grpc_opts *o, char *err, size_t err_len)
{
    (void)o;
    snprintf(err, err_len, "%s", missing);
    return NULL;
}

perf_target *perf_grpc_target(const perf_grpc_opts *o, const perf_grpc_input *in, size_t n,
                              char *err, size_t err_len)
{
    (void)o;
    (void)in;
    (void)n;
    snprintf(err, err_len, "%s", missing);
    return NULL;
}
