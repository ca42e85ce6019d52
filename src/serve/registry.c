/* registry.c: the model repository as the daemon serves it. Each model
 * folder holds model.json and version folders; the version policy picks
 * which versions to serve. New versions are loaded, validated and warmed
 * up off to the side, then swapped in under the lock; replaced versions
 * are freed when their last request releases them. */
#define _POSIX_C_SOURCE 200809L
#include "serve/serve.h"
#include "onnx/dl_onnx.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_VERSIONS 64
#define REFUSED_MAX 8     /* refused versions kept per model for registry_status */
#define REFUSED_WHY 160

typedef struct served_impl {
    served     pub;            /* first: served * and served_impl * convert */
    atomic_int refs;
} served_impl;

typedef struct entry {
    char         name[DL_NAME_MAX];
    served_impl *v[MAX_VERSIONS];   /* served versions, newest first */
    int          nv;
    bool         unloaded;          /* by POST .../unload; control = explicit: not loaded */
    bool         busy;              /* a plan syncs it (plan_begin) */
    bool         present;           /* folder seen in the last scan */
    int          on_disk;           /* versions with weights in the folder */
    char         reason[256];       /* why the last load failed, or "" */
    long long    refused_total;     /* versions refused, every attempt */
    /* Versions the last scan wanted and refused (bad weights or
     * configuration), with why; at most REFUSED_MAX of them. */
    struct {
        int64_t version;
        char    why[REFUSED_WHY];
    } refused[REFUSED_MAX];
    int          nrefused;
} entry;

struct registry {
    pthread_mutex_t mu;             /* the entries */
    pthread_cond_t  idle;           /* an entry stopped being busy */
    pthread_mutex_t scan_mu;        /* one rescan at a time */
    /* One version's warm-up timed at a time: its time decides how many
     * instances run it (REGISTRY_AUTO_SAMPLE_US), and versions loading
     * together would slow each other's. */
    pthread_mutex_t time_mu;
    dl_models_conf  conf;
    int             load_threads;   /* versions loaded at once (models.load_threads) */
    bool            batch_invariant;        /* [batching]'s, unless a model says */
    dl_generate_conf gen;                   /* [generate] */
    bool            has_gen;                /* generators started */
    stats          *st;                     /* where generators count their steps */
    dl_backend     *be[DL_MAX_INSTANCES];   /* one a copy of each model */
    int             nbe;
    entry          *e;
    int             n, cap;
    /* registry_on_retire's: called under mu for each version dropped */
    void          (*retired)(void *ctx, const served *sv);
    void           *retired_ctx;
};

/* served's load_id: one more for each version loaded. */
static atomic_uint_fast64_t loads;

/* ---- versions ------------------------------------------------------------ */

static void served_free(served_impl *s)
{
    for (int i = 0; i < DL_MAX_INSTANCES; i++)
        dl_model_free(s->pub.m[i]);
    for (int k = 0; s->pub.tok && k < s->pub.conf->ninputs; k++)
        dl_tokenizer_free(s->pub.tok[k]);
    free(s->pub.tok);
    /* Last: its thread may be the caller, ending after this; the
     * configuration goes with it (its model reads it to the end). */
    generator_free(s->pub.gen, &s->pub.conf);
    dl_model_conf_free(s->pub.conf);   /* NULL when the generator took it */
    free(s);
}

void served_release(served *sv)
{
    served_impl *s = (served_impl *)sv;
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        served_free(s);
}

/* A model's model.json, read for its versions: the text (new, *text) and
 * its "serving" block's settings. A model served from model.onnx files
 * may have none: then *text is "" and the settings are the defaults. */
static dl_status read_model_json(const registry *r, const char *name, char **text,
                                 serving_conf *sc, dl_err *err)
{
    char path[DL_PATH_MAX + 128];
    snprintf(path, sizeof(path), "%s/%s/model.json", r->conf.dir, name);
    char *raw = NULL;
    size_t len = 0;
    struct stat sb;
    *text = NULL;
    if (stat(path, &sb) != 0) {
        serving_init(sc);
        *text = strdup("");
        return *text ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "model.json");
    }
    dl_status st = dl_file_read(path, &raw, &len, err);
    if (st == DL_OK)
        st = serving_read(raw, len, r->nbe, sc, err);
    if (st == DL_OK)
        *text = raw;
    else
        free(raw);
    return st;
}

/* The model.json of a version: a version folder with model.onnx and no
 * model.safetensors is translated (the model's model.json text, when there
 * is one, merged in: *om new), any other uses the model's. */
