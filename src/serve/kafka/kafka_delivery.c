/* kafka_delivery.c: the three Kafka delivery modes as tables the pipeline
 * calls through: at-least-once (offsets stored after the delivery report),
 * exactly-once (one transaction holds the outputs, dead letters and
 * consumed offsets) and redis (results and offsets in one MULTI/EXEC).
 * Their hooks run on the consumer thread, except on_output (output thread). */
#define _GNU_SOURCE
#include "serve/kafka/kafka_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Releases the done prefix of every partition; the offsets after them
 * are in tp->done_next. With `store`, they are also stored for the
 * consumer's next commit. */
static void release_done(kafka_srv *k, bool store)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        size_t n = kafka_done_prefix(tp);
        if (!n)
            continue;
        kafka_release(k, tp, n);
        if (!store)
            continue;
        if (!l)
            l = rd_kafka_topic_partition_list_new(8);
        rd_kafka_topic_partition_list_add(l, tp->topic, tp->partition)->offset = tp->done_next;
    }
    if (l) {
        rd_kafka_resp_err_t e = rd_kafka_offsets_store(k->cons, l);
        if (e)
            DL_LOG(DL_LOG_WARNING, "kafka", "storing offsets: %s", rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_destroy(l);
    }
}

/* ---- at-least-once ------------------------------------------------------ */

#ifdef DL_HAVE_REDIS
/* With [redis] results, the result also goes to Redis, best effort (a
 * failure is counted; the Kafka output is the record). */
static void alo_on_output(kafka_srv *k, const krec *r, const char *text, size_t len)
{
    if (!k->sink)
        return;
    dl_redis_result res = { r->env.id, text, len };
    dl_err err = {0};
    if (dl_redis_commit(k->sink, k->conf.group_id, &res, 1, NULL, 0, k->rconf.result_ttl_s,
                        &err) != DL_OK)
        atomic_fetch_add(&k->c.sink_errors, 1);
}
#endif

static void alo_advance(kafka_srv *k)
{
    release_done(k, true);
}

/* librdkafka commits the stored offsets every commit_interval_ms; before a
 * revoke and at shutdown they are committed now (synchronously; on_commit
 * records the result). */
static void alo_commit(kafka_srv *k, bool now)
{
    if (!now)
        return;
    rd_kafka_resp_err_t e = rd_kafka_commit(k->cons, NULL, 0);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
        DL_LOG(DL_LOG_WARNING, "kafka", "commit: %s", rd_kafka_err2str(e));
}

static const kafka_mode mode_alo = {
    .name = "at-least-once",
    .auto_commit = true,
#ifdef DL_HAVE_REDIS
    .on_output = alo_on_output,
#endif
    .advance = alo_advance,
    .commit = alo_commit,
};

/* ---- exactly-once -------------------------------------------------------- */

static void txn_begin(kafka_srv *k)
{
    rd_kafka_error_t *e = rd_kafka_begin_transaction(k->prod);
    if (e) {
        kafka_set_fatal(k, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return;
    }
    k->txn_open = true;
    k->txn_dirty = false;
    DL_LOG(DL_LOG_DEBUG, "kafka", "transaction begun");
}

static dl_status eos_start(kafka_srv *k, dl_err *err)
{
    rd_kafka_error_t *e = rd_kafka_init_transactions(k->prod, KAFKA_TXN_TIMEOUT_MS);
    if (e) {
        dl_status st = dl_err_set(err, DL_ERR_IO, "Kafka transactions (%s): %s", k->txn_id,
                                  rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return st;
    }
    txn_begin(k);
    return DL_OK;
}

/* After an aborted transaction: forget every record and go back to the
 * committed offsets, so the aborted outputs are produced again. Called
 * with out_mu held. */
static void rewind_to_committed(kafka_srv *k)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        kafka_tp_drop(k, tp);
        if (tp->assigned)
            rd_kafka_topic_partition_list_add(l, tp->topic, tp->partition);
    }
    rd_kafka_resp_err_t e = rd_kafka_committed(k->cons, l, KAFKA_TXN_TIMEOUT_MS);
    for (int i = 0; e == RD_KAFKA_RESP_ERR_NO_ERROR && i < l->cnt; i++) {
        tpart *tp = kafka_tp_find(k, l->elems[i].topic, l->elems[i].partition);
        if (l->elems[i].offset < 0)
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
        tp->next_expected = l->elems[i].offset < 0 ? -1 : l->elems[i].offset;
        tp->done_next = tp->committed = tp->next_expected;
    }
    rd_kafka_error_t *se = e ? NULL : rd_kafka_seek_partitions(k->cons, l, KAFKA_TXN_TIMEOUT_MS);
    if (e || se) {
        char why[256];
        snprintf(why, sizeof(why), "cannot rewind to the committed offsets: %s",
                 e ? rd_kafka_err2str(e) : rd_kafka_error_string(se));
        kafka_set_fatal(k, why);
    } else {
        DL_LOG(DL_LOG_NOTICE, "kafka", "rewound %d partitions to their committed offsets",
               l->cnt);
    }
    if (se)
        rd_kafka_error_destroy(se);
    rd_kafka_topic_partition_list_destroy(l);
}

