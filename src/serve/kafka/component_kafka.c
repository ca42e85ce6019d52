/* component_kafka.c: Kafka as a daemon component: kafka.h's service
 * started, stopped (its records in flight answered and committed),
 * restarted on new clients when SIGHUP changed its settings, and
 * shown in /status and /metrics; its Redis result sink is lent to the Redis
 * component's reports. */
#include "serve/component.h"
#include "serve/kafka/kafka.h"

#include <stdlib.h>

typedef struct kafka_comp {
    component_env  *env;
    pthread_mutex_t mu;     /* k against stop, which frees it */
    kafka_srv      *k;      /* NULL once stopped */
} kafka_comp;

/* The sink's Redis link (or NULL) for the Redis component's reports. */
static void lend_sink(kafka_comp *kc, kafka_srv *k)
{
    pthread_mutex_lock(&kc->env->mu);
#ifdef DL_HAVE_REDIS
    kc->env->redis_sink = k ? kafka_redis_link(k) : NULL;
#else
    (void)k;
#endif
    pthread_mutex_unlock(&kc->env->mu);
}

static void kafka_comp_free(void *state)
{
    kafka_comp *kc = state;
    if (!kc)
        return;
    pthread_mutex_destroy(&kc->mu);
    free(kc);
}

/* A new service on env's settings, lent to status and metrics. */
static dl_status start_service(kafka_comp *kc, dl_err *err)
{
    component_env *env = kc->env;
    kafka_deps kd = { .conf = &env->conf->kafka, .redis = &env->conf->redis, .reg = env->reg,
                      .bat = env->bat, .st = env->st, .tr = env->tracer,
                      .http_port = env->http_port };
    kafka_srv *k = NULL;
    dl_status st = kafka_start(&kd, &k, err);
    if (st != DL_OK)
        return st;
    pthread_mutex_lock(&kc->mu);
    kc->k = k;
    pthread_mutex_unlock(&kc->mu);
    lend_sink(kc, k);
    return DL_OK;
}

static dl_status kafka_comp_start(component_env *env, void **state, dl_err *err)
{
    *state = NULL;
    kafka_comp *kc = calloc(1, sizeof(*kc));
    if (!kc)
        return dl_err_set(err, DL_ERR_NOMEM, "kafka component");
    kc->env = env;
    pthread_mutex_init(&kc->mu, NULL);
    dl_status st = start_service(kc, err);
    if (st != DL_OK) {
        kafka_comp_free(kc);
        return st;
    }
    *state = kc;
    return DL_OK;
}

static void kafka_comp_stop(void *state)
{
    kafka_comp *kc = state;
    lend_sink(kc, NULL);            /* kafka_stop frees the sink */
    pthread_mutex_lock(&kc->mu);
    kafka_srv *k = kc->k;
    kc->k = NULL;
    pthread_mutex_unlock(&kc->mu);
    kafka_stop(k);                  /* its records in flight finish and are committed */
}

/* New clients on new settings (a rotated ${file:} secret, other brokers):
 * the old ones stop as at shutdown (records handed to the batcher are
 * answered, delivered and committed; those not yet handed on stay
 * uncommitted) and leave the group, so that the new consumer resumes from
 * the committed offsets: every record answered once in each delivery
 * mode. The batcher keeps serving HTTP meanwhile. */
static dl_status kafka_comp_restart(void *state, dl_err *err)
{
    kafka_comp *kc = state;
    kafka_comp_stop(kc);
    if (!component_kafka_wanted(kc->env->conf)) {
        DL_LOG(DL_LOG_NOTICE, "kafka", "stopped: the configuration names no brokers");
        return DL_OK;
    }
    dl_status st = start_service(kc, err);
    if (st == DL_OK)
        DL_LOG(DL_LOG_NOTICE, "kafka", "clients recreated with the reloaded configuration");
    return st;
}

static json_t *kafka_comp_status(void *state)
{
    kafka_comp *kc = state;
    pthread_mutex_lock(&kc->mu);
    json_t *j = kc->k ? kafka_status(kc->k) : NULL;
    pthread_mutex_unlock(&kc->mu);
    return j;
}

static void kafka_comp_metrics(void *state, dl_sbuf *out)
{
    kafka_comp *kc = state;
    pthread_mutex_lock(&kc->mu);
    if (kc->k)
        kafka_metrics(kc->k, out);
    pthread_mutex_unlock(&kc->mu);
}

const component component_kafka = {
    .name = "kafka",
    .wanted = component_kafka_wanted,
    .start = kafka_comp_start,
    .stop = kafka_comp_stop,
    .restart = kafka_comp_restart,
    .free = kafka_comp_free,
    .status = kafka_comp_status,
    .metrics = kafka_comp_metrics,
};
