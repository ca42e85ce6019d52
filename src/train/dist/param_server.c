/* param_server.c: the sharded parameter server (PaddlePaddle's design).
 * Each server owns a contiguous shard of the dense parameters, the rows
 * r % S == s of an embedding table, and the optimizer state for both.
 * Trainers pull the dense shard and only the table rows their batch
 * touches, and push gradients the same way. Synchronous: one update per
 * step once every trainer's gradient is in, summed in trainer order.
 * Asynchronous: each gradient is applied as it arrives unless older than
 * --max-staleness, and a trainer may not run more than that many steps
 * ahead of the slowest. */
#define _POSIX_C_SOURCE 200809L
#include "train/dist/comm.h"

#include <stdlib.h>
#include <string.h>

enum { TAG_PULL = 7101, TAG_PARAMS, TAG_GRAD, TAG_DONE, TAG_STATS };

#define FINAL_PULL (-1)
#define ALL_ROWS   (-1)

/* What server s holds: its own table rows and its dense shard. */
typedef struct part {
    int64_t rows;        /* own table rows: r = s, s + S, ... */
    int64_t dbeg, dn;    /* dense shard [dbeg, dbeg + dn) of the flat buffer */
} part;

static part part_of(const dl_ps_layout *lay, int S, int s)
{
    part p = { 0, 0, 0 };
    p.rows = lay->rows > s ? (lay->rows - s + S - 1) / S : 0;
    int64_t table = lay->rows * lay->dim, b, e;
    dl_ps_shard(lay->nparams - table, S, s, &b, &e);
    p.dbeg = table + b;
    p.dn = e - b;
    return p;
}

/* A growable message buffer. */
typedef struct msg {
    char  *p;
    size_t len, cap;
} msg;

static bool msg_reserve(msg *m, size_t n)
{
    if (n <= m->cap)
        return true;
    size_t cap = m->cap ? m->cap : 256;
    while (cap < n)
        cap *= 2;
    char *p = realloc(m->p, cap);
    if (!p)
        return false;
    m->p = p;
    m->cap = cap;
    return true;
}

static void msg_put(msg *m, const void *data, size_t n)
{
    memcpy(m->p + m->len, data, n);
    m->len += n;
}

/* ---- server ------------------------------------------------------------ */

typedef struct server {
    dl_dist     *d;
    dl_backend  *be;
    const dl_hparams *hp;
    const dl_ps_layout *lay;
    bool         sync;
    int          T, S, me;
    part         pt;
    int64_t      nlocal;            /* own rows * dim + dense shard */
    float       *p, *g;             /* backend memory */
    float       *hval, *hgrad;      /* host: current values, gradient sum */
    dl_optim    *opt;
    int64_t      version;           /* updates applied */
    int64_t     *steps;             /* gradients received per trainer */
    int64_t     *pull_at;           /* pending pull's step, or INT64_MIN */
    msg         *pull;              /* pending pull requests */
    bool        *done, final_pending;
    int          ndone;
    msg         *slot;              /* sync: each trainer's gradient message */
    bool        *have;
    msg         *out;               /* per trainer */
    MPI_Request *outreq;
    msg          in;
    dl_lr_fn     lr_at;
    void        *lr_ctx;
    dl_ps_stats *stats;
} server;

static void server_free(server *s)
{
    for (int t = 0; t < s->T; t++) {
        if (s->pull)
            free(s->pull[t].p);
        if (s->slot)
            free(s->slot[t].p);
        if (s->out)
            free(s->out[t].p);
    }
    free(s->pull);
    free(s->slot);
    free(s->out);
    free(s->outreq);
    free(s->steps);
    free(s->pull_at);
    free(s->done);
    free(s->have);
    free(s->in.p);
    free(s->hval);
    free(s->hgrad);
    dl_optim_free(s->opt);
    if (s->p)
        s->be->ops->release(s->be, s->p);
    if (s->g)
        s->be->ops->release(s->be, s->g);
}

