/* comm_mpi.c: joining the job under MPI, trainer collectives (sum,
 * broadcast) that wait with a stall timeout, and the stall diagnosis that
 * asks every rank what it is doing and names the missing ones. */
#define _POSIX_C_SOURCE 200809L
#include "train/dist/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What a rank answers to a stall query. */
typedef struct status_reply {
    int64_t seq;
    int32_t waiting;
    char    what[52];
} status_reply;

bool dl_dist_available(void) { return true; }

static int env_int(const char *const *names, int fallback)
{
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v)
            return atoi(v);
    }
    return fallback;
}

static bool under_launcher(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                       "MV2_COMM_WORLD_SIZE", "PMI_RANK", NULL};
    for (const char *const *v = vars; *v; v++)
        if (getenv(*v))
            return true;
    return false;
}

dl_status dl_dist_new(const dl_dist_conf *conf, int *argc, char ***argv,
                      dl_dist **out, dl_err *err)
{
    *out = NULL;
    dl_dist *d = calloc(1, sizeof(*d));
    if (!d)
        return dl_err_set(err, DL_ERR_NOMEM, "dist");
    d->conf = *conf;
    d->size = 1;
    d->trainers = d->ctl = d->ps = d->bcasts = MPI_COMM_NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && under_launcher()) {
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            free(d);
            return dl_err_set(err, DL_ERR_UNAVAILABLE, "MPI_Init failed");
        }
        d->own_mpi = true;
        inited = 1;
    }
    if (inited) {
        MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    }
    static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                        "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", NULL};
    d->local_rank = env_int(local, 0);
    bool ps = conf->mode == DL_DIST_PS_SYNC || conf->mode == DL_DIST_PS_ASYNC;
    int servers = ps ? conf->servers : 0;
    d->conf.servers = servers;
    if (ps && (servers < 1 || servers >= d->size)) {
        dl_status st = dl_err_set(err, DL_ERR_INVALID,
                                  "--dist %s needs --ps-servers S with 1 <= S < ranks (%d ranks)",
                                  dl_dist_mode_name(conf->mode), d->size);
        dl_dist_free(d);
        return st;
    }
    d->ntrainers = d->size - servers;
    d->is_server = d->rank >= d->ntrainers;
    d->trainer = d->is_server ? -1 : d->rank;
    if (inited) {
        MPI_Comm_split(MPI_COMM_WORLD, d->is_server ? MPI_UNDEFINED : 0, d->rank,
                       &d->trainers);
        MPI_Comm_dup(MPI_COMM_WORLD, &d->ctl);
        MPI_Comm_dup(MPI_COMM_WORLD, &d->ps);
        if (d->trainers != MPI_COMM_NULL)
            MPI_Comm_dup(d->trainers, &d->bcasts);
    }
    dl_log_rank = d->rank;
    *out = d;
    return DL_OK;
}

void dl_dist_free(dl_dist *d)
{
    if (!d)
        return;
    if (d->trainers != MPI_COMM_NULL)
        MPI_Comm_free(&d->trainers);
    if (d->ctl != MPI_COMM_NULL)
        MPI_Comm_free(&d->ctl);
    if (d->ps != MPI_COMM_NULL)
        MPI_Comm_free(&d->ps);
    if (d->bcasts != MPI_COMM_NULL)
        MPI_Comm_free(&d->bcasts);
    if (d->own_mpi)
        MPI_Finalize();
    free(d->scratch);
    ps_client_free(d->client);
    free(d);
}

