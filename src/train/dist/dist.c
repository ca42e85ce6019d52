/* dist.c: the parts of distributed training that need no MPI: parsing
 * --dist and the sharding of the flattened parameters over servers. */
#include "train/dist/dl_dist.h"

#include <string.h>

dl_status dl_dist_parse_mode(const char *s, dl_dist_conf *conf, dl_err *err)
{
    char name[16];
    int64_t k;
    bool k_ok = dl_parse_name_num(s, name, sizeof(name), &k);
    if (strcmp(name, "avg") == 0) {
        if (!k_ok || k == 0 || k > 1000000)
            return dl_err_set(err, DL_ERR_INVALID,
                              "--dist %s: K in avg:K must be a positive integer", s);
        conf->mode = DL_DIST_AVG;
        conf->avg_k = k < 0 ? 1 : (int)k;
    } else if (strcmp(s, "allreduce") == 0) {
        conf->mode = DL_DIST_ALLREDUCE;
    } else if (strcmp(s, "ps-sync") == 0) {
        conf->mode = DL_DIST_PS_SYNC;
    } else if (strcmp(s, "ps-async") == 0) {
        conf->mode = DL_DIST_PS_ASYNC;
    } else {
        return dl_err_set(err, DL_ERR_INVALID,
                          "--dist '%s': expected allreduce, avg[:K], ps-sync or ps-async", s);
    }
    return DL_OK;
}

const char *dl_dist_mode_name(dl_dist_mode mode)
{
    switch (mode) {
    case DL_DIST_ALLREDUCE: return "allreduce";
    case DL_DIST_AVG:       return "avg";
    case DL_DIST_PS_SYNC:   return "ps-sync";
    case DL_DIST_PS_ASYNC:  return "ps-async";
    }
    return "?";
}

void dl_ps_shard(int64_t n, int servers, int s, int64_t *begin, int64_t *end)
{
    *begin = n * s / servers;
    *end = n * (s + 1) / servers;
}
