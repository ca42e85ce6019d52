/* test_batcher.c: the batcher's choices on a transport's thread (direct
 * runs of lone requests in streaks, how long a held batch waits for an
 * instance) and infer_req_init, the transports' one way to fill a request.
 * A real repository in a temporary folder, one CPU instance. */
#define _GNU_SOURCE              /* RUSAGE_THREAD */
#include <criterion/criterion.h>
#include "serve_fixture.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static char dir[64];
static dl_backend *be;
static registry *reg;

/* "tiny" serves version 1. */
static void setup(void)
{
    fx_tmpdir(dir, sizeof(dir), "batcher");
    be = fx_cpu_backend();
    fx_repo_model(be, dir, "tiny", true);
    reg = fx_registry(dir, &be, 1);
}

static void teardown(void)
{
    registry_free(reg);
    dl_backend_free(be);
    fx_rmtree(dir);
}

TestSuite(batcher, .init = setup, .fini = teardown, .timeout = 30);

static void not_queued(infer_req *q, void *ctx)
{
    (void)ctx;
    cr_assert_fail("request %p completed through the queue", (void *)q);
}

/* This thread's voluntary context switches: what the batcher counts as
 * its sleeps. */
static long sleeps(void)
{
    struct rusage ru;
    cr_assert_eq(getrusage(RUSAGE_THREAD, &ru), 0);
    return ru.ru_nvcsw;
}

/* batcher_run_now: a thread runs lone requests itself in streaks of
 * BATCHER_DIRECT_STREAK. Without a sleep since the streak ended (requests
 * read back to back), it leaves them to the queue; after one (as an event
 * loop sleeps with nothing to read), a new streak starts. On a loaded
 * machine the loop itself may block (a lock, a fault) and so start a
 * streak early: a pass counts only when this thread did not sleep in it,
 * and there are passes to spare. */
