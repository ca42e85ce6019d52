/* kafka.c: the Kafka service's life (see kafka.h): starts the clients and
 * the two pipeline threads, stops them in order, and keeps the fatal error
 * the stages share. The stages are kafka_in.c, kafka_out.c and
 * kafka_delivery.c; the clients kafka_conf.c; what it shows kafka_stats.c. */
#define _POSIX_C_SOURCE 200809L   /* gethostname, HOST_NAME_MAX */
#include "serve/kafka/kafka_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HOST_NAME_MAX
#define HOST_NAME_MAX 255
#endif

void kafka_set_fatal(kafka_srv *k, const char *why)
{
    pthread_mutex_lock(&k->snap_mu);
    if (!k->fatal[0]) {
        snprintf(k->fatal, sizeof(k->fatal), "%s", why);
        DL_LOG(DL_LOG_ERR, "kafka", "fatal: %s; Kafka intake stops (HTTP keeps serving)", why);
    }
    pthread_mutex_unlock(&k->snap_mu);
}

bool kafka_is_fatal(kafka_srv *k)
{
    pthread_mutex_lock(&k->snap_mu);
    bool f = k->fatal[0] != '\0';
    pthread_mutex_unlock(&k->snap_mu);
    return f;
}

/* [kafka] transactional_id, or by default dlserve-<group_id>-<host>-<http
 * port>: one id a member (two daemons cannot listen on one port of a
 * host), so that the members of a group do not fence each other, and the
 * same id when a member restarts on its host and port (a systemd unit, a
 * StatefulSet pod), whose first transaction then aborts the one its
 * predecessor left open. Zombies are fenced by the group
 * generation (the offsets go with the consumer's group metadata), so an id
 * that changes (port 0) is safe too. */
void kafka_txn_id_init(kafka_srv *k, int http_port)
{
    if (k->conf.transactional_id[0]) {
        snprintf(k->txn_id, sizeof(k->txn_id), "%s", k->conf.transactional_id);
        return;
    }
    char host[HOST_NAME_MAX + 1] = "";
    if (gethostname(host, sizeof(host)) != 0 || !host[0])
        snprintf(host, sizeof(host), "localhost");
    host[HOST_NAME_MAX] = '\0';
    snprintf(k->txn_id, sizeof(k->txn_id), "dlserve-%s-%s-%d", k->conf.group_id, host,
             http_port);
}

static void kafka_free(kafka_srv *k)
{
    if (k->cq)
        rd_kafka_queue_destroy(k->cq);
    if (k->pq)
        rd_kafka_queue_destroy(k->pq);
    if (k->out_rkt)
        rd_kafka_topic_destroy(k->out_rkt);
    if (k->dlq_rkt)
        rd_kafka_topic_destroy(k->dlq_rkt);
    /* closed by the consumer thread (close_consumer), else start-up
     * failed before it ran: the group drops it at the session timeout */
    if (k->cons)
        rd_kafka_destroy_flags(k->cons, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    if (k->prod) {
        if (!k->mode->done_on_produce)
            rd_kafka_flush(k->prod, KAFKA_FLUSH_TIMEOUT_MS);
        rd_kafka_destroy(k->prod);
    }
    if (k->mock)
        rd_kafka_mock_cluster_destroy(k->mock);
    if (k->mock_rk)
        rd_kafka_destroy(k->mock_rk);
#ifdef DL_HAVE_REDIS
    dl_redis_link_free(k->sink);
#endif
    kafka_in_free(k);
    kafka_health_fini(k);
    dl_sbuf_free(&k->out_text);
    json_decref(k->snap_parts);
    pthread_mutex_destroy(&k->out_mu);
    pthread_mutex_destroy(&k->hand_mu);
    pthread_cond_destroy(&k->hand_cv);
    pthread_mutex_destroy(&k->snap_mu);
    free(k);
}

dl_status kafka_start(const kafka_deps *deps, kafka_srv **out, dl_err *err)
{
    *out = NULL;
    const kafka_mode *mode = kafka_mode_of(deps->conf->delivery);
    if (!mode)
        return dl_err_set(err, DL_ERR_UNAVAILABLE, "this dlserve was built without Redis");
    kafka_srv *k = calloc(1, sizeof(*k));
    if (!k)
        return dl_err_set(err, DL_ERR_NOMEM, "kafka");
    k->conf = *deps->conf;
    k->rconf = *deps->redis;
    k->reg = deps->reg;
    k->bat = deps->bat;
    k->st = deps->st;
    k->tr = deps->tr;
    k->mode = mode;
    pthread_mutex_init(&k->out_mu, NULL);
    pthread_mutex_init(&k->hand_mu, NULL);
    pthread_cond_init(&k->hand_cv, NULL);
    pthread_mutex_init(&k->snap_mu, NULL);
    kafka_txn_id_init(k, deps->http_port);
    snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", k->conf.brokers);
    dl_status st = DL_OK;
#ifdef DL_HAVE_REDIS
    if (k->rconf.host[0] && (mode->keeps_results || k->rconf.results))
        st = dl_redis_link_new(&k->rconf, "sink", &k->sink, err);
#else
    if (k->rconf.results)
        st = dl_err_set(err, DL_ERR_UNAVAILABLE, "this dlserve was built without Redis");
#endif
    if (st == DL_OK)
        st = kafka_routes_start(k, err);
    if (st == DL_OK)
        st = kafka_clients_start(k, err);
    size_t idlen = sizeof(k->client_id);
    if (st == DL_OK && rd_kafka_conf_get(rd_kafka_conf(k->cons), "client.id", k->client_id,
                                         &idlen) != RD_KAFKA_CONF_OK)
        k->client_id[0] = '\0';
    /* the output stage first: the consumer hands records to it at once */
    if (st == DL_OK && pthread_create(&k->out_thread, NULL, kafka_out_main, k) != 0)
        st = dl_err_set(err, DL_ERR_NOMEM, "cannot start the Kafka output thread");
    k->out_started = st == DL_OK;
    if (st == DL_OK && pthread_create(&k->in_thread, NULL, kafka_in_main, k) != 0)
        st = dl_err_set(err, DL_ERR_NOMEM, "cannot start the Kafka consumer thread");
    k->in_started = st == DL_OK;
    if (st != DL_OK) {
        kafka_stop(k);
        return st;
    }
    DL_LOG(DL_LOG_NOTICE, "kafka", "consuming %s from %s as group %s, %s delivery%s%s",
           k->conf.input_topics, k->bootstrap, k->conf.group_id, mode->name,
           mode->transactional ? ", transactional id " : "",
           mode->transactional ? k->txn_id : "");
    *out = k;
    return DL_OK;
}

void kafka_stop(kafka_srv *k)
{
    if (!k)
        return;
    /* The consumer settles (its records finish, are delivered and
     * committed) and leaves the group while the output stage still runs;
     * then the output stage stops. */
    if (k->in_started) {
        atomic_store(&k->stop, true);
        rd_kafka_queue_yield(k->cq);
        pthread_join(k->in_thread, NULL);
    }
    if (k->out_started) {
        atomic_store(&k->out_stop, true);
        rd_kafka_queue_yield(k->pq);
        pthread_join(k->out_thread, NULL);
    }
    kafka_free(k);
}