void dl_dist_abort(dl_dist *d, int code)
{
    if (d && d->size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
}

const dl_dist_conf *dl_dist_conf_of(const dl_dist *d) { return &d->conf; }
int  dl_dist_rank(const dl_dist *d) { return d->rank; }
int  dl_dist_size(const dl_dist *d) { return d->size; }
int  dl_dist_local_rank(const dl_dist *d) { return d->local_rank; }
bool dl_dist_is_server(const dl_dist *d) { return d->is_server; }
int  dl_dist_trainer(const dl_dist *d) { return d->trainer; }
int  dl_dist_trainers(const dl_dist *d) { return d->ntrainers; }
uint64_t dl_dist_bytes(const dl_dist *d) { return d->bytes; }
double dl_dist_comm_seconds(const dl_dist *d) { return d->comm_seconds; }

void dl_dist_overlap(const dl_dist *d, double *inflight, double *exposed)
{
    *inflight = d->overlap_inflight;
    *exposed = d->overlap_exposed;
}

/* ---- waiting with a stall timeout ------------------------------------- */

void comm_pause(int spins)
{
    if (spins < 64)
        return;
    struct timespec ts = { 0, spins < 1024 ? 20000 : 200000 };
    nanosleep(&ts, NULL);
}

void comm_serve_queries(dl_dist *d)
{
    int flag = 1;
    while (d->ctl != MPI_COMM_NULL && flag) {
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_QUERY, d->ctl, &flag, &st);
        if (!flag)
            break;
        int64_t q;
        MPI_Recv(&q, 1, MPI_INT64_T, st.MPI_SOURCE, TAG_QUERY, d->ctl, MPI_STATUS_IGNORE);
        status_reply r = { .seq = d->seq, .waiting = d->what != NULL };
        snprintf(r.what, sizeof(r.what), "%s", d->what ? d->what : "computing");
        /* Small enough to go out eagerly: never blocks on a stalled peer. */
        MPI_Send(&r, sizeof(r), MPI_BYTE, st.MPI_SOURCE, TAG_REPLY, d->ctl);
    }
}

_Noreturn void comm_stalled(dl_dist *d, const char *what, double waited)
{
    int64_t q = d->seq;
    MPI_Request *reqs = calloc((size_t)d->size, sizeof(*reqs));
    status_reply *replies = calloc((size_t)d->size, sizeof(*replies));
    int *answered = calloc((size_t)d->size, sizeof(*answered));
    for (int r = 0; r < d->size && reqs; r++)
        reqs[r] = MPI_REQUEST_NULL;
    for (int r = 0; r < d->size && reqs && replies; r++) {
        if (r == d->rank)
            continue;
        MPI_Request sreq;
        MPI_Isend(&q, 1, MPI_INT64_T, r, TAG_QUERY, d->ctl, &sreq);
        MPI_Request_free(&sreq);
        MPI_Irecv(&replies[r], sizeof(replies[r]), MPI_BYTE, r, TAG_REPLY, d->ctl, &reqs[r]);
    }
    double t0 = MPI_Wtime(), grace = d->conf.stall_timeout < 2.0 ? d->conf.stall_timeout : 2.0;
    for (int spins = 0; reqs && answered && MPI_Wtime() - t0 < grace; spins++) {
        for (int r = 0; r < d->size; r++)
            if (r != d->rank && !answered[r] && reqs[r] != MPI_REQUEST_NULL)
                MPI_Test(&reqs[r], &answered[r], MPI_STATUS_IGNORE);
        comm_serve_queries(d);
        comm_pause(spins);
    }
    char missing[512] = "", waiting[512] = "";
    size_t ml = 0, wl = 0;
    for (int r = 0; r < d->size && answered; r++) {
        if (r == d->rank)
            continue;
        if (!answered[r] && ml < sizeof(missing))
            ml += (size_t)snprintf(missing + ml, sizeof(missing) - ml, "%s%d", ml ? ", " : "", r);
        else if (answered[r] && wl < sizeof(waiting))
            wl += (size_t)snprintf(waiting + wl, sizeof(waiting) - wl, "%s%d (%s #%lld)",
                                   wl ? ", " : "", r, replies[r].what,
                                   (long long)replies[r].seq);
    }
    DL_LOG(DL_LOG_ERR, "dist",
           "stalled: waited %.1f s (--stall-timeout) in %s #%lld; missing rank%s: %s; "
           "answering: %s", waited, what, (long long)d->seq, strchr(missing, ',') ? "s" : "",
           missing[0] ? missing : "none (a rank is in a different operation)",
           waiting[0] ? waiting : "none");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3);   /* not reached */
}

dl_status comm_wait_until(dl_dist *d, comm_poll_fn poll, void *ctx, const char *what,
                          dl_err *err)
{
    double t0 = MPI_Wtime();
    d->what = what;
    d->seq++;
    for (int spins = 0;; spins++) {
        bool done = false;
        dl_status st = poll(d, ctx, &done, err);
        if (st != DL_OK) {
            d->what = NULL;
            return st;
        }
        if (done)
            break;
        comm_serve_queries(d);
        double waited = MPI_Wtime() - t0;
        if (waited > d->conf.stall_timeout)
            comm_stalled(d, what, waited);
        comm_pause(spins);
    }
    d->what = NULL;
    d->comm_seconds += MPI_Wtime() - t0;
    return DL_OK;
}

typedef struct request_set {
    int          n;
    MPI_Request *reqs;
} request_set;

