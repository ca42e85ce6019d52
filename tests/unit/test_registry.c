/* test_registry.c: the served model repository's lookups and what their
 * failures say: an unknown model, version or unloaded model is
 * DL_ERR_NOT_FOUND (404), a known model with no version ready is
 * DL_ERR_UNAVAILABLE (503); and the batcher's direct runs on a transport's
 * thread over it. A real repository in a temporary folder. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include "fixture.h"

#include "serve/oip/oip.h"
#include "serve/serve.h"

#include <time.h>

/* A tiny classifier: 4 inputs, 3 classes. */
#define TINY_JSON                                                                   \
    "{\"name\": \"%s\", \"input\": {\"shape\": [4]},"                               \
    " \"layers\": [{\"name\": \"fc\", \"type\": \"dense\", \"units\": 3}],"         \
    " \"loss\": \"softmax_cross_entropy\"}"

static char dir[64];
static dl_backend *be;
static registry *reg;

/* Writes <dir>/<name>/model.json; with weights, also version 1's. */
static void add_model(const char *name, bool weights)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s/model.json", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, TINY_JSON, name);
    fclose(f);
    if (!weights)
        return;
    dl_err err = {0};
    dl_model_conf *conf = NULL;
    dl_model *m = NULL;
    cr_assert_eq(dl_model_conf_load(path, &conf, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(be, conf, 1, &m, &err), DL_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/%s/1", dir, name);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s/1/model.safetensors", dir, name);
    cr_assert_eq(dl_model_save(m, path, NULL, &err), DL_OK, "%s", err.msg);
    dl_model_free(m);
    dl_model_conf_free(conf);
}

/* "tiny" serves version 1; "empty" has model.json and no weights. */
static void setup(void)
{
    fx_tmpdir(dir, sizeof(dir), "registry");
    be = fx_cpu_backend();
    dl_err err = {0};
    add_model("tiny", true);
    add_model("empty", false);
    dl_models_conf conf = {0};
    snprintf(conf.dir, sizeof(conf.dir), "%s", dir);
    snprintf(conf.policy, sizeof(conf.policy), "latest");
    cr_assert_eq(registry_new(&conf, &be, 1, &reg, &err), DL_OK, "%s", err.msg);
}

static void teardown(void)
{
    registry_free(reg);
    dl_backend_free(be);
    fx_rmtree(dir);
}

TestSuite(registry, .init = setup, .fini = teardown, .timeout = 30);

/* Expects registry_acquire to fail with `want`, HTTP code `code` and
 * `needle` in the message, and to leave *out NULL. */
