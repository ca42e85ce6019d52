/* main.c: dlserve's entry point: the command line (cli.c) dispatched to
 * the daemon, training, evaluation, prediction and benchmarking. */
#define _POSIX_C_SOURCE 200809L
#include "cmd/cli.h"
#ifdef DL_HAVE_SERVE
#include "serve/dl_serve.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlserve: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

/* The daemon, or --check-config. */
static int serve(const char *config, bool check, const char *const *ov, int nov)
{
#ifdef DL_HAVE_SERVE
    if (!check)
        return dl_serve_main(config, ov, nov);
    dl_serve_conf conf;
    dl_err err = {0};
    if (dl_serve_conf_load(&conf, config, &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 2;
    }
    dl_conf_print(dl_serve_opts, &conf, stdout);
    return 0;
#else
    (void)config;
    (void)check;
    (void)ov;
    (void)nov;
    return fail("this build has no daemon (it needs libmicrohttpd and inih)%s%s", "", "");
#endif
}

#ifdef DL_HAVE_REDIS
typedef struct publisher {
    dl_serve_conf  conf;
    dl_redis_link *link;
    bool           announced;
    char           error[300];
} publisher;

/* Each epoch to the progress stream; the new version to the registry. */
static void on_train_event(void *ctx, const dl_train_event *e)
{
    publisher *p = ctx;
    dl_err err = {0};
    if (e->version == 0) {
        dl_redis_progress_rec rec = {
            .step = e->step, .epoch = e->epoch, .loss = e->train_loss,
            .accuracy = e->test_accuracy >= 0 ? e->test_accuracy : e->train_accuracy,
            .samples_per_s = e->samples_per_s, .ranks = e->ranks,
        };
        if (dl_redis_progress(p->link, e->model, &rec, &err) != DL_OK)
            DL_LOG(DL_LOG_WARNING, "publish", "progress not recorded: %s", err.msg);
        return;
    }
    int64_t receivers = 0;
    if (dl_redis_publish(&p->conf.redis, e->model, e->version, e->weights, &receivers, &err) ==
        DL_OK) {
        p->announced = true;
        DL_LOG(DL_LOG_NOTICE, "publish", "announced %s version %lld to %lld daemon(s)", e->model,
               (long long)e->version, (long long)receivers);
    } else {
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
    }
}
#endif

/* --train --publish: [redis] from --config and --set; training progress
 * goes to Redis as it happens and the version is announced at the end. */
static int train_and_publish(dl_run_opts *o, const char *config, const char *const *ov, int nov)
{
#ifdef DL_HAVE_REDIS
    static publisher p;
    dl_err err = {0};
    if (dl_serve_conf_load(&p.conf, config, &err) != DL_OK ||
        dl_serve_conf_apply(&p.conf, ov, nov, &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 2;
    }
    if (!p.conf.redis.host[0])
        return fail("--publish needs [redis] host (--set redis.host=HOST or --config FILE)%s%s",
                    "", "");
    if (dl_redis_link_new(&p.conf.redis, "train", &p.link, &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    o->on_event = on_train_event;
    o->event_ctx = &p;
    dl_status st = dl_train_run(o, &err);
    dl_redis_link_free(p.link);
    if (st != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    if (dl_log_rank == 0 && !p.announced) {
        fprintf(stderr, "dlserve: the version was written but not announced: %s\n", p.error);
        return 1;
    }
    return 0;
#else
    (void)o;
    (void)config;
    (void)ov;
    (void)nov;
    return fail("--publish needs a build with Redis (hiredis)%s%s", "", "");
#endif
}

int main(int argc, char **argv)
{
    cli c;
    int rc = cli_parse(argc, argv, &c);
    if (rc >= 0)
        return rc;
    if (c.mode == CLI_SERVE)
        return serve(c.config, c.check_config, c.overrides, c.noverrides);
    if (c.publish)
        return train_and_publish(&c.run, c.config, c.overrides, c.noverrides);

    dl_run_opts *o = &c.run;
    dl_err err = {0};
    dl_status st = DL_OK;
    switch (c.mode) {
    case CLI_TRAIN:   st = dl_train_run(o, &err); break;
    case CLI_EVAL:    st = dl_eval_run(o, &err); break;
    case CLI_PREDICT: st = dl_predict_run(o, &err); break;
    case CLI_BENCH:   st = o->infer_batches ? dl_bench_infer_run(o, &err)
                                            : dl_bench_run(o, &err); break;
    case CLI_SERVE:   break;
    }
    if (st != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