static dl_status test_all(dl_dist *d, void *ctx, bool *done, dl_err *err)
{
    request_set *rs = ctx;
    int flag = 0;
    if (MPI_Testall(rs->n, rs->reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return dl_err_set(err, DL_ERR_BACKEND, "MPI %s failed", d->what);
    *done = flag != 0;
    return DL_OK;
}

dl_status comm_wait_all(dl_dist *d, int n, MPI_Request *reqs, const char *what,
                        dl_err *err)
{
    request_set rs = { n, reqs };
    return comm_wait_until(d, test_all, &rs, what, err);
}

dl_status comm_wait(dl_dist *d, MPI_Request *req, const char *what, dl_err *err)
{
    return comm_wait_all(d, 1, req, what, err);
}

/* ---- trainer collectives ------------------------------------------------ */

static dl_status sum_ordered(dl_dist *d, float *buf, int64_t n, const char *what,
                             dl_err *err)
{
    int nt = d->ntrainers;
    if (d->trainer == 0 && d->scratch_n < n * nt) {
        free(d->scratch);
        d->scratch = malloc((size_t)(n * nt) * sizeof(float));
        d->scratch_n = d->scratch ? n * nt : 0;
        if (!d->scratch)
            return dl_err_set(err, DL_ERR_NOMEM, "reduction buffer");
    }
    MPI_Request req;
    MPI_CHECK(MPI_Igather(buf, (int)n, MPI_FLOAT, d->scratch, (int)n, MPI_FLOAT, 0,
                          d->trainers, &req), err, what);
    dl_status st = comm_wait(d, &req, what, err);
    if (st != DL_OK)
        return st;
    if (d->trainer == 0)
        comm_sum_rank_order(d->scratch, nt, n, buf);
    MPI_CHECK(MPI_Ibcast(buf, (int)n, MPI_FLOAT, 0, d->trainers, &req), err, what);
    d->bytes += comm_sum_bytes(d, n);
    return comm_wait(d, &req, what, err);
}

void comm_sum_rank_order(const float *gathered, int nt, int64_t n, float *out)
{
    /* rank order, whatever the arrival order */
    for (int64_t i = 0; i < n; i++) {
        float s = gathered[i];
        for (int r = 1; r < nt; r++)
            s += gathered[(int64_t)r * n + i];
        out[i] = s;
    }
}

uint64_t comm_sum_bytes(const dl_dist *d, int64_t n)
{
    if (d->conf.deterministic)
        return (uint64_t)n * sizeof(float) * 2;
    /* A ring allreduce moves 2 (N-1)/N of the buffer per rank. */
    return (uint64_t)(2.0 * (d->ntrainers - 1) / d->ntrainers * (double)n * sizeof(float));
}

dl_status dl_dist_sum(dl_dist *d, float *buf, int64_t n, const char *what,
                      dl_err *err)
{
    if (d->ntrainers <= 1 || d->is_server || n == 0)
        return DL_OK;
    if (n > INT32_MAX)
        return dl_err_set(err, DL_ERR_INVALID, "%s: %lld values in one reduction",
                          what, (long long)n);
    if (d->conf.deterministic)
        return sum_ordered(d, buf, n, what, err);
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, d->trainers,
                             &req), err, what);
    d->bytes += comm_sum_bytes(d, n);
    return comm_wait(d, &req, what, err);
}

dl_status dl_dist_sum_f64(dl_dist *d, double *buf, int n, const char *what,
                          dl_err *err)
{
    if (d->ntrainers <= 1 || d->is_server)
        return DL_OK;
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, d->trainers, &req),
              err, what);
    return comm_wait(d, &req, what, err);
}

dl_status dl_dist_bcast(dl_dist *d, float *buf, int64_t n, const char *what,
                        dl_err *err)
{
    if (d->ntrainers <= 1 || d->is_server || n == 0)
        return DL_OK;
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(buf, (int)n, MPI_FLOAT, 0, d->trainers, &req), err, what);
    d->bytes += (uint64_t)n * sizeof(float);
    return comm_wait(d, &req, what, err);
}

dl_status dl_dist_minmax(dl_dist *d, double v, double *min, double *max, dl_err *err)
{
    *min = *max = v;
    if (d->ntrainers <= 1 || d->is_server)
        return DL_OK;
    double in[2] = { -v, v }, out[2];
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(in, out, 2, MPI_DOUBLE, MPI_MAX, d->trainers, &req), err,
              "step-time spread");
    dl_status st = comm_wait(d, &req, "step-time spread", err);
    *min = -out[0];
    *max = out[1];
    return st;
}