Test(batcher, direct_runs_come_in_streaks)
{
    dl_err err = {0};
    stats *st = NULL;
    batcher *b = NULL;
    cr_assert_eq(stats_new(&st, &err), DL_OK, "%s", err.msg);
    dl_batching_conf conf = {.max_batch_size = 8, .max_queue_delay_us = 1000, .max_queue_size = 64,
                             .eager = true, .direct_max_us = 10000000};
    cr_assert_eq(batcher_new(&conf, 1, reg, st, &b, &err), DL_OK, "%s", err.msg);
    const float x[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    float y[3], want[3];
    infer_req q = {.n = 1, .x = x, .out = y, .on_done = not_queued};
    cr_assert_eq(registry_acquire(reg, "tiny", 0, &q.sv, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_predict(q.sv->m[0], x, 1, 1, want, &err), DL_OK, "%s", err.msg);
    int ran = 0, pass = 0;
    bool clean = false;
    for (; pass < 50 && !clean; pass++) {
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);   /* a new streak */
        long s0 = sleeps();
        ran = 0;
        for (int i = 0; i < BATCHER_DIRECT_STREAK + 8; i++) {
            memset(y, 0, sizeof(y));
            if (batcher_run_now(b, &q)) {
                ran++;
                cr_expect_eq(q.err.code, DL_OK, "%s", q.err.msg);
                cr_expect_arr_eq(y, want, sizeof(y));
            }
        }
        clean = sleeps() == s0;
    }
    cr_assert(clean, "this thread slept in each of %d passes", pass);
    cr_expect_eq(ran, BATCHER_DIRECT_STREAK, "back to back: %d direct runs", ran);
    nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    cr_expect(batcher_run_now(b, &q), "after a sleep, a new streak");
    served_release(q.sv);
    batcher_drain(b);
    batcher_free(b);
    stats_free(st);
}

/* batcher_may_wait: a held batch waits for an instance while the wait
 * costs less than the hand-off would cost its requests (BATCHER_HANDOFF_US
 * a request), never past direct_max_us. */
Test(batcher, a_held_batch_waits_what_its_hand_off_would_cost)
{
    dl_err err = {0};
    stats *st = NULL;
    batcher *b = NULL;
    cr_assert_eq(stats_new(&st, &err), DL_OK, "%s", err.msg);
    dl_batching_conf conf = {.max_batch_size = 64, .max_queue_delay_us = 1000,
                             .max_queue_size = 64, .eager = true, .direct_max_us = 100};
    cr_assert_eq(batcher_new(&conf, 1, reg, st, &b, &err), DL_OK, "%s", err.msg);
    double us = 1e-6, a_request = BATCHER_HANDOFF_US * us;
    cr_expect(batcher_may_wait(b, 0, 1), "a batch that has just found none waits");
    cr_expect(batcher_may_wait(b, 0.9 * a_request, 1), "one request: under its hand-off");
    cr_expect_not(batcher_may_wait(b, 1.1 * a_request, 1), "one request: past its hand-off");
    cr_expect(batcher_may_wait(b, 3.9 * a_request, 4), "four requests: four times as long");
    cr_expect_not(batcher_may_wait(b, 4.1 * a_request, 4), "four requests: not longer");
    cr_expect(batcher_may_wait(b, 99 * us, 64), "64 requests: up to direct_max_us");
    cr_expect_not(batcher_may_wait(b, 101 * us, 64), "64 requests: not past direct_max_us");
    batcher_drain(b);
    batcher_free(b);
    stats_free(st);
}

static void signal_done(infer_req *q, void *ctx)
{
    (void)q;
    atomic_store((atomic_int *)ctx, 1);
}

/* infer_req_init: the one way a transport fills a request. It names the
 * pinned version's model and version, keeps the caller's buffers and
 * completion, and zeroes whatever a reused request (a Kafka record's, from
 * a pool) held before; such a request then runs through the queue. */
Test(batcher, infer_req_init_fills_a_request_and_clears_the_rest)
{
    dl_err err = {0};
    stats *st = NULL;
    batcher *b = NULL;
    cr_assert_eq(stats_new(&st, &err), DL_OK, "%s", err.msg);
    dl_batching_conf conf = {.max_batch_size = 8, .max_queue_delay_us = 100, .max_queue_size = 64};
    cr_assert_eq(batcher_new(&conf, 1, reg, st, &b, &err), DL_OK, "%s", err.msg);
    served *sv = NULL;
    cr_assert_eq(registry_acquire(reg, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    const float x[8] = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 1.0f, -0.5f, 0.0f};
    float y[6], want[6];
    cr_assert_eq(dl_model_predict(sv->m[0], x, 2, 2, want, &err), DL_OK, "%s", err.msg);
    atomic_int done = 0;

    infer_req q;
    memset(&q, 0xab, sizeof(q));     /* what a pooled request held before */
    infer_req_init(&q, sv, 2, x, y, 30000000, signal_done, &done);
    cr_expect_str_eq(q.model, "tiny");
    cr_expect_eq(q.version, sv->version);
    cr_expect_eq(q.n, 2);
    cr_expect_eq(q.x, x);
    cr_expect_eq(q.out, y);
    cr_expect_eq(q.sv, sv);
    cr_expect_eq(q.timeout_us, 30000000);
    cr_expect_eq(q.on_done, signal_done);
    cr_expect_eq(q.ctx, &done);
    cr_expect_eq(q.err.code, DL_OK);
    cr_expect_eq(q.err.msg[0], '\0');
    cr_expect(q.deadline == 0 && q.t_arrival == 0 && q.t_start == 0 && q.t_infer == 0 &&
              q.t_end == 0, "times left over");
    cr_expect_null(q.next);

    cr_assert_eq(batcher_submit(b, &q, &err), DL_OK, "%s", err.msg);
    for (int i = 0; i < 5000 && !atomic_load(&done); i++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    cr_assert(atomic_load(&done), "the request did not complete in 5 s");
    cr_expect_eq(q.err.code, DL_OK, "%s", q.err.msg);
    cr_expect_arr_eq(y, want, sizeof(y));
    served_release(sv);
    batcher_drain(b);
    batcher_free(b);
    stats_free(st);
}

/* ---- priority levels ---------------------------------------------------- */

typedef struct done_order {
    atomic_int *next;   /* completions so far */
    int         at;     /* this request's place among them */
} done_order;

static void record_order(infer_req *q, void *ctx)
{
    (void)q;
    done_order *d = ctx;
    d->at = atomic_fetch_add(d->next, 1);
}

/* Writes model `name`'s model.json (fx_repo_model's) with a serving block. */
static void write_serving(const char *repo, const char *name, const char *serving)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s/model.json", repo, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"name\": \"%s\", \"input\": {\"shape\": [4]}, \"layers\": [{\"name\": \"fc\", "
               "\"type\": \"dense\", \"units\": 3}], \"loss\": \"softmax_cross_entropy\", "
               "\"serving\": %s}", name, serving);
    fclose(f);
}

/* Three low-priority requests of one sample wait for their batch (a long
 * max_queue_delay_us, max_batch_size 4); a high-priority request of two
 * then fills it. With priority levels the batch is formed highest first:
 * the high one and two low ones run, the third low one after. Without
 * levels (the control, model "tiny") the batch takes the three low ones
 * in arrival order and the high one, which no longer fits, runs last. */
static int high_place(registry *r, const char *model)
{
    dl_err err = {0};
    stats *st = NULL;
    batcher *b = NULL;
    cr_assert_eq(stats_new(&st, &err), DL_OK, "%s", err.msg);
    dl_batching_conf conf = {.max_batch_size = 4, .max_queue_delay_us = 300000,
                             .max_queue_size = 64};
    cr_assert_eq(batcher_new(&conf, 1, r, st, &b, &err), DL_OK, "%s", err.msg);
    served *sv = NULL;
    cr_assert_eq(registry_acquire(r, model, 0, &sv, &err), DL_OK, "%s", err.msg);
    const float x[8] = {0};
    float y[4][6];
    atomic_int next = 0;
    infer_req q[4];
    done_order order[4];
    for (int i = 0; i < 4; i++) {
        order[i] = (done_order){.next = &next, .at = -1};
        infer_req_init(&q[i], sv, i == 3 ? 2 : 1, x, y[i], 0, record_order, &order[i]);
        q[i].priority = i == 3 ? 1 : 2;
        cr_assert_eq(batcher_submit(b, &q[i], &err), DL_OK, "%s", err.msg);
    }
    for (int i = 0; i < 5000 && atomic_load(&next) < 4; i++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    cr_assert_eq(atomic_load(&next), 4, "the requests did not complete in 5 s");
    for (int i = 0; i < 4; i++)
        cr_expect_eq(q[i].err.code, DL_OK, "%s", q[i].err.msg);
    served_release(sv);
    batcher_drain(b);
    batcher_free(b);
    stats_free(st);
    return order[3].at;
}

Test(batcher, higher_priority_levels_are_batched_first)
{
    char repo[64];
    fx_tmpdir(repo, sizeof(repo), "prio");
    fx_repo_model(be, repo, "prio", true);
    write_serving(repo, "prio", "{\"priority_levels\": 2, \"default_priority_level\": 2}");
    registry *r = fx_registry(repo, &be, 1);
    cr_expect_eq(high_place(r, "prio"), 0, "with priority levels, the high one runs first");
    cr_expect_eq(high_place(reg, "tiny"), 3, "without levels, the high one waits its turn");
    registry_free(r);
    fx_rmtree(repo);
}
