/* param_server.c: the sharded parameter server (PaddlePaddle's design).
 * Each server owns a contiguous shard of the flattened parameters and its
 * optimizer state; trainers pull shards and push gradient shards.
 * Synchronous: one update per step once every trainer's gradient is in,
 * summed in trainer order. Asynchronous: each gradient is applied as it
 * arrives unless older than --max-staleness, and a trainer may not run
 * more than that many steps ahead of the slowest. */
#define _POSIX_C_SOURCE 200809L
#include "train/dist/comm.h"

#include <stdlib.h>
#include <string.h>

enum { TAG_PULL = 7101, TAG_PARAMS, TAG_GRAD, TAG_DONE, TAG_STATS };

#define FINAL_PULL (-1)
#define HDR 16   /* bytes of header before a shard: version, step */

/* ---- server ------------------------------------------------------------ */

typedef struct server {
    dl_dist     *d;
    dl_backend  *be;
    const dl_hparams *hp;
    bool         sync;
    int          T;                 /* trainers */
    int64_t      begin, n;          /* shard */
    float       *p, *g;             /* backend memory */
    float       *host;              /* host copy for replies */
    dl_optim    *opt;
    int64_t      version;           /* updates applied */
    int64_t     *steps;             /* gradients received per trainer */
    int64_t     *pull_at;           /* pending pull's step, or INT64_MIN */
    bool        *done, final_pending;
    int          ndone;
    float       *slots;             /* sync: one gradient per trainer */
    bool        *have;
    char       **sendbuf;           /* per trainer */
    MPI_Request *sendreq;
    char        *recvbuf;
    size_t       recvcap;
    dl_lr_fn     lr_at;
    void        *lr_ctx;
    dl_ps_stats *stats;
} server;

static void server_free(server *s)
{
    for (int t = 0; s->sendbuf && t < s->T; t++)
        free(s->sendbuf[t]);
    free(s->sendbuf);
    free(s->sendreq);
    free(s->steps);
    free(s->pull_at);
    free(s->done);
    free(s->slots);
    free(s->have);
    free(s->recvbuf);
    free(s->host);
    dl_optim_free(s->opt);
    if (s->p)
        s->be->ops->release(s->be, s->p);
    if (s->g)
        s->be->ops->release(s->be, s->g);
}

static dl_status server_init(server *s, const float *params, int64_t nparams,
                             dl_err *err)
{
    dl_dist *d = s->d;
    int64_t begin, end;
    dl_ps_shard(nparams, d->conf.servers, d->rank - d->ntrainers, &begin, &end);
    s->begin = begin;
    s->n = end - begin;
    s->T = d->ntrainers;
    s->sync = d->conf.mode == DL_DIST_PS_SYNC;
    size_t shard = (size_t)(s->n ? s->n : 1) * sizeof(float);
    s->recvcap = HDR + shard;
    s->steps = calloc((size_t)s->T, sizeof(*s->steps));
    s->pull_at = malloc((size_t)s->T * sizeof(*s->pull_at));
    s->done = calloc((size_t)s->T, sizeof(*s->done));
    s->have = calloc((size_t)s->T, sizeof(*s->have));
    s->slots = s->sync ? malloc(shard * (size_t)s->T) : NULL;
    s->sendbuf = calloc((size_t)s->T, sizeof(*s->sendbuf));
    s->sendreq = malloc((size_t)s->T * sizeof(*s->sendreq));
    s->recvbuf = malloc(s->recvcap);
    s->host = malloc(shard);
    if (!s->steps || !s->pull_at || !s->done || !s->have || (s->sync && !s->slots) ||
        !s->sendbuf || !s->sendreq || !s->recvbuf || !s->host)
        return dl_err_set(err, DL_ERR_NOMEM, "parameter server buffers");
    for (int t = 0; t < s->T; t++) {
        s->pull_at[t] = INT64_MIN;
        s->sendreq[t] = MPI_REQUEST_NULL;
        if (!(s->sendbuf[t] = malloc(s->recvcap)))
            return dl_err_set(err, DL_ERR_NOMEM, "parameter server buffers");
    }
    dl_status st = s->be->ops->alloc(s->be, shard, (void **)&s->p, err);
    if (st == DL_OK)
        st = s->be->ops->alloc(s->be, shard, (void **)&s->g, err);
    if (st == DL_OK)
        st = dl_optim_new(s->be, s->hp, s->n, &s->opt, err);
    if (st == DL_OK)
        s->be->ops->upload(s->be, s->p, params + begin, (size_t)s->n * sizeof(float));
    return st;
}

