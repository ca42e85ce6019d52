/* publish.h: private to src/cmd: `dlserve --train --publish` (publish.c),
 * built where the daemon and Redis are (DL_HAVE_REDIS). */
#ifndef DL_CMD_PUBLISH_H
#define DL_CMD_PUBLISH_H

#include "redis/dl_redis.h"
#include "train/dl_train.h"

/* dl_train_run on a copy of o whose event hook (o's own is not called)
 * sends each epoch's progress through a "train" link to
 * dl_redis_progress (a failure there is logged, training goes on) and
 * announces the version written with dl_redis_publish. Errors: the
 * link's (a bad c), training's, and, on rank 0, DL_ERR_IO "the version
 * was written but not announced: <why>". */
dl_status publish_run(const dl_run_opts *o, const dl_redis_conf *c, dl_err *err);

#endif /* DL_CMD_PUBLISH_H */