static dl_status version_conf(registry *r, const char *name, int64_t version,
                              const char *text, dl_onnx_model **om, dl_model_conf **conf,
                              dl_err *err)
{
    char path[DL_PATH_MAX + 128], onnx[DL_PATH_MAX + 128];
    struct stat sb;
    *om = NULL;
    snprintf(path, sizeof(path), "%s/%s/%lld/model.safetensors", r->conf.dir, name,
             (long long)version);
    snprintf(onnx, sizeof(onnx), "%s/%s/%lld/model.onnx", r->conf.dir, name,
             (long long)version);
    if (stat(path, &sb) != 0 && stat(onnx, &sb) == 0) {
        dl_status st = dl_onnx_load(onnx, name, text[0] ? text : NULL, om, err);
        return st ? st : dl_onnx_build(*om, NULL, onnx, conf, NULL, err);
    }
    snprintf(path, sizeof(path), "%s/%s/model.json", r->conf.dir, name);
    if (!text[0])
        return dl_err_set(err, DL_ERR_INVALID, "%s: missing (version %lld has no model.onnx)",
                          path, (long long)version);
    return dl_model_conf_parse(text, strlen(text), path, conf, err);
}

/* The tokenizers of a version's text inputs (its vocabularies read once,
 * for every thread). */
static dl_status make_tokenizers(served *sv, dl_err *err)
{
    const dl_model_conf *conf = sv->conf;
    if (!(sv->tok = calloc((size_t)conf->ninputs, sizeof(*sv->tok))))
        return dl_err_set(err, DL_ERR_NOMEM, "tokenizers");
    dl_status st = DL_OK;
    for (int k = 0; k < conf->ninputs && st == DL_OK; k++)
        if (conf->inputs[k].dtype == DL_IN_BYTES &&
            (st = dl_tokenizer_new(&conf->inputs[k].tok, &sv->tok[k], err)) != DL_OK)
            dl_err_prefix(err, "input '%s'", conf->inputs[k].name);
    return st;
}

/* A warm-up sample (in_dim zeros, the packed layout): every sequence at
 * its longest, so that the time it gives bounds any sample's. */
static void warm_sample(const dl_model_conf *conf, float *x)
{
    for (int k = 0; k < conf->ninputs; x += dl_input_width(&conf->inputs[k++]))
        if (conf->inputs[k].max_length > 0)
            x[0] = (float)conf->inputs[k].max_length;
}

/* A copy of the version's model on backend be, its weights loaded (from
 * the translated ONNX model om, or the safetensors file path), fixed and
 * batch-invariant as the version's serving block or the daemon says. */
static dl_status new_instance(const registry *r, served_impl *s, dl_backend *be,
                              dl_onnx_model *om, const char *path, const serving_conf *sc,
                              dl_model **out, dl_err *err)
{
    dl_model *m = NULL;
    dl_status st = dl_model_new(be, s->pub.conf, 1, &m, err);
    if (st == DL_OK && om)
        st = dl_model_set_weights(m, dl_onnx_tensor_at(om, 0), dl_onnx_tensor_count(om),
                                  path, err);
    else if (st == DL_OK)
        st = dl_model_load(m, path, err);
    if (st == DL_OK) {
        dl_model_fix_weights(m);
        dl_model_set_batch_invariant(m, sc->batch_invariant >= 0 ? sc->batch_invariant == 1
                                                                 : r->batch_invariant);
    }
    *out = m;
    return st;
}

/* The version's generator when model.json's text has a "generate" block
 * (and the daemon starts generators): a copy of the model of its own. */
static dl_status start_generator(const registry *r, served_impl *s, const char *text,
                                 dl_onnx_model *om, const char *path, const serving_conf *sc,
                                 dl_err *err)
{
    dl_gen_conf gc;
    bool has = false;
    memset(&gc, 0, sizeof(gc));
    char what[DL_PATH_MAX + 128];
    snprintf(what, sizeof(what), "%s/%s/model.json", r->conf.dir, s->pub.conf->name);
    dl_status st = text[0] ? dl_gen_conf_read(text, what, s->pub.conf, &gc, &has, err) : DL_OK;
    if (st != DL_OK || !has || !r->has_gen)
        return st;
    dl_model *m = NULL;
    st = new_instance(r, s, r->be[0], om, path, sc, &m, err);
    if (st != DL_OK) {
        dl_model_free(m);
        dl_gen_conf_release(&gc);
        return st;
    }
    return generator_new(s->pub.conf->name, s->pub.version, &m, &gc, &r->gen, r->st,
                         &s->pub.gen, err);
}

/* Loads, validates and warms up one version from its model's model.json
 * `text` (without its serving block; "" when there is none) and serving
 * settings sc. */