/* Sends the shard to trainer t (the previous send to t must be done). */
static dl_status reply_params(server *s, int t, dl_err *err)
{
    dl_status st = comm_wait(s->d, &s->sendreq[t], "sending parameters", err);
    if (st != DL_OK)
        return st;
    s->be->ops->download(s->be, s->host, s->p, (size_t)s->n * sizeof(float));
    int64_t hdr[2] = { s->version, 0 };
    memcpy(s->sendbuf[t], hdr, HDR);
    memcpy(s->sendbuf[t] + HDR, s->host, (size_t)s->n * sizeof(float));
    s->d->bytes += (uint64_t)s->n * sizeof(float);
    MPI_Isend(s->sendbuf[t], (int)(HDR + (size_t)s->n * sizeof(float)), MPI_BYTE, t,
              TAG_PARAMS, s->d->ps, &s->sendreq[t]);
    return DL_OK;
}

static int64_t slowest(const server *s)
{
    int64_t m = INT64_MAX;
    for (int t = 0; t < s->T; t++)
        if (!s->done[t] && s->steps[t] < m)
            m = s->steps[t];
    return m;
}

/* May trainer t, asking at step `at`, have the parameters now? */
static bool pull_allowed(const server *s, int64_t at)
{
    if (s->sync)
        return s->version == at;
    int64_t m = slowest(s);
    return m == INT64_MAX || at - m <= s->d->conf.max_staleness;
}