/* A failed transactional call: abort and rewind when the transaction
 * can be aborted, stop intake when the producer is fenced or broken. */
static void txn_failed(kafka_srv *k, rd_kafka_error_t *e, const char *what)
{
    if (rd_kafka_error_is_fatal(e)) {
        char why[256];
        snprintf(why, sizeof(why), "%s: %s", what, rd_kafka_error_string(e));
        kafka_set_fatal(k, why);
    } else if (rd_kafka_error_txn_requires_abort(e)) {
        DL_LOG(DL_LOG_WARNING, "kafka", "%s: %s: aborting the transaction", what,
               rd_kafka_error_string(e));
        rd_kafka_error_t *ae = rd_kafka_abort_transaction(k->prod, KAFKA_TXN_TIMEOUT_MS);
        k->txn_open = false;
        atomic_fetch_add(&k->c.txn_aborts, 1);
        if (ae) {
            char why[256];
            snprintf(why, sizeof(why), "abort_transaction: %s", rd_kafka_error_string(ae));
            kafka_set_fatal(k, why);
            rd_kafka_error_destroy(ae);
        } else {
            DL_LOG(DL_LOG_NOTICE, "kafka", "transaction aborted");
            rewind_to_committed(k);
            txn_begin(k);
        }
    } else {
        DL_LOG(DL_LOG_WARNING, "kafka", "%s: %s (retrying)", what, rd_kafka_error_string(e));
    }
    rd_kafka_error_destroy(e);
}

/* Commits the open transaction with the offsets after the done prefixes,
 * then begins the next one. Called with out_mu held: nothing is produced
 * meanwhile, so the transaction holds exactly what was produced before. */
static void txn_commit(kafka_srv *k)
{
    if (!k->txn_open || !k->txn_dirty)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        if (tp->assigned && tp->done_next > tp->committed)
            rd_kafka_topic_partition_list_add(l, tp->topic, tp->partition)->offset =
                tp->done_next;
    }
    rd_kafka_error_t *e = NULL;
    if (l->cnt) {
        rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata(k->cons);
        e = rd_kafka_send_offsets_to_transaction(k->prod, l, md, KAFKA_TXN_TIMEOUT_MS);
        rd_kafka_consumer_group_metadata_destroy(md);
    }
    if (e) {
        rd_kafka_topic_partition_list_destroy(l);
        txn_failed(k, e, "send_offsets_to_transaction");
        return;
    }
    if ((e = rd_kafka_commit_transaction(k->prod, KAFKA_TXN_TIMEOUT_MS))) {
        rd_kafka_topic_partition_list_destroy(l);
        txn_failed(k, e, "commit_transaction");
        return;
    }
    for (int i = 0; i < l->cnt; i++)
        kafka_tp_find(k, l->elems[i].topic, l->elems[i].partition)->committed =
            l->elems[i].offset;
    DL_LOG(DL_LOG_DEBUG, "kafka", "transaction committed with the offsets of %d partitions",
           l->cnt);
    rd_kafka_topic_partition_list_destroy(l);
    atomic_fetch_add(&k->c.txn_commits, 1);
    k->txn_open = false;
    txn_begin(k);
}

static void eos_advance(kafka_srv *k)
{
    release_done(k, false);   /* their offsets go with the next transaction */
}

/* Every commit_interval_ms (at once before a revoke and at shutdown). */
static void eos_commit(kafka_srv *k, bool now)
{
    double t = dl_time_now();
    if (!now && t - k->last_commit < k->conf.commit_interval_ms * 1e-3)
        return;
    pthread_mutex_lock(&k->out_mu);
    eos_advance(k);
    txn_commit(k);
    pthread_mutex_unlock(&k->out_mu);
    k->last_commit = t;
}