static dl_status server_init(server *s, const float *params, dl_err *err)
{
    dl_dist *d = s->d;
    const dl_ps_layout *lay = s->lay;
    s->T = d->ntrainers;
    s->S = d->conf.servers;
    s->me = d->rank - d->ntrainers;
    s->sync = d->conf.mode == DL_DIST_PS_SYNC;
    s->pt = part_of(lay, s->S, s->me);
    s->nlocal = s->pt.rows * lay->dim + s->pt.dn;
    size_t bytes = (size_t)(s->nlocal + 1) * sizeof(float);
    s->steps = calloc((size_t)s->T, sizeof(*s->steps));
    s->pull_at = malloc((size_t)s->T * sizeof(*s->pull_at));
    s->pull = calloc((size_t)s->T, sizeof(*s->pull));
    s->done = calloc((size_t)s->T, sizeof(*s->done));
    s->have = calloc((size_t)s->T, sizeof(*s->have));
    s->slot = calloc((size_t)s->T, sizeof(*s->slot));
    s->out = calloc((size_t)s->T, sizeof(*s->out));
    s->outreq = malloc((size_t)s->T * sizeof(*s->outreq));
    s->hval = malloc(bytes);
    s->hgrad = calloc(1, bytes);
    if (!s->steps || !s->pull_at || !s->pull || !s->done || !s->have || !s->slot ||
        !s->out || !s->outreq || !s->hval || !s->hgrad)
        return dl_err_set(err, DL_ERR_NOMEM, "parameter server buffers");
    for (int t = 0; t < s->T; t++) {
        s->pull_at[t] = INT64_MIN;
        s->outreq[t] = MPI_REQUEST_NULL;
    }
    /* Local layout: own rows (local row j is table row me + j * S), then
     * the dense shard. */
    for (int64_t j = 0; j < s->pt.rows; j++)
        memcpy(s->hval + j * lay->dim, params + (s->me + j * s->S) * lay->dim,
               (size_t)lay->dim * sizeof(float));
    memcpy(s->hval + s->pt.rows * lay->dim, params + s->pt.dbeg,
           (size_t)s->pt.dn * sizeof(float));
    dl_status st = s->be->ops->alloc(s->be, bytes, (void **)&s->p, err);
    if (st == DL_OK)
        st = s->be->ops->alloc(s->be, bytes, (void **)&s->g, err);
    if (st == DL_OK)
        st = dl_optim_new(s->be, s->hp, s->nlocal, &s->opt, err);
    if (st == DL_OK)
        s->be->ops->upload(s->be, s->p, s->hval, (size_t)s->nlocal * sizeof(float));
    return st;
}

/* Local row of table row r, or -1 if r is not this server's. */
static int64_t local_row(const server *s, int64_t r)
{
    if (r < 0 || r >= s->lay->rows || r % s->S != s->me)
        return -1;
    return r / s->S;
}