static dl_status load_version(registry *r, const char *name, int64_t version, const char *text,
                              const serving_conf *sc, served_impl **out, dl_err *err)
{
    *out = NULL;
    char path[DL_PATH_MAX + 128];
    snprintf(path, sizeof(path), "%s/%s/model.json", r->conf.dir, name);
    served_impl *s = calloc(1, sizeof(*s));
    if (!s)
        return dl_err_set(err, DL_ERR_NOMEM, "model");
    s->pub.serving = *sc;
    s->pub.load_id = atomic_fetch_add(&loads, 1) + 1;
    s->pub.instances = sc->instances > 0 ? (int)sc->instances : r->nbe;
    dl_onnx_model *om = NULL;
    dl_status st = version_conf(r, name, version, text, &om, &s->pub.conf, err);
    if (st == DL_OK && strcmp(s->pub.conf->name, name) != 0)
        st = dl_err_set(err, DL_ERR_INVALID, "%s: name '%s' differs from the folder '%s'",
                        path, s->pub.conf->name, name);
    if (st == DL_OK)
        st = make_tokenizers(&s->pub, err);
    snprintf(path, sizeof(path), "%s/%s/%lld/model.safetensors", r->conf.dir, name,
             (long long)version);
    for (int i = 0; st == DL_OK && i < s->pub.instances; i++) {   /* a copy an instance */
        dl_model *m = NULL;
        st = new_instance(r, s, r->be[i], om, path, sc, &m, err);
        s->pub.m[i] = m;
        if (st != DL_OK)
            break;
        s->pub.in_dim = dl_model_in_dim(m);
        s->pub.out_dim = dl_model_served_out_dim(m);
        /* Warm-up: one pass sizes the buffers before the first request;
         * the fastest of three more times a sample until the first batch
         * does (the batcher's bound on running a request on a transport's
         * thread; one pass alone may be preempted on a busy machine). */
        float *x = calloc((size_t)s->pub.in_dim, sizeof(float));
        float *y = malloc((size_t)s->pub.out_dim * sizeof(float));
        if (x)
            warm_sample(s->pub.conf, x);
        st = x && y ? dl_model_predict(m, x, 1, 1, y, err)
                    : dl_err_set(err, DL_ERR_NOMEM, "warm-up");
        double best = 0;
        pthread_mutex_lock(&r->time_mu);
        for (int i = 0; i < 3 && st == DL_OK; i++) {
            double t0 = dl_time_now();
            st = dl_model_predict(m, x, 1, 1, y, err);
            double t = dl_time_now() - t0;
            best = i == 0 || t < best ? t : best;
        }
        pthread_mutex_unlock(&r->time_mu);
        atomic_store(&s->pub.sample_us, (long long)(best * 1e6));
        free(x);
        free(y);
        /* models.instances' default: a model that computes little runs on
         * the first instance only (registry.h) */
        if (st == DL_OK && i == 0 && sc->instances == 0 && r->conf.instances == 0 &&
            best * 1e6 < REGISTRY_AUTO_SAMPLE_US)
            s->pub.instances = 1;
    }
    if (st == DL_OK) {
        s->pub.version = version;   /* the generator's name and version */
        st = start_generator(r, s, text, om, path, sc, err);
    }
    dl_onnx_free(om);
    if (st != DL_OK) {
        served_free(s);
        return st;
    }
    snprintf(s->pub.name, sizeof(s->pub.name), "%s", name);
    s->pub.version = version;
    atomic_init(&s->refs, 1);   /* the registry's own reference */
    *out = s;
    return DL_OK;
}

/* Version folders holding weights or model.onnx, newest first; returns the count. */
static int list_versions(const registry *r, const char *name, int64_t *out, int max)
{
    char dir[DL_PATH_MAX + 80];
    snprintf(dir, sizeof(dir), "%s/%s", r->conf.dir, name);
    return dl_repo_served_versions(dir, out, max);
}

/* ---- entries -------------------------------------------------------------- */

static entry *find(registry *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->e[i].name, name) == 0)
            return &r->e[i];
    return NULL;
}

static entry *find_or_add(registry *r, const char *name)
{
    entry *e = find(r, name);
    if (e)
        return e;
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 8;
        entry *ne = realloc(r->e, (size_t)cap * sizeof(*ne));
        if (!ne)
            return NULL;
        r->e = ne;
        r->cap = cap;
    }
    e = &r->e[r->n++];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    return e;
}

/* Publishes `next` (newest first) as the entry's versions, each carrying a
 * reference for the registry; every version replaced loses the registry's
 * reference (one kept in `next` holds the one it carries), and those no
 * longer served are retired (registry_on_retire). Called with the lock
 * held. */
static void publish(registry *r, entry *e, served_impl **next, int n)
{
    served_impl *old[MAX_VERSIONS];
    int nold = e->nv;
    memcpy(old, e->v, sizeof(old));
    if (n > 0)
        memcpy(e->v, next, (size_t)n * sizeof(*next));
    e->nv = n;
    for (int i = 0; i < nold; i++) {
        bool kept = false;
        for (int k = 0; k < n; k++)
            kept = kept || next[k] == old[i];
        if (!kept && r->retired)
            r->retired(r->retired_ctx, &old[i]->pub);
        served_release(&old[i]->pub);
    }
}