static const kafka_mode mode_eos = {
    .name = "exactly-once",
    .transactional = true,
    .done_on_produce = true,
    .start = eos_start,
    .advance = eos_advance,
    .commit = eos_commit,
};

/* ---- redis ---------------------------------------------------------------- */

#ifdef DL_HAVE_REDIS
/* Start each partition at the offset stored with the results (waits for
 * Redis: a wrong start would write results twice). */
static void redis_position(kafka_srv *k, rd_kafka_topic_partition_list_t *l)
{
    for (int i = 0; i < l->cnt; i++) {
        int64_t next = -1;
        dl_err err = {0};
        for (int tries = 0; !atomic_load(&k->stop); tries++) {
            if (dl_redis_offset_get(k->sink, k->conf.group_id, l->elems[i].topic,
                                    l->elems[i].partition, &next, &err) == DL_OK)
                break;
            if (tries == 0)
                DL_LOG(DL_LOG_WARNING, "kafka", "waiting for Redis to read the offset of "
                       "%s/%d: %s", l->elems[i].topic, (int)l->elems[i].partition, err.msg);
            struct timespec ts = { 0, 100000000L };
            nanosleep(&ts, NULL);
        }
        if (next >= 0)
            l->elems[i].offset = next;
    }
}

/* The results of the done prefixes and the offsets after them go in one
 * MULTI/EXEC; only then are the records released. */
static void redis_advance(kafka_srv *k)
{
    size_t nres = 0, noffs = 0, cap = 0;
    for (int i = 0; i < k->ntps; i++)
        cap += k->tps[i]->count;
    if (cap == 0)
        return;
    dl_redis_result *res = malloc(cap * sizeof(*res));
    dl_redis_offset *offs = malloc((size_t)k->ntps * sizeof(*offs));
    size_t *cnt = calloc((size_t)k->ntps, sizeof(*cnt));
    if (!res || !offs || !cnt)
        goto out;
    for (int i = 0; i < k->ntps; i++) {
        tpart *tp = k->tps[i];
        cnt[i] = kafka_done_prefix(tp);
        for (size_t j = 0; j < cnt[i]; j++) {
            krec *r = tp_at(tp, j);
            if (r->result.len)   /* dead letters have none */
                res[nres++] = (dl_redis_result){ r->env.id, r->result.s, r->result.len };
        }
        if (cnt[i])
            offs[noffs++] = (dl_redis_offset){ tp->topic, tp->partition,
                                               tp_at(tp, cnt[i] - 1)->offset + 1 };
    }
    if (noffs == 0)
        goto out;
    dl_err err = {0};
    if (dl_redis_commit(k->sink, k->conf.group_id, res, (int)nres, offs, (int)noffs,
                        k->rconf.result_ttl_s, &err) != DL_OK) {
        atomic_fetch_add(&k->c.redis_errors, 1);
        atomic_store(&k->c.redis_pending, (long long)nres);
        goto out;   /* kept: written at a later try */
    }
    atomic_store(&k->c.redis_pending, 0);
    atomic_fetch_add(&k->c.redis_writes, 1);
    atomic_fetch_add(&k->c.outputs, (long long)nres);
    for (int i = 0; i < k->ntps; i++) {
        if (!cnt[i])
            continue;
        kafka_release(k, k->tps[i], cnt[i]);
        k->tps[i]->committed = k->tps[i]->done_next;
    }
out:
    free(res);
    free(offs);
    free(cnt);
}

/* Nothing to do: redis_advance writes the offsets with the results. */
static void redis_commit(kafka_srv *k, bool now)
{
    (void)k;
    (void)now;
}

static const kafka_mode mode_redis = {
    .name = "redis",
    .keeps_results = true,
    .position = redis_position,
    .advance = redis_advance,
    .commit = redis_commit,
};
#endif

const kafka_mode *kafka_mode_of(dl_delivery d)
{
    switch (d) {
    case DL_DELIVERY_AT_LEAST_ONCE: return &mode_alo;
    case DL_DELIVERY_EXACTLY_ONCE:  return &mode_eos;
#ifdef DL_HAVE_REDIS
    case DL_DELIVERY_REDIS:         return &mode_redis;
#endif
    default:                        return NULL;
    }
}
