/* publish.c: `dlserve --train --publish`: training's events sent to Redis
 * as they happen, each epoch to the progress stream and the version
 * written to the registry (dl_redis_progress, dl_redis_publish). */
#include "cmd/publish.h"

#include <stdio.h>

typedef struct publisher {
    const dl_redis_conf *conf;
    dl_redis_link       *link;       /* "train": the progress stream */
    bool                 announced;
    char                 error[sizeof(((dl_err *)0)->msg)];  /* why not announced */
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
    if (dl_redis_publish(p->conf, e->model, e->version, e->weights, &receivers, &err) == DL_OK) {
        p->announced = true;
        DL_LOG(DL_LOG_NOTICE, "publish", "announced %s version %lld to %lld daemon(s)", e->model,
               (long long)e->version, (long long)receivers);
    } else {
        snprintf(p->error, sizeof(p->error), "%s", err.msg);
    }
}

dl_status publish_run(const dl_run_opts *o, const dl_redis_conf *c, dl_err *err)
{
    publisher p = { .conf = c };
    dl_status st = dl_redis_link_new(c, "train", &p.link, err);
    if (st != DL_OK)
        return st;
    dl_run_opts ro = *o;
    ro.on_event = on_train_event;
    ro.event_ctx = &p;
    st = dl_train_run(&ro, err);
    dl_redis_link_free(p.link);
    if (st != DL_OK)
        return st;
    /* Events, and so the announcement, happen on rank 0 only. */
    if (dl_log_rank == 0 && !p.announced)
        return dl_err_set(err, DL_ERR_IO, "the version was written but not announced: %s",
                          p.error);
    return DL_OK;
}