static void refused(const char *name, int64_t version, dl_status want, int code,
                    const char *needle)
{
    served *sv = (served *)1;
    dl_err err = {0};
    dl_status st = registry_acquire(reg, name, version, &sv, &err);
    cr_expect_eq(st, want, "%s v%lld: %s (%s)", name, (long long)version, dl_status_str(st),
                 err.msg);
    cr_expect_eq(err.code, want);
    cr_expect_null(sv);
    cr_expect_eq(oip_http_code(st), code);
    cr_expect_not_null(strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
}

Test(registry, acquires_served_versions)
{
    served *sv = NULL;
    dl_err err = {0};
    cr_assert_eq(registry_acquire(reg, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(sv->version, 1);
    cr_expect_eq(sv->in_dim, 4);
    served_release(sv);
    cr_assert_eq(registry_acquire(reg, "tiny", 1, &sv, NULL), DL_OK);
    cr_expect_str_eq(sv->name, "tiny");
    served_release(sv);
}

/* models.instances = 2: a copy of the version a backend, with the same
 * weights (the same predictions), and nothing past them. */
Test(registry, loads_a_copy_an_instance)
{
    dl_backend *two[2] = {be, fx_cpu_backend()};
    dl_models_conf conf = {0};
    snprintf(conf.dir, sizeof(conf.dir), "%s", dir);
    snprintf(conf.policy, sizeof(conf.policy), "latest");
    registry *r2 = NULL;
    dl_err err = {0};
    cr_assert_eq(registry_new(&conf, two, 2, &r2, &err), DL_OK, "%s", err.msg);
    served *sv = NULL;
    cr_assert_eq(registry_acquire(r2, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_assert(sv->m[0] && sv->m[1] && sv->m[0] != sv->m[1]);
    cr_expect_null(sv->m[2]);
    const float x[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    float y0[16], y1[16];
    cr_assert_leq(sv->out_dim, 16);
    cr_assert_eq(dl_model_predict(sv->m[0], x, 1, 1, y0, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_predict(sv->m[1], x, 1, 1, y1, &err), DL_OK, "%s", err.msg);
    cr_expect_arr_eq(y0, y1, (size_t)sv->out_dim * sizeof(float));
    served_release(sv);
    registry_free(r2);
    dl_backend_free(two[1]);
}

Test(registry, tells_not_found_from_unavailable)
{
    refused("nope", 0, DL_ERR_NOT_FOUND, 404, "unknown model 'nope'");
    refused("nope", 2, DL_ERR_NOT_FOUND, 404, "unknown model 'nope'");
    refused("tiny", 2, DL_ERR_NOT_FOUND, 404, "version 2 of model 'tiny' is not served");
    refused("empty", 1, DL_ERR_NOT_FOUND, 404, "version 1 of model 'empty' is not served");
    refused("empty", 0, DL_ERR_UNAVAILABLE, 503, "model 'empty' has no version ready");
}

Test(registry, unloaded_is_not_found_until_loaded)
{
    dl_err err = {0};
    cr_assert_eq(registry_unload(reg, "tiny", &err), DL_OK, "%s", err.msg);
    refused("tiny", 0, DL_ERR_NOT_FOUND, 404, "model 'tiny' is unloaded");
    refused("tiny", 1, DL_ERR_NOT_FOUND, 404, "model 'tiny' is unloaded");
    cr_assert_eq(registry_load(reg, "tiny", &err), DL_OK, "%s", err.msg);
    served *sv = NULL;
    cr_expect_eq(registry_acquire(reg, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    served_release(sv);
}

Test(registry, load_and_unload_refusals)
{
    dl_err err = {0};
    cr_expect_eq(registry_load(reg, "nope", &err), DL_ERR_NOT_FOUND);
    cr_expect_not_null(strstr(err.msg, "unknown model 'nope'"), "%s", err.msg);
    cr_expect_eq(registry_unload(reg, "nope", &err), DL_ERR_NOT_FOUND);
    cr_expect_not_null(strstr(err.msg, "unknown model 'nope'"), "%s", err.msg);
    /* A model folder without weights is known, but cannot load: 400. */
    cr_expect_eq(registry_load(reg, "empty", &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "cannot be loaded"), "%s", err.msg);
    cr_expect_eq(oip_http_code(err.code), 400);
}

static void not_queued(infer_req *q, void *ctx)
{
    (void)ctx;
    cr_assert_fail("request %p completed through the queue", (void *)q);
}

/* batcher_run_now: a thread runs lone requests itself in streaks of
 * BATCHER_DIRECT_STREAK. Without a sleep since the streak ended (requests
 * read back to back), it leaves them to the queue; after one (as an event
 * loop sleeps with nothing to read), a new streak starts. */
Test(registry, direct_runs_come_in_streaks)
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
    int ran = 0;
    for (int i = 0; i < BATCHER_DIRECT_STREAK + 8; i++) {
        memset(y, 0, sizeof(y));
        if (batcher_run_now(b, &q)) {
            ran++;
            cr_expect_eq(q.err.code, DL_OK, "%s", q.err.msg);
            cr_expect_arr_eq(y, want, sizeof(y));
        }
    }
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
Test(registry, a_held_batch_waits_what_its_hand_off_would_cost)
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