/* One model brought to what the policy wants, in three steps: planned
 * (plan_begin: the entry marked busy, its versions and model.json read),
 * the versions it lacks loaded (load_plans: with the other models' of a
 * rescan, on load_threads threads), then published at once (plan_finish).
 * One caller at a time syncs a model (entry.busy): a rescan and an API
 * load of the same model wait for each other. */
typedef struct plan {
    char         name[DL_NAME_MAX];
    bool         active;                  /* busy marked by this plan */
    int64_t      want[MAX_VERSIONS];      /* what the policy selects, newest first */
    int          nwant, nhave;
    char        *text;                    /* model.json (new) */
    serving_conf sc;
    bool         json_ok;
    dl_err       jerr;                    /* why model.json was refused */
    served_impl *current[MAX_VERSIONS];   /* served at the start, a reference each */
    int          ncur;
    served_impl *got[MAX_VERSIONS];       /* want[i]: served already, loaded, or NULL */
    bool         fresh[MAX_VERSIONS];     /* want[i] was to load */
    dl_err       err[MAX_VERSIONS];       /* why want[i] was refused */
} plan;

static void plan_begin(registry *r, plan *p, const char *name)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    pthread_mutex_lock(&r->mu);
    entry *e = find_or_add(r, name);
    while (e && e->busy) {
        pthread_cond_wait(&r->idle, &r->mu);
        e = find(r, name);   /* the entries may have moved meanwhile */
    }
    if (!e || e->unloaded) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    e->busy = true;
    e->present = true;
    /* References of our own: an unload meanwhile drops the registry's. */
    p->ncur = e->nv;
    for (int k = 0; k < e->nv; k++) {
        p->current[k] = e->v[k];
        atomic_fetch_add(&e->v[k]->refs, 1);
    }
    pthread_mutex_unlock(&r->mu);
    p->active = true;
    int64_t have[MAX_VERSIONS];
    p->nhave = list_versions(r, name, have, MAX_VERSIONS);
    p->json_ok = read_model_json(r, name, &p->text, &p->sc, &p->jerr) == DL_OK;
    char policy[sizeof(r->conf.policy)];
    registry_policy(r, policy, sizeof(policy));
    if (p->json_ok && p->sc.version_policy[0])
        snprintf(policy, sizeof(policy), "%s", p->sc.version_policy);
    p->nwant = p->json_ok ? dl_repo_select(policy, have, p->nhave, p->want) : 0;
    for (int i = 0; i < p->nwant; i++) {
        for (int k = 0; k < p->ncur && !p->got[i]; k++)
            if (p->current[k]->pub.version == p->want[i])
                p->got[i] = p->current[k];
        p->fresh[i] = !p->got[i];
    }
}

/* A version to load: plans[..].want[i]. */
typedef struct load_job {
    plan *p;
    int   i;
} load_job;

typedef struct job_queue {
    registry  *r;
    load_job  *jobs;
    int        n;
    atomic_int next;   /* the next job to take */
} job_queue;

static void run_job(registry *r, plan *p, int i)
{
    double t0 = dl_time_now();
    if (load_version(r, p->name, p->want[i], p->text, &p->sc, &p->got[i], &p->err[i]) == DL_OK)
        DL_LOG(DL_LOG_NOTICE, "models", "%s version %lld loaded in %.0f ms", p->name,
               (long long)p->want[i], (dl_time_now() - t0) * 1e3);
}

static void *load_worker(void *arg)
{
    job_queue *q = arg;
    for (int i; (i = atomic_fetch_add(&q->next, 1)) < q->n;)
        run_job(q->r, q->jobs[i].p, q->jobs[i].i);
    return NULL;
}

/* Loads every version the plans lack, on up to load_threads threads (the
 * caller one of them): a version's load is mostly one thread's work
 * (reading, building, warm-up samples of one), so several at once use
 * the cores that one leaves idle. Versions are independent: each builds
 * its own copies, and a backend computes for several callers at once
 * (as it does for requests while a rescan loads). */
static void load_plans(registry *r, plan *plans, int nplans)
{
    int n = 0;
    for (int k = 0; k < nplans; k++)
        for (int i = 0; plans[k].active && i < plans[k].nwant; i++)
            n += plans[k].fresh[i];
    load_job *jobs = n > 1 && r->load_threads > 1 ? calloc((size_t)n, sizeof(*jobs)) : NULL;
    if (!jobs) {   /* one thread, or no memory for the queue: one after the other */
        for (int k = 0; k < nplans; k++)
            for (int i = 0; plans[k].active && i < plans[k].nwant; i++)
                if (plans[k].fresh[i])
                    run_job(r, &plans[k], i);
        return;
    }
    job_queue q = {.r = r, .jobs = jobs, .n = 0};
    for (int k = 0; k < nplans; k++)
        for (int i = 0; plans[k].active && i < plans[k].nwant; i++)
            if (plans[k].fresh[i])
                jobs[q.n++] = (load_job){&plans[k], i};
    atomic_init(&q.next, 0);
    pthread_t t[REGISTRY_LOAD_THREADS_MAX];
    int nt = 0;
    for (int k = 1; k < r->load_threads && k < n; k++)
        if (pthread_create(&t[nt], NULL, load_worker, &q) == 0)
            nt++;
    load_worker(&q);
    for (int k = 0; k < nt; k++)
        pthread_join(t[k], NULL);
    free(jobs);
}

