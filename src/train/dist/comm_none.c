/* comm_none.c: distributed training in a build without MPI: every job is
 * a job of one, collectives (bucketed sums included) are no-ops and
 * parameter servers are refused. */
#include "train/dist/dl_dist.h"

#include <stdlib.h>

struct dl_dist {
    dl_dist_conf conf;
};

bool dl_dist_available(void) { return false; }

dl_status dl_dist_new(const dl_dist_conf *conf, int *argc, char ***argv,
                      dl_dist **out, dl_err *err)
{
    (void)argc;
    (void)argv;
    *out = NULL;
    if (conf->mode == DL_DIST_PS_SYNC || conf->mode == DL_DIST_PS_ASYNC)
        return dl_err_set(err, DL_ERR_UNAVAILABLE,
                          "--dist %s needs MPI: this build has none", dl_dist_mode_name(conf->mode));
    dl_dist *d = calloc(1, sizeof(*d));
    if (!d)
        return dl_err_set(err, DL_ERR_NOMEM, "dist");
    d->conf = *conf;
    *out = d;
    return DL_OK;
}

void dl_dist_free(dl_dist *d) { free(d); }
void dl_dist_abort(dl_dist *d, int code) { (void)d; (void)code; }
const dl_dist_conf *dl_dist_conf_of(const dl_dist *d) { return &d->conf; }
int  dl_dist_rank(const dl_dist *d) { (void)d; return 0; }
int  dl_dist_size(const dl_dist *d) { (void)d; return 1; }
int  dl_dist_local_rank(const dl_dist *d) { (void)d; return 0; }
bool dl_dist_is_server(const dl_dist *d) { (void)d; return false; }
int  dl_dist_trainer(const dl_dist *d) { (void)d; return 0; }
int  dl_dist_trainers(const dl_dist *d) { (void)d; return 1; }
uint64_t dl_dist_bytes(const dl_dist *d) { (void)d; return 0; }
double dl_dist_comm_seconds(const dl_dist *d) { (void)d; return 0.0; }

dl_status dl_dist_sum(dl_dist *d, float *buf, int64_t n, const char *what, dl_err *err)
{
    (void)d; (void)buf; (void)n; (void)what; (void)err;
    return DL_OK;
}

dl_status dl_dist_sum_f64(dl_dist *d, double *buf, int n, const char *what, dl_err *err)
{
    (void)d; (void)buf; (void)n; (void)what; (void)err;
    return DL_OK;
}

dl_status dl_dist_bcast(dl_dist *d, float *buf, int64_t n, const char *what, dl_err *err)
{
    (void)d; (void)buf; (void)n; (void)what; (void)err;
    return DL_OK;
}

dl_status dl_dist_minmax(dl_dist *d, double v, double *min, double *max, dl_err *err)
{
    (void)d; (void)err;
    *min = *max = v;
    return DL_OK;
}

/* A job of one has nothing to sum: the buckets only remember their count. */
struct dl_dist_buckets {
    int nb;
};

dl_status dl_dist_buckets_new(dl_dist *d, int64_t n, const int64_t *cuts, int ncuts,
                              size_t bucket_bytes, dl_dist_buckets **out, dl_err *err)
{
    (void)d; (void)n; (void)cuts; (void)bucket_bytes;
    *out = calloc(1, sizeof(**out));
    if (!*out)
        return dl_err_set(err, DL_ERR_NOMEM, "gradient buckets");
    (*out)->nb = ncuts > 0 ? 1 : 0;
    return DL_OK;
}

void dl_dist_buckets_free(dl_dist_buckets *bk) { free(bk); }
int  dl_dist_buckets_count(const dl_dist_buckets *bk) { return bk->nb; }
void dl_dist_buckets_begin(dl_dist_buckets *bk, float *buf) { (void)bk; (void)buf; }

dl_status dl_dist_buckets_ready(dl_dist_buckets *bk, int64_t from, dl_err *err)
{
    (void)bk; (void)from; (void)err;
    return DL_OK;
}

dl_status dl_dist_buckets_finish(dl_dist_buckets *bk, const char *what, dl_err *err)
{
    (void)bk; (void)what; (void)err;
    return DL_OK;
}

void dl_dist_overlap(const dl_dist *d, double *inflight, double *exposed)
{
    (void)d;
    *inflight = *exposed = 0.0;
}

static dl_status no_ps(dl_err *err)
{
    return dl_err_set(err, DL_ERR_UNAVAILABLE, "parameter servers need MPI");
}

dl_status dl_ps_serve(dl_dist *d, dl_backend *be, const dl_hparams *hp,
                      const float *params, const dl_ps_layout *lay, dl_lr_fn lr_at,
                      void *lr_ctx, dl_ps_stats *stats, dl_err *err)
{
    (void)d; (void)be; (void)hp; (void)params; (void)lay; (void)lr_at;
    (void)lr_ctx; (void)stats;
    return no_ps(err);
}

dl_status dl_ps_pull(dl_dist *d, float *params, const dl_ps_layout *lay,
                     const int64_t *ids, int64_t nids, int64_t *version, dl_err *err)
{
    (void)d; (void)params; (void)lay; (void)ids; (void)nids; (void)version;
    return no_ps(err);
}

dl_status dl_ps_push(dl_dist *d, const float *grads, const dl_ps_layout *lay,
                     const int64_t *ids, int64_t nids, int64_t version, dl_err *err)
{
    (void)d; (void)grads; (void)lay; (void)ids; (void)nids; (void)version;
    return no_ps(err);
}

dl_status dl_ps_done(dl_dist *d, dl_err *err)
{
    (void)d;
    return no_ps(err);
}

dl_status dl_ps_finish(dl_dist *d, float *params, const dl_ps_layout *lay,
                       dl_ps_stats *total, dl_err *err)
{
    (void)d; (void)params; (void)lay; (void)total;
    return no_ps(err);
}