/* Answers trainer t's pending pull: [version, nrows] dense rows. */
static dl_status reply_params(server *s, int t, dl_err *err)
{
    dl_status st = comm_wait(s->d, &s->outreq[t], "sending parameters", err);
    if (st != DL_OK)
        return st;
    const int64_t *req = (const int64_t *)s->pull[t].p;
    int64_t nids = req[1], dim = s->lay->dim;
    const int64_t *ids = req + 2;
    int64_t nrows = nids == ALL_ROWS ? s->pt.rows : nids;
    msg *m = &s->out[t];
    m->len = 0;
    if (!msg_reserve(m, 16 + (size_t)(s->pt.dn + nrows * dim) * sizeof(float)))
        return dl_err_set(err, DL_ERR_NOMEM, "parameter reply");
    int64_t hdr[2] = { s->version, nrows };
    msg_put(m, hdr, sizeof(hdr));
    msg_put(m, s->hval + s->pt.rows * dim, (size_t)s->pt.dn * sizeof(float));
    for (int64_t i = 0; i < nrows; i++) {
        int64_t j = nids == ALL_ROWS ? i : local_row(s, ids[i]);
        if (j < 0)
            return dl_err_set(err, DL_ERR_INVALID, "trainer %d asked for row %lld, "
                              "not held by server %d", t, (long long)ids[i], s->me);
        msg_put(m, s->hval + j * dim, (size_t)dim * sizeof(float));
    }
    s->d->bytes += m->len - 16;
    MPI_Isend(m->p, (int)m->len, MPI_BYTE, t, TAG_PARAMS, s->d->ps, &s->outreq[t]);
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

/* May a trainer asking at step `at` have the parameters now? */
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

/* A gradient message: [version, step, nids] ids dense rows. Adds it into
 * hgrad (sign +1) or clears what it touched (sign 0). */
static dl_status fold(server *s, const msg *m, int sign, dl_err *err)
{
    const int64_t *hdr = (const int64_t *)m->p;
    int64_t nids = hdr[2], dim = s->lay->dim;
    size_t need = 24 + (size_t)nids * 8 + (size_t)(s->pt.dn + nids * dim) * sizeof(float);
    if (nids < 0 || m->len != need)
        return dl_err_set(err, DL_ERR_INVALID, "malformed gradient message of %zu bytes", m->len);
    const int64_t *ids = hdr + 3;
    const float *dense = (const float *)(ids + nids), *rows = dense + s->pt.dn;
    float *gd = s->hgrad + s->pt.rows * dim;
    if (sign)
        for (int64_t i = 0; i < s->pt.dn; i++)
            gd[i] += dense[i];
    else
        memset(gd, 0, (size_t)s->pt.dn * sizeof(float));
    for (int64_t k = 0; k < nids; k++) {
        int64_t j = local_row(s, ids[k]);
        if (j < 0)
            return dl_err_set(err, DL_ERR_INVALID, "gradient for row %lld, not held by "
                              "server %d", (long long)ids[k], s->me);
        float *g = s->hgrad + j * dim;
        if (sign)
            for (int64_t i = 0; i < dim; i++)
                g[i] += rows[k * dim + i];
        else
            memset(g, 0, (size_t)dim * sizeof(float));
    }
    return DL_OK;
}

/* One optimizer update of everything this server holds. */
static void update(server *s)
{
    size_t bytes = (size_t)s->nlocal * sizeof(float);
    s->be->ops->upload(s->be, s->g, s->hgrad, bytes);
    dl_optim_step(s->opt, s->p, s->g, s->lr_at(s->lr_ctx, s->version));
    s->be->ops->download(s->be, s->hval, s->p, bytes);
    s->version++;
    s->stats->updates++;
}

/* Synchronous: once every running trainer's gradient for this step is in,
 * sum them in trainer order and update. */
static dl_status sync_update(server *s, dl_err *err)
{
    bool any = false;
    for (int t = 0; t < s->T; t++) {
        if (!s->done[t] && !s->have[t])
            return DL_OK;
        any = any || s->have[t];
    }
    if (!any)   /* the last trainers finishing: no step to take */
        return DL_OK;
    dl_status st = DL_OK;
    for (int t = 0; t < s->T && st == DL_OK; t++)
        if (s->have[t])
            st = fold(s, &s->slot[t], 1, err);
    if (st == DL_OK)
        update(s);
    for (int t = 0; t < s->T && st == DL_OK; t++)
        if (s->have[t]) {
            st = fold(s, &s->slot[t], 0, err);
            s->have[t] = false;
        }
    return st;
}

static dl_status on_grad(server *s, int t, dl_err *err)
{
    const int64_t *hdr = (const int64_t *)s->in.p;
    s->steps[t]++;
    s->d->bytes += s->in.len - 24;
    if (s->sync) {
        msg *slot = &s->slot[t];
        if (!msg_reserve(slot, s->in.len))
            return dl_err_set(err, DL_ERR_NOMEM, "gradient slot");
        slot->len = 0;
        msg_put(slot, s->in.p, s->in.len);
        s->have[t] = true;
        return sync_update(s, err);
    }
    int64_t staleness = s->version - hdr[0];
    if (staleness > s->d->conf.max_staleness) {
        s->stats->discarded++;
        return DL_OK;
    }
    s->stats->staleness_sum += (double)staleness;
    if (staleness > s->stats->max_staleness)
        s->stats->max_staleness = staleness;
    /* Asynchronous: each trainer's mean gradient is one step. */
    dl_status st = fold(s, &s->in, 1, err);
    if (st == DL_OK)
        update(s);
    return st == DL_OK ? fold(s, &s->in, 0, err) : st;
}

static dl_status handle(server *s, const MPI_Status *ms, dl_err *err)
{
    int t = ms->MPI_SOURCE, count;
    MPI_Get_count(ms, MPI_BYTE, &count);
    if (t >= s->T || count < 8)
        return dl_err_set(err, DL_ERR_INVALID, "unexpected message of %d bytes from rank %d",
                          count, t);
    if (!msg_reserve(&s->in, (size_t)count))
        return dl_err_set(err, DL_ERR_NOMEM, "receive buffer");
    MPI_Recv(s->in.p, count, MPI_BYTE, t, ms->MPI_TAG, s->d->ps, MPI_STATUS_IGNORE);
    s->in.len = (size_t)count;
    const int64_t *v = (const int64_t *)s->in.p;
    dl_status st = DL_OK;
    switch (ms->MPI_TAG) {
    case TAG_PULL:
        if (count < 16 || (v[1] != ALL_ROWS && (v[1] < 0 || count != 16 + 8 * v[1])) ||
            !msg_reserve(&s->pull[t], (size_t)count))
            return dl_err_set(err, DL_ERR_INVALID, "bad pull request from rank %d", t);
        s->pull[t].len = 0;
        msg_put(&s->pull[t], s->in.p, s->in.len);
        if (v[0] == FINAL_PULL)
            s->final_pending = true;
        else
            s->pull_at[t] = v[0];
        break;
    case TAG_GRAD:
        st = count >= 24 ? on_grad(s, t, err)
                         : dl_err_set(err, DL_ERR_INVALID, "short gradient from rank %d", t);
        break;
    case TAG_DONE:
        s->done[t] = true;
        s->ndone++;
        if (s->sync)
            st = sync_update(s, err);
        break;
    default:
        return dl_err_set(err, DL_ERR_INVALID, "unexpected tag %d from rank %d",
                          ms->MPI_TAG, t);
    }
    return st == DL_OK ? answer_pulls(s, err) : st;
}

dl_status dl_ps_serve(dl_dist *d, dl_backend *be, const dl_hparams *hp,
                      const float *params, const dl_ps_layout *lay, dl_lr_fn lr_at,
                      void *lr_ctx, dl_ps_stats *stats, dl_err *err)
{
    memset(stats, 0, sizeof(*stats));
    server s = { .d = d, .be = be, .hp = hp, .lay = lay, .lr_at = lr_at,
                 .lr_ctx = lr_ctx, .stats = stats };
    dl_status st = server_init(&s, params, err);
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
        st = comm_wait(d, &s.outreq[0], "sending final parameters", err);
    if (st == DL_OK) {
        MPI_Request req;
        MPI_Isend(stats, sizeof(*stats), MPI_BYTE, 0, TAG_STATS, d->ps, &req);
        st = comm_wait(d, &req, "sending statistics", err);
    }
    for (int t = 0; st == DL_OK && t < s.T; t++)
        st = comm_wait(d, &s.outreq[t], "sending parameters", err);
    server_free(&s);
    return st;
}

/* ---- trainer side ------------------------------------------------------ */

struct ps_client {
    int          S;
    msg         *in, *out, *req;   /* per server */
    MPI_Request *outreq;
    int64_t     *count;            /* per server: ids of this call */
    int64_t      step;
};

void ps_client_free(struct ps_client *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->S; i++) {
        free(c->in[i].p);
        free(c->out[i].p);
        free(c->req[i].p);
    }
    free(c->in);
    free(c->out);
    free(c->req);
    free(c->outreq);
    free(c->count);
    free(c);
}