/* Publishes what a plan loaded; returns the changes made. */
static int plan_finish(registry *r, plan *p)
{
    if (!p->active)
        return 0;
    served_impl *next[MAX_VERSIONS];
    int n = 0, changes = 0, nrefused = 0, nfailed = 0;
    char reason[256] = "";
    int64_t refused[REFUSED_MAX];
    char why[REFUSED_MAX][REFUSED_WHY];
    for (int i = 0; i < p->nwant; i++) {
        if (p->got[i]) {
            changes += p->fresh[i];
            next[n++] = p->got[i];
            continue;
        }
        const char *msg = p->err[i].msg;
        DL_LOG(DL_LOG_ERR, "models", "%s version %lld refused: %s", p->name,
               (long long)p->want[i], msg);
        snprintf(reason, sizeof(reason), "version %lld refused: %.200s", (long long)p->want[i],
                 msg);
        nfailed++;
        if (nrefused < REFUSED_MAX) {
            refused[nrefused] = p->want[i];
            snprintf(why[nrefused++], REFUSED_WHY, "%.*s", REFUSED_WHY - 1, msg);
        }
    }
    /* A refused newest version leaves the versions that were serving. */
    for (int k = 0; k < p->ncur && n == 0; k++)
        next[n++] = p->current[k];
    /* The plan's references of the versions kept go to the registry. */
    served_impl *drop[MAX_VERSIONS];
    int ndrop = 0;
    for (int k = 0; k < p->ncur; k++) {
        bool kept = false;
        for (int i = 0; i < n; i++)
            kept = kept || next[i] == p->current[k];
        if (!kept) {
            DL_LOG(DL_LOG_NOTICE, "models", "%s version %lld retired", p->name,
                   (long long)p->current[k]->pub.version);
            drop[ndrop++] = p->current[k];
            changes++;
        }
    }
    free(p->text);
    if (!p->json_ok) {   /* a bad model.json or serving block: nothing new loads */
        DL_LOG(DL_LOG_ERR, "models", "%s refused: %s", p->name, p->jerr.msg);
        snprintf(reason, sizeof(reason), "model.json refused: %.200s", p->jerr.msg);
    } else if (p->nhave == 0) {
        snprintf(reason, sizeof(reason), "no version with model.safetensors or model.onnx");
    }
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, p->name);
    if (e->unloaded) {   /* unloaded meanwhile: what was loaded goes */
        for (int i = 0; i < n; i++)
            drop[ndrop++] = next[i];
        changes = 0;
    } else {
        publish(r, e, next, n);
        e->on_disk = p->nhave;
        snprintf(e->reason, sizeof(e->reason), "%s", reason);
        e->refused_total += nfailed;
        e->nrefused = nrefused;
        for (int i = 0; i < nrefused; i++) {
            e->refused[i].version = refused[i];
            memcpy(e->refused[i].why, why[i], REFUSED_WHY);
        }
    }
    e->busy = false;
    pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < ndrop; i++)
        served_release(&drop[i]->pub);
    return changes;
}

/* Brings the models named to what the policy wants, their versions loaded
 * together; returns the changes made. */
static int sync_models(registry *r, char (*names)[DL_NAME_MAX], int n)
{
    if (n == 0)
        return 0;
    plan *plans = calloc((size_t)n, sizeof(*plans));
    if (!plans) {
        DL_LOG(DL_LOG_ERR, "models", "out of memory syncing %d models", n);
        return 0;
    }
    for (int k = 0; k < n; k++)
        plan_begin(r, &plans[k], names[k]);
    load_plans(r, plans, n);
    int changes = 0;
    for (int k = 0; k < n; k++)
        changes += plan_finish(r, &plans[k]);
    free(plans);
    return changes;
}

static bool is_model_dir(const registry *r, const char *name)
{
    if (name[0] == '.' || strlen(name) >= DL_NAME_MAX)
        return false;
    char path[DL_PATH_MAX + 80];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s/model.json", r->conf.dir, name);
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        return true;
    int64_t v;
    snprintf(path, sizeof(path), "%s/%s", r->conf.dir, name);
    return dl_repo_served_versions(path, &v, 1) > 0;   /* model.onnx alone */
}

/* The model folders of the repository (new array, *n of them), or NULL
 * when it cannot be read (logged). */
