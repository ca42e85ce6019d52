/* component_kafka.c: Kafka as a daemon component: kafka.h's service
 * started, stopped (its records in flight answered and committed), and
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

static dl_status kafka_comp_start(component_env *env, void **state, dl_err *err)
{
    *state = NULL;
    kafka_comp *kc = calloc(1, sizeof(*kc));
    if (!kc)
        return dl_err_set(err, DL_ERR_NOMEM, "kafka component");
    kc->env = env;
    pthread_mutex_init(&kc->mu, NULL);
    kafka_deps kd = { .conf = &env->conf->kafka, .redis = &env->conf->redis, .reg = env->reg,
                      .bat = env->bat, .st = env->st, .tr = env->tracer,
                      .http_port = env->http_port };
    dl_status st = kafka_start(&kd, &kc->k, err);
    if (st != DL_OK) {
        kafka_comp_free(kc);
        return st;
    }
    lend_sink(kc, kc->k);
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
    .free = kafka_comp_free,
    .status = kafka_comp_status,
    .metrics = kafka_comp_metrics,
};