static dl_status client(dl_dist *d, struct ps_client **out, dl_err *err)
{
    if ((*out = d->client))
        return DL_OK;
    struct ps_client *c = calloc(1, sizeof(*c));
    int S = d->conf.servers;
    if (!c || !(c->in = calloc((size_t)S, sizeof(msg))) ||
        !(c->out = calloc((size_t)S, sizeof(msg))) ||
        !(c->req = calloc((size_t)S, sizeof(msg))) ||
        !(c->count = calloc((size_t)S, sizeof(int64_t))) ||
        !(c->outreq = malloc((size_t)S * sizeof(MPI_Request)))) {
        if (c)
            c->S = 0;
        ps_client_free(c);
        return dl_err_set(err, DL_ERR_NOMEM, "parameter client");
    }
    c->S = S;
    for (int i = 0; i < S; i++)
        c->outreq[i] = MPI_REQUEST_NULL;
    d->client = c;
    *out = c;
    return DL_OK;
}

/* Rows of server i among ids (sorted): they keep their order. */
static void count_rows(struct ps_client *c, const int64_t *ids, int64_t nids)
{
    memset(c->count, 0, (size_t)c->S * sizeof(int64_t));
    for (int64_t k = 0; k < nids; k++)
        c->count[ids[k] % c->S]++;
}