static char (*model_dirs(registry *r, int *n))[DL_NAME_MAX]
{
    *n = 0;
    DIR *d = opendir(r->conf.dir);
    if (!d) {
        DL_LOG(DL_LOG_ERR, "models", "%s: cannot open the model repository", r->conf.dir);
        return NULL;
    }
    char (*names)[DL_NAME_MAX] = NULL;
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_model_dir(r, de->d_name))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char (*more)[DL_NAME_MAX] = realloc(names, (size_t)cap * sizeof(*names));
            if (!more)
                break;
            names = more;
        }
        dl_strlcpy(names[(*n)++], de->d_name, DL_NAME_MAX);   /* is_model_dir: it fits */
    }
    closedir(d);
    if (!names)
        names = calloc(1, sizeof(*names));   /* an empty repository is no error */
    return names;
}

int registry_rescan(registry *r)
{
    pthread_mutex_lock(&r->scan_mu);
    int n;
    char (*names)[DL_NAME_MAX] = model_dirs(r, &n);
    if (!names) {
        pthread_mutex_unlock(&r->scan_mu);
        return 0;
    }
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++)
        r->e[i].present = false;
    pthread_mutex_unlock(&r->mu);
    int changes = sync_models(r, names, n);
    free(names);
    /* Folders that disappeared stop serving (one being loaded through the
     * API was there a moment ago). */
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++)
        if (!r->e[i].present && !r->e[i].busy && r->e[i].nv > 0) {
            DL_LOG(DL_LOG_NOTICE, "models", "%s: folder gone, unloading", r->e[i].name);
            publish(r, &r->e[i], NULL, 0);
            changes++;
        }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->scan_mu);
    return changes;
}

/* control = explicit at start: every model folder listed, unloaded, then
 * those [models] load names loaded. */
static void start_explicit(registry *r)
{
    int n;
    char (*names)[DL_NAME_MAX] = model_dirs(r, &n);
    pthread_mutex_lock(&r->mu);
    for (int i = 0; names && i < n; i++) {
        entry *e = find_or_add(r, names[i]);
        if (e)
            e->unloaded = true;
    }
    pthread_mutex_unlock(&r->mu);
    free(names);
    /* The list, checked by the configuration: names separated by commas. */
    char (*load)[DL_NAME_MAX] = calloc(sizeof(r->conf.load) / 2 + 1, sizeof(*load));
    int nload = 0;
    const char *name;
    size_t len;
    for (const char *p = r->conf.load[0] ? r->conf.load : NULL;
         load && dl_models_load_next(&p, &name, &len);) {
        snprintf(load[nload], DL_NAME_MAX, "%.*s", (int)len, name);
        bool twice = false;   /* listed twice: its plan would wait for itself */
        for (int k = 0; k < nload; k++)
            twice = twice || strcmp(load[k], load[nload]) == 0;
        if (twice)
            continue;
        pthread_mutex_lock(&r->mu);
        entry *e = find_or_add(r, load[nload]);
        if (e && is_model_dir(r, load[nload])) {
            e->unloaded = false;
            nload++;
        } else if (e) {
            DL_LOG(DL_LOG_ERR, "models", "[models] load names '%s': no %s/%s/model.json or "
                   "version with model.onnx", load[nload], r->conf.dir, load[nload]);
            snprintf(e->reason, sizeof(e->reason), "no folder in the model repository");
        }
        pthread_mutex_unlock(&r->mu);
    }
    sync_models(r, load, nload);
    free(load);
}

dl_status registry_new(const dl_models_conf *conf, bool batch_invariant,
                       const dl_generate_conf *gen, stats *st, dl_backend *const *be, int nbe,
                       registry **out, dl_err *err)
{
    *out = NULL;
    DL_ASSERT(nbe >= 1 && nbe <= DL_MAX_INSTANCES);
    registry *r = calloc(1, sizeof(*r));
    if (!r)
        return dl_err_set(err, DL_ERR_NOMEM, "registry");
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->scan_mu, NULL);
    pthread_mutex_init(&r->time_mu, NULL);
    pthread_cond_init(&r->idle, NULL);
    r->conf = *conf;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    r->load_threads = conf->load_threads > 0 ? (int)conf->load_threads
                      : cores > REGISTRY_LOAD_THREADS_AUTO ? REGISTRY_LOAD_THREADS_AUTO
                      : cores > 1 ? (int)cores : 1;
    if (r->load_threads > REGISTRY_LOAD_THREADS_MAX)
        r->load_threads = REGISTRY_LOAD_THREADS_MAX;
    r->batch_invariant = batch_invariant;
    if (gen) {
        r->gen = *gen;
        r->has_gen = true;
    }
    r->st = st;
    memcpy(r->be, be, (size_t)nbe * sizeof(*be));
    r->nbe = nbe;
    struct stat sb;
    if (stat(conf->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->scan_mu);
        pthread_mutex_destroy(&r->time_mu);
        pthread_cond_destroy(&r->idle);
        free(r);
        return dl_err_set(err, DL_ERR_IO, "%s: the model repository is not a folder", conf->dir);
    }
    if (conf->control == DL_MODELS_CONTROL_EXPLICIT)
        start_explicit(r);
    else
        registry_rescan(r);
    *out = r;
    return DL_OK;
}

