/* registry.h (private to serve/): the model repository and the lifecycle
 * of its versions (registry.c). Any thread may call any function here. */
#ifndef DL_SERVE_REGISTRY_H
#define DL_SERVE_REGISTRY_H

#include "serve/dl_serve.h"
#include "serve/generator.h"
#include "serve/serving.h"

#include <jansson.h>
#include <stdatomic.h>

typedef struct registry registry;

/* One loaded version of one model. Read-only once published; lives while
 * references are held (registry_acquire / served_release). */
typedef struct served {
    char                 name[DL_NAME_MAX];
    int64_t              version;
    /* Which load this is, unique in the process: a version loaded again
     * (unloaded, then loaded from files that may have changed) gets a new
     * one, so that what was kept of the earlier load (the response
     * cache's answers) never answers for it. */
    uint64_t             load_id;
    dl_model_conf       *conf;        /* owned */
    /* Owned: one copy a backend of the registry (models.instances, or
     * fewer: serving.instances), m[i] used by whoever holds the batcher's
     * instance i: its worker, or a transport's thread (batcher_run_now). */
    dl_model            *m[DL_MAX_INSTANCES];
    int64_t              in_dim, out_dim;
    /* Owned: conf->ninputs tokenizers, that of each text (BYTES) input,
     * NULL for the others; read-only, shared by every thread. */
    dl_tokenizer       **tok;
    /* model.json's "serving" block (the daemon's defaults where it gives
     * none), and the copies loaded: m[0..instances), the batcher's
     * instances that run this version */
    serving_conf         serving;
    int                  instances;
    /* Inference us a sample in the last batch run (at first, the
     * warm-up's single sample). */
    atomic_llong         sample_us;
    /* Owned: the version's generation (generator.h) when its model.json
     * has a "generate" block, else NULL; it runs on a copy of the model of
     * its own, built as m[0] is. */
    generator           *gen;
} served;

/* With conf->instances 0 (models.instances' default: the daemon then gives
 * the registry two backends on a CPU of two cores or more), a version
 * whose serving block names no instances runs on every backend when its
 * warm-up sample computed for at least REGISTRY_AUTO_SAMPLE_US, else on
 * the first alone: a request path costs about that much a request, so a
 * model that computes longer leaves the request path's core idle while
 * one instance computes (fashion-cnn, 50 us a sample on one thread:
 * 0.65x its batch-256 rate on two instances against 0.50x on one), and
 * one that computes less gains nothing from a second (fashion-mlp, 6 us:
 * 4-9% fewer requests at 32 connections on two; docs/benchmarks.md,
 * "HTTP serving"). */
#define REGISTRY_AUTO_SAMPLE_US 20

/* models.load_threads = 0: one a core up to this many. A version's load
 * is mostly one thread's work, and a rescan competes with the requests
 * being served for the cores. */
#define REGISTRY_LOAD_THREADS_AUTO 4
#define REGISTRY_LOAD_THREADS_MAX 64

/* Scans conf->dir and loads what the version policy selects (with
 * conf->control explicit, only the models conf->load names; the others
 * are listed unloaded, for registry_load). *out is new.
 * A model that fails to load is logged and recorded (see
 * registry_status), not fatal. Models compute batch-invariant answers
 * (dl_model_set_batch_invariant) as batch_invariant says, unless their
 * "serving" block says otherwise. Versions with a "generate" block get a
 * generator with the settings gen (NULL: none is started), counting its
 * steps in st. */
dl_status registry_new(const dl_models_conf *conf, bool batch_invariant,
                       const dl_generate_conf *gen, stats *st, dl_backend *const *be, int nbe,
                       registry **out, dl_err *err);
void registry_free(registry *r);

/* Rescans the folder: loads, validates and warms up new versions (up to
 * models.load_threads at once), swaps each model's in atomically, and
 * drops versions the policy no longer selects (they are freed when their
 * last reference goes). A bad version is refused and the old keeps
 * serving; the reason goes to the log and registry_status. Models
 * unloaded (or, with control explicit, never loaded) stay so. Returns the
 * number of changes. */
int registry_rescan(registry *r);

/* fn(ctx, sv) is called for each version the registry stops serving
 * (retired by a rescan, unloaded, or at registry_free), as it drops it,
 * with the registry's lock held: fn must be short and must not call the
 * registry. Requests holding sv may still complete after it. */
void registry_on_retire(registry *r, void (*fn)(void *ctx, const served *sv), void *ctx);

/* Loads (or reloads: its folder read again) / unloads one model by name,
 * for POST /v2/repository/models/{m}/load|unload. DL_ERR_NOT_FOUND when there
 * is no such model folder (load) or model (unload); DL_ERR_INVALID when
 * its newest version is refused (err says why). */
dl_status registry_load(registry *r, const char *name, dl_err *err);
dl_status registry_unload(registry *r, const char *name, dl_err *err);

/* *out: a reference to version `version` of `name` (0: the newest
 * served); release it with served_release. On failure *out is NULL and
 * the status says why: DL_ERR_NOT_FOUND for an unknown or unloaded model
 * or a version not served, DL_ERR_UNAVAILABLE for a model that has no
 * version ready (yet: a load failed or is under way). */
dl_status registry_acquire(registry *r, const char *name, int64_t version, served **out,
                           dl_err *err);
/* Drops a reference; NULL does nothing. */
void served_release(served *s);

/* True when every model that has versions on disk serves one of them (a
 * model folder without trained weights does not hold readiness back). */
bool registry_ready(registry *r);

/* JSON (new reference): [{"name", "versions": [..], "state":
 * "READY"|"UNAVAILABLE" (Triton's: no version served, or unloaded),
 * "reason" ("unloaded" when unloaded), "unloaded", "serving" (the newest
 * version's serving block: serving_json), "refused": [{"version",
 * "reason"}] (the versions the last scan wanted and could not load),
 * "generate": {"running", "waiting", "cached"} (the newest version's
 * generator; only where it generates)}], for /status and
 * /v2/repository/index. */
json_t *registry_status(registry *r);
/* Prometheus text to out: dlserve_model_versions_refused_total{model}
 * (every refused attempt) and dlserve_model_ready{model,version}: 1 for
 * each version served, 0 with a "reason" label for each version the last
 * scan refused, and {model,reason} 0 for a model with weights that serves
 * nothing else to show (unloaded, not loaded yet);
 * dlserve_generate_sequences_running{model,version},
 * dlserve_generate_requests_waiting{model,version} and
 * dlserve_generate_cancelled_total{model,version} of each version that
 * generates. */
void registry_metrics(registry *r, dl_sbuf *out);

/* The daemon's version policy ([models] policy) into buf: a model's
 * serving.version_policy overrides it. */
void registry_policy(registry *r, char *buf, size_t len);
/* A reloaded [models] policy (checked): the next rescan or load applies it. */
void registry_set_policy(registry *r, const char *policy);

/* Versions loaded at once: models.load_threads, 0 resolved. */
int registry_load_threads(const registry *r);

/* Names of the models (new array of new strings, NULL-terminated). */
char **registry_names(registry *r);

#endif /* DL_SERVE_REGISTRY_H */