static dl_status answer_pulls(server *s, dl_err *err)
{
    for (int t = 0; t < s->T; t++) {
        if (s->pull_at[t] == INT64_MIN || !pull_allowed(s, s->pull_at[t]))
            continue;
        s->pull_at[t] = INT64_MIN;
        dl_status st = reply_params(s, t, err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

static void apply(server *s, const float *grad)
{
    s->be->ops->upload(s->be, s->g, grad, (size_t)s->n * sizeof(float));
    dl_optim_step(s->opt, s->p, s->g, s->lr_at(s->lr_ctx, s->version));
    s->version++;
    s->stats->updates++;
}

/* Synchronous: once every running trainer's gradient for this step is in,
 * sum them in trainer order and update. */
static void sync_update(server *s)
{
    for (int t = 0; t < s->T; t++)
        if (!s->done[t] && !s->have[t])
            return;
    float *sum = s->host;
    memset(sum, 0, (size_t)s->n * sizeof(float));
    for (int t = 0; t < s->T; t++) {
        if (!s->have[t])
            continue;
        const float *g = s->slots + (size_t)t * (size_t)s->n;
        for (int64_t i = 0; i < s->n; i++)
            sum[i] += g[i];
        s->have[t] = false;
    }
    apply(s, sum);
}

static void on_grad(server *s, int t)
{
    int64_t hdr[2];
    memcpy(hdr, s->recvbuf, HDR);
    const float *grad = (const float *)(s->recvbuf + HDR);
    s->steps[t]++;
    s->d->bytes += (uint64_t)s->n * sizeof(float);
    if (s->sync) {
        memcpy(s->slots + (size_t)t * (size_t)s->n, grad, (size_t)s->n * sizeof(float));
        s->have[t] = true;
        sync_update(s);
        return;
    }
    int64_t staleness = s->version - hdr[0];
    if (staleness > s->d->conf.max_staleness) {
        s->stats->discarded++;
        return;
    }
    s->stats->staleness_sum += (double)staleness;
    if (staleness > s->stats->max_staleness)
        s->stats->max_staleness = staleness;
    /* PS-async scales nothing: each trainer's mean gradient is one step. */
    float *aligned = s->host;
    memcpy(aligned, grad, (size_t)s->n * sizeof(float));
    apply(s, aligned);
}

static dl_status handle(server *s, const MPI_Status *ms, dl_err *err)
{
    int t = ms->MPI_SOURCE, count;
    MPI_Get_count(ms, MPI_BYTE, &count);
    if (t >= s->T || (size_t)count > s->recvcap)
        return dl_err_set(err, DL_ERR_INVALID, "unexpected message of %d bytes from rank %d",
                          count, t);
    MPI_Recv(s->recvbuf, count, MPI_BYTE, t, ms->MPI_TAG, s->d->ps, MPI_STATUS_IGNORE);
    int64_t v;
    switch (ms->MPI_TAG) {
    case TAG_PULL:
        memcpy(&v, s->recvbuf, sizeof(v));
        if (v == FINAL_PULL)
            s->final_pending = true;
        else
            s->pull_at[t] = v;
        break;
    case TAG_GRAD:
        on_grad(s, t);
        break;
    case TAG_DONE:
        s->done[t] = true;
        s->ndone++;
        if (s->sync)
            sync_update(s);
        break;
    default:
        return dl_err_set(err, DL_ERR_INVALID, "unexpected tag %d from rank %d",
                          ms->MPI_TAG, t);
    }
    return answer_pulls(s, err);
}

dl_status dl_ps_serve(dl_dist *d, dl_backend *be, const dl_hparams *hp,
                      const float *params, int64_t nparams, dl_lr_fn lr_at,
                      void *lr_ctx, dl_ps_stats *stats, dl_err *err)
{
    memset(stats, 0, sizeof(*stats));
    server s = { .d = d, .be = be, .hp = hp, .lr_at = lr_at, .lr_ctx = lr_ctx,
                 .stats = stats };
    dl_status st = server_init(&s, params, nparams, err);
    double last = MPI_Wtime();
    for (int spins = 0; st == DL_OK && !(s.ndone == s.T && s.final_pending); spins++) {
        int flag;
        MPI_Status ms;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, d->ps, &flag, &ms);
        if (flag) {
            st = handle(&s, &ms, err);
            last = MPI_Wtime();
            spins = 0;
            continue;
        }
        d->what = "serving parameters";
        comm_serve_queries(d);
        if (MPI_Wtime() - last > d->conf.stall_timeout)
            comm_stalled(d, "serving parameters (no trainer message)", MPI_Wtime() - last);
        comm_pause(spins);
    }
    d->what = NULL;
    if (st == DL_OK)   /* the final parameters and the statistics to trainer 0 */
        st = reply_params(&s, 0, err);
    if (st == DL_OK)
        st = comm_wait(d, &s.sendreq[0], "sending final parameters", err);
    if (st == DL_OK) {
        MPI_Request req;
        MPI_Isend(stats, sizeof(*stats), MPI_BYTE, 0, TAG_STATS, d->ps, &req);
        st = comm_wait(d, &req, "sending statistics", err);
    }
    for (int t = 0; st == DL_OK && t < s.T; t++)
        st = comm_wait(d, &s.sendreq[t], "sending parameters", err);
    server_free(&s);
    return st;
}

/* ---- trainer side ------------------------------------------------------ */

struct ps_client {
    int          S;
    int64_t      nparams;
    char       **buf;        /* per server: pull replies */
    char       **out;        /* per server: pushes */
    MPI_Request *outreq;
    int64_t      step;
};

void ps_client_free(struct ps_client *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->S; i++) {
        free(c->buf[i]);
        free(c->out[i]);
    }
    free(c->buf);
    free(c->out);
    free(c->outreq);
    free(c);
}

static dl_status client(dl_dist *d, int64_t nparams, struct ps_client **out, dl_err *err)
{
    if (d->client) {
        *out = d->client;
        return DL_OK;
    }
    struct ps_client *c = calloc(1, sizeof(*c));
    int S = d->conf.servers;
    if (!c || !(c->buf = calloc((size_t)S, sizeof(char *))) ||
        !(c->out = calloc((size_t)S, sizeof(char *))) ||
        !(c->outreq = malloc((size_t)S * sizeof(MPI_Request)))) {
        ps_client_free(c);
        return dl_err_set(err, DL_ERR_NOMEM, "parameter client");
    }
    c->S = S;
    c->nparams = nparams;
    for (int i = 0; i < S; i++) {
        int64_t b, e;
        dl_ps_shard(nparams, S, i, &b, &e);
        size_t bytes = HDR + (size_t)(e - b + 1) * sizeof(float);
        c->outreq[i] = MPI_REQUEST_NULL;
        if (!(c->buf[i] = malloc(bytes)) || !(c->out[i] = malloc(bytes))) {
            ps_client_free(c);
            return dl_err_set(err, DL_ERR_NOMEM, "parameter client");
        }
    }
    d->client = c;
    *out = c;
    return DL_OK;
}

static dl_status pull(dl_dist *d, int64_t at, float *params, int64_t nparams,
                      int64_t *version, dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, nparams, &c, err);
    if (st != DL_OK)
        return st;
    MPI_Request *reqs = malloc((size_t)c->S * 2 * sizeof(*reqs));
    if (!reqs)
        return dl_err_set(err, DL_ERR_NOMEM, "pull requests");
    for (int i = 0; i < c->S; i++) {
        int64_t b, e;
        dl_ps_shard(nparams, c->S, i, &b, &e);
        MPI_Irecv(c->buf[i], (int)(HDR + (size_t)(e - b) * sizeof(float)), MPI_BYTE,
                  d->ntrainers + i, TAG_PARAMS, d->ps, &reqs[i]);
        MPI_Isend(&at, 1, MPI_INT64_T, d->ntrainers + i, TAG_PULL, d->ps, &reqs[c->S + i]);
    }
    st = comm_wait_all(d, 2 * c->S, reqs, at == FINAL_PULL ? "final pull" : "pull", err);
    free(reqs);
    int64_t vmin = INT64_MAX;
    for (int i = 0; st == DL_OK && i < c->S; i++) {
        int64_t b, e, hdr[2];
        dl_ps_shard(nparams, c->S, i, &b, &e);
        memcpy(hdr, c->buf[i], HDR);
        memcpy(params + b, c->buf[i] + HDR, (size_t)(e - b) * sizeof(float));
        vmin = hdr[0] < vmin ? hdr[0] : vmin;
        d->bytes += (uint64_t)(e - b) * sizeof(float);
    }
    if (version)
        *version = vmin;
    return st;
}