void registry_free(registry *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        publish(r, &r->e[i], NULL, 0);
    free(r->e);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->scan_mu);
    pthread_mutex_destroy(&r->time_mu);
    pthread_cond_destroy(&r->idle);
    free(r);
}

void registry_on_retire(registry *r, void (*fn)(void *ctx, const served *sv), void *ctx)
{
    pthread_mutex_lock(&r->mu);
    r->retired = fn;
    r->retired_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}

dl_status registry_load(registry *r, const char *name, dl_err *err)
{
    if (!is_model_dir(r, name))
        return dl_err_set(err, DL_ERR_NOT_FOUND,
                          "unknown model '%s': no %s/%s/model.json or version with model.onnx",
                          name, r->conf.dir, name);
    char one[1][DL_NAME_MAX];
    snprintf(one[0], DL_NAME_MAX, "%s", name);
    pthread_mutex_lock(&r->mu);
    entry *e = find_or_add(r, name);
    if (e)
        e->unloaded = false;
    pthread_mutex_unlock(&r->mu);
    sync_models(r, one, 1);
    pthread_mutex_lock(&r->mu);
    e = find(r, name);
    dl_status st = DL_OK;
    if (!e || e->nv == 0)
        st = dl_err_set(err, DL_ERR_INVALID, "model '%s' cannot be loaded: %s", name,
                        e && e->reason[0] ? e->reason : "no version");
    else if (e->reason[0])
        st = dl_err_set(err, DL_ERR_INVALID, "model '%s': %s (version %lld keeps serving)",
                        name, e->reason, (long long)e->v[0]->pub.version);
    pthread_mutex_unlock(&r->mu);
    return st;
}

dl_status registry_unload(registry *r, const char *name, dl_err *err)
{
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, name);
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        return dl_err_set(err, DL_ERR_NOT_FOUND, "unknown model '%s'", name);
    }
    e->unloaded = true;
    publish(r, e, NULL, 0);
    pthread_mutex_unlock(&r->mu);
    DL_LOG(DL_LOG_NOTICE, "models", "%s unloaded", name);
    return DL_OK;
}

dl_status registry_acquire(registry *r, const char *name, int64_t version, served **out,
                           dl_err *err)
{
    *out = NULL;
    served_impl *s = NULL;
    dl_status st = DL_OK;
    pthread_mutex_lock(&r->mu);
    entry *e = find(r, name);
    for (int i = 0; e && i < e->nv && !s; i++)
        if (version <= 0 || e->v[i]->pub.version == version)
            s = e->v[i];
    if (s)
        atomic_fetch_add(&s->refs, 1);
    /* Why not, in the words the HTTP answers use. Unloaded through the
     * API is not served, as if unknown; only a known model that has no
     * version ready now is worth asking again. */
    else if (!e)
        st = dl_err_set(err, DL_ERR_NOT_FOUND, "unknown model '%s'", name);
    else if (e->unloaded)
        st = dl_err_set(err, DL_ERR_NOT_FOUND, "model '%s' is unloaded", name);
    else if (version > 0)
        st = dl_err_set(err, DL_ERR_NOT_FOUND, "version %lld of model '%s' is not served",
                        (long long)version, name);
    else
        st = dl_err_set(err, DL_ERR_UNAVAILABLE, "model '%s' has no version ready", name);
    pthread_mutex_unlock(&r->mu);
    *out = s ? &s->pub : NULL;
    return st;
}

bool registry_ready(registry *r)
{
    pthread_mutex_lock(&r->mu);
    bool ready = true;
    for (int i = 0; i < r->n; i++)
        if (!r->e[i].unloaded && r->e[i].present && r->e[i].on_disk > 0 && r->e[i].nv == 0)
            ready = false;   /* a model with weights that none could load */
    pthread_mutex_unlock(&r->mu);
    return ready;
}