static dl_status pull(dl_dist *d, int64_t at, float *params, const dl_ps_layout *lay,
                      const int64_t *ids, int64_t nids, int64_t *version, dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, &c, err);
    if (st != DL_OK)
        return st;
    count_rows(c, ids, ids ? nids : 0);
    MPI_Request *reqs = malloc((size_t)c->S * 2 * sizeof(*reqs));
    if (!reqs)
        return dl_err_set(err, DL_ERR_NOMEM, "pull requests");
    for (int i = 0; i < c->S && st == DL_OK; i++) {
        part pt = part_of(lay, c->S, i);
        int64_t n = ids ? c->count[i] : ALL_ROWS, rows = ids ? n : pt.rows;
        msg *q = &c->req[i], *in = &c->in[i];
        if (!msg_reserve(q, 16 + (size_t)(rows > 0 ? rows : 0) * 8) ||
            !msg_reserve(in, 16 + (size_t)(pt.dn + rows * lay->dim) * sizeof(float))) {
            st = dl_err_set(err, DL_ERR_NOMEM, "pull buffers");
            break;
        }
        int64_t hdr[2] = { at, n };
        q->len = 0;
        msg_put(q, hdr, sizeof(hdr));
        for (int64_t k = 0; ids && k < nids; k++)
            if (ids[k] % c->S == i)
                msg_put(q, &ids[k], sizeof(int64_t));
        in->len = 16 + (size_t)(pt.dn + rows * lay->dim) * sizeof(float);
        MPI_Irecv(in->p, (int)in->len, MPI_BYTE, d->ntrainers + i, TAG_PARAMS, d->ps, &reqs[i]);
        MPI_Isend(q->p, (int)q->len, MPI_BYTE, d->ntrainers + i, TAG_PULL, d->ps,
                  &reqs[c->S + i]);
    }
    if (st == DL_OK)
        st = comm_wait_all(d, 2 * c->S, reqs, at == FINAL_PULL ? "final pull" : "pull", err);
    free(reqs);
    int64_t vmin = INT64_MAX;
    for (int i = 0; st == DL_OK && i < c->S; i++) {
        part pt = part_of(lay, c->S, i);
        const int64_t *hdr = (const int64_t *)c->in[i].p;
        const float *dense = (const float *)(hdr + 2), *rows = dense + pt.dn;
        memcpy(params + pt.dbeg, dense, (size_t)pt.dn * sizeof(float));
        int64_t k = 0;
        for (int64_t j = 0; j < hdr[1]; j++) {
            int64_t r = i + j * c->S;       /* every row, in the server's order */
            if (ids) {                      /* or the requested ones, in order */
                while (ids[k] % c->S != i)
                    k++;
                r = ids[k++];
            }
            memcpy(params + r * lay->dim, rows + j * lay->dim, (size_t)lay->dim * sizeof(float));
        }
        vmin = hdr[0] < vmin ? hdr[0] : vmin;
        d->bytes += c->in[i].len - 16;
    }
    if (version)
        *version = vmin;
    return st;
}

dl_status dl_ps_pull(dl_dist *d, float *params, const dl_ps_layout *lay,
                     const int64_t *ids, int64_t nids, int64_t *version, dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, &c, err);
    return st == DL_OK ? pull(d, c->step, params, lay, ids, nids, version, err) : st;
}

dl_status dl_ps_push(dl_dist *d, const float *grads, const dl_ps_layout *lay,
                     const int64_t *ids, int64_t nids, int64_t version, dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, &c, err);
    if (st == DL_OK)   /* the previous push's buffers must be free */
        st = comm_wait_all(d, c->S, c->outreq, "push", err);
    if (st != DL_OK)
        return st;
    count_rows(c, ids, nids);
    for (int i = 0; i < c->S; i++) {
        part pt = part_of(lay, c->S, i);
        msg *m = &c->out[i];
        int64_t n = c->count[i];
        if (!msg_reserve(m, 24 + (size_t)n * 8 + (size_t)(pt.dn + n * lay->dim) * sizeof(float)))
            return dl_err_set(err, DL_ERR_NOMEM, "push buffer");
        int64_t hdr[3] = { version, c->step, n };
        m->len = 0;
        msg_put(m, hdr, sizeof(hdr));
        for (int64_t k = 0; k < nids; k++)
            if (ids[k] % c->S == i)
                msg_put(m, &ids[k], sizeof(int64_t));
        msg_put(m, grads + pt.dbeg, (size_t)pt.dn * sizeof(float));
        for (int64_t k = 0; k < nids; k++)
            if (ids[k] % c->S == i)
                msg_put(m, grads + ids[k] * lay->dim, (size_t)lay->dim * sizeof(float));
        MPI_Isend(m->p, (int)m->len, MPI_BYTE, d->ntrainers + i, TAG_GRAD, d->ps, &c->outreq[i]);
        d->bytes += m->len - 24;
    }
    c->step++;
    return DL_OK;
}

dl_status dl_ps_done(dl_dist *d, dl_err *err)
{
    struct ps_client *c;
    dl_status st = client(d, &c, err);
    if (st == DL_OK)
        st = comm_wait_all(d, c->S, c->outreq, "push", err);
    for (int i = 0; st == DL_OK && i < c->S; i++) {
        MPI_Request req;
        MPI_Isend(&c->step, 1, MPI_INT64_T, d->ntrainers + i, TAG_DONE, d->ps, &req);
        st = comm_wait(d, &req, "done", err);
    }
    return st;
}

dl_status dl_ps_finish(dl_dist *d, float *params, const dl_ps_layout *lay,
                       dl_ps_stats *total, dl_err *err)
{
    memset(total, 0, sizeof(*total));
    dl_status st = pull(d, FINAL_PULL, params, lay, NULL, 0, NULL, err);
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