dl_status dl_ps_pull(dl_dist *d, float *params, int64_t nparams, int64_t *version,
                     dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, nparams, &c, err);
    return st == DL_OK ? pull(d, c->step, params, nparams, version, err) : st;
}

dl_status dl_ps_push(dl_dist *d, const float *grads, int64_t nparams, int64_t version,
                     dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, nparams, &c, err);
    if (st == DL_OK)   /* the previous push's buffers must be free */
        st = comm_wait_all(d, c->S, c->outreq, "push", err);
    for (int i = 0; st == DL_OK && i < c->S; i++) {
        int64_t b, e, hdr[2] = { version, c->step };
        dl_ps_shard(nparams, c->S, i, &b, &e);
        memcpy(c->out[i], hdr, HDR);
        memcpy(c->out[i] + HDR, grads + b, (size_t)(e - b) * sizeof(float));
        MPI_Isend(c->out[i], (int)(HDR + (size_t)(e - b) * sizeof(float)), MPI_BYTE,
                  d->ntrainers + i, TAG_GRAD, d->ps, &c->outreq[i]);
        d->bytes += (uint64_t)(e - b) * sizeof(float);
    }
    c->step++;
    return st;
}

dl_status dl_ps_done(dl_dist *d, dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, 0, &c, err);
    if (st == DL_OK)
        st = comm_wait_all(d, c->S, c->outreq, "push", err);
    for (int i = 0; st == DL_OK && i < c->S; i++) {
        MPI_Request req;
        MPI_Isend(&c->step, 1, MPI_INT64_T, d->ntrainers + i, TAG_DONE, d->ps, &req);
        st = comm_wait(d, &req, "done", err);
    }
    return st;
}

dl_status dl_ps_finish(dl_dist *d, float *params, int64_t nparams, dl_ps_stats *total,
                       dl_err *err)
{
    memset(total, 0, sizeof(*total));
    dl_status st = pull(d, FINAL_PULL, params, nparams, NULL, err);
    for (int i = 0; st == DL_OK && i < d->conf.servers; i++) {
        dl_ps_stats s;
        MPI_Request req;
        MPI_Irecv(&s, sizeof(s), MPI_BYTE, d->ntrainers + i, TAG_STATS, d->ps, &req);
        st = comm_wait(d, &req, "server statistics", err);
        total->updates += s.updates;
        total->discarded += s.discarded;
        total->staleness_sum += s.staleness_sum;
        if (s.max_staleness > total->max_staleness)
            total->max_staleness = s.max_staleness;
    }
    return st;
}
