/* serving.h (private to serve/): a model's own serving settings, the
 * "serving" block of its model.json (serving.c): the daemon's [batching]
 * and [models] defaults that one model overrides, Triton's
 * dynamic_batching, instance_group and version_policy of that model. */
#ifndef DL_SERVE_SERVING_H
#define DL_SERVE_SERVING_H

#include "serve/dl_serve.h"

#include <jansson.h>

/* Most entries of preferred_batch_size. */
#define SERVING_MAX_PREFERRED 8
/* Most priority levels a model may declare. */
#define SERVING_MAX_PRIORITY 16

/* The settings a "serving" block gives; 0 (or "") where it gives none and
 * the daemon's default applies. */
typedef struct serving_conf {
    int64_t max_batch_size;
    int64_t max_queue_delay_us;      /* -1: not given (0 is a setting) */
    int64_t preferred[SERVING_MAX_PREFERRED];   /* ascending */
    int     npreferred;
    int64_t max_queue_size;
    int64_t instances;               /* at most models.instances */
    char    version_policy[128];     /* as [models] policy */
    int64_t default_timeout_us;      /* -1: not given (0 is a setting: no limit) */
    int64_t priority_levels;         /* 0: one level, priorities ignored */
    int64_t default_priority_level;  /* 1..priority_levels when levels are given */
    int     batch_invariant;         /* 1, 0; -1: not given */
    bool    cache;                   /* answers kept in the response cache ([cache] bytes) */
} serving_conf;

/* The settings when model.json has no "serving" block: none given. */
void serving_init(serving_conf *sc);

/* Reads and checks a "serving" block (NULL: none, every default) into
 * *sc. Keys: max_batch_size, max_queue_size, instances (integers >= 1),
 * max_queue_delay_us, default_timeout_us (integers >= 0),
 * preferred_batch_size (1..SERVING_MAX_PREFERRED distinct integers >= 1,
 * each at most max_batch_size), version_policy (as [models] policy),
 * priority_levels (0..SERVING_MAX_PRIORITY) and default_priority_level
 * (1..priority_levels; with levels, required), batch_invariant (true or
 * false), cache (true or false: false when not given). `max_instances` bounds
 * instances (models.instances). DL_ERR_INVALID with err naming the key and
 * why for anything else, unknown keys included. */
dl_status serving_parse(json_t *block, int64_t max_instances, serving_conf *sc, dl_err *err);

/* The settings of model.json text's "serving" block (the defaults
 * without one). DL_ERR_INVALID for text that is not a JSON object or a
 * bad block. The text itself goes to dl_model_conf_parse as it is: the
 * block is a key it knows and leaves to the daemon. */
dl_status serving_read(const char *text, size_t len, int64_t max_instances, serving_conf *sc,
                       dl_err *err);

/* The settings given, as JSON (new reference): only the keys the block
 * gave, for /status. */
json_t *serving_json(const serving_conf *sc);

/* Whether a version policy reads as [models] policy does: "latest",
 * "latest:N" or "versions:N[,N...]", every N >= 1. */
bool serving_policy_ok(const char *p);

#endif /* DL_SERVE_SERVING_H */