json_t *registry_status(registry *r)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        entry *e = &r->e[i];
        json_t *versions = json_array();
        for (int k = 0; k < e->nv; k++)
            json_array_append_new(versions, json_integer(e->v[k]->pub.version));
        json_t *refused = json_array();
        for (int k = 0; !e->unloaded && k < e->nrefused; k++)
            json_array_append_new(refused, json_pack("{s:I, s:s}", "version",
                                                     (json_int_t)e->refused[k].version,
                                                     "reason", e->refused[k].why));
        /* Triton's states: an unloaded model is UNAVAILABLE, and says so */
        const char *state = e->nv && !e->unloaded ? "READY" : "UNAVAILABLE";
        const char *reason = e->unloaded ? "unloaded" : e->reason;
        json_t *serving = e->nv ? serving_json(&e->v[0]->pub.serving) : json_object();
        const generator *g = e->nv && !e->unloaded ? e->v[0]->pub.gen : NULL;
        json_t *gen = g ? json_pack("{s:I, s:I, s:b}", "running",
                                    (json_int_t)generator_running(g), "waiting",
                                    (json_int_t)generator_waiting(g), "cached",
                                    generator_cached(g))
                        : NULL;
        json_array_append_new(arr, json_pack("{s:s, s:o, s:s, s:s, s:b, s:o*, s:o, s:o*}",
                                             "name", e->name, "versions", versions, "state",
                                             state, "reason", reason, "unloaded", e->unloaded,
                                             "serving", serving, "refused", refused,
                                             "generate", gen));
    }
    pthread_mutex_unlock(&r->mu);
    return arr;
}

/* One gauge of every served version that generates; called with the lock
 * held. */
static void gen_metrics(registry *r, dl_sbuf *out, const char *name, const char *help,
                        int64_t (*get)(const generator *g))
{
    const char *type = strstr(name, "_total") ? "counter" : "gauge";
    bool any = false;
    for (int i = 0; i < r->n; i++)
        for (int k = 0; !r->e[i].unloaded && k < r->e[i].nv; k++) {
            const served *sv = &r->e[i].v[k]->pub;
            if (!sv->gen)
                continue;
            if (!any)
                dl_prom_family(out, name, type, help);
            any = true;
            char v[24];
            snprintf(v, sizeof(v), "%lld", (long long)sv->version);
            dl_prom_sample(out, name, (double)get(sv->gen), "model", sv->name, "version", v,
                           NULL);
        }
}

void registry_metrics(registry *r, dl_sbuf *out)
{
    pthread_mutex_lock(&r->mu);
    dl_prom_family(out, "dlserve_model_versions_refused_total", "counter",
                   "Model versions that failed to load or validate, by model (every attempt).");
    for (int i = 0; i < r->n; i++)
        dl_prom_sample(out, "dlserve_model_versions_refused_total",
                       (double)r->e[i].refused_total, "model", r->e[i].name, NULL);
    dl_prom_family(out, "dlserve_model_ready", "gauge",
                   "1 for each version served; 0 for each version the last scan refused, "
                   "with the reason.");
    for (int i = 0; i < r->n; i++) {
        const entry *e = &r->e[i];
        char v[24];
        for (int k = 0; !e->unloaded && k < e->nv; k++) {
            snprintf(v, sizeof(v), "%lld", (long long)e->v[k]->pub.version);
            dl_prom_sample(out, "dlserve_model_ready", 1, "model", e->name, "version", v, NULL);
        }
        for (int k = 0; !e->unloaded && k < e->nrefused; k++) {
            snprintf(v, sizeof(v), "%lld", (long long)e->refused[k].version);
            dl_prom_sample(out, "dlserve_model_ready", 0, "model", e->name, "version", v,
                           "reason", e->refused[k].why, NULL);
        }
        /* A model with weights that serves nothing and has no refused
         * version to show (unloaded, or none loaded yet): one 0, without a
         * version, so that "serves no version" is never an absent series. */
        if (e->present && e->on_disk > 0 && (e->unloaded || (e->nv == 0 && e->nrefused == 0)))
            dl_prom_sample(out, "dlserve_model_ready", 0, "model", e->name, "reason",
                           e->unloaded ? "unloaded" : e->reason[0] ? e->reason : "not loaded yet",
                           NULL);
    }
    gen_metrics(r, out, "dlserve_generate_sequences_running",
                "Sequences generating now (a beam counts once), by model and version.",
                generator_running);
    gen_metrics(r, out, "dlserve_generate_requests_waiting",
                "Generate requests waiting for room to start, by model and version.",
                generator_waiting);
    gen_metrics(r, out, "dlserve_generate_cancelled_total",
                "Generations ended early because their client went away, by model and version.",
                generator_cancelled);
    pthread_mutex_unlock(&r->mu);
}

void registry_policy(registry *r, char *buf, size_t len)
{
    pthread_mutex_lock(&r->mu);
    snprintf(buf, len, "%s", r->conf.policy);
    pthread_mutex_unlock(&r->mu);
}

void registry_set_policy(registry *r, const char *policy)
{
    pthread_mutex_lock(&r->mu);
    snprintf(r->conf.policy, sizeof(r->conf.policy), "%s", policy);
    pthread_mutex_unlock(&r->mu);
}

int registry_load_threads(const registry *r)
{
    return r->load_threads;
}

char **registry_names(registry *r)
{
    pthread_mutex_lock(&r->mu);
    char **names = calloc((size_t)r->n + 1, sizeof(char *));
    for (int i = 0; names && i < r->n; i++)
        names[i] = strdup(r->e[i].name);
    pthread_mutex_unlock(&r->mu);
    return names;
}
