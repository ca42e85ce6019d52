/* kafka_health.c: which brokers the consumer reaches, from librdkafka's
 * statistics (each broker's connection state) and error callbacks (all
 * brokers down); one log line per transition between none and some. */
#define _GNU_SOURCE   /* memmem */
#include "serve/kafka/kafka_int.h"

#include <string.h>

/* A broker counts as reachable while its connection is up. */
static bool state_is_up(const char *state)
{
    return strcmp(state, "UP") == 0 || strcmp(state, "UPDATE") == 0;
}

/* Logs a change between "no broker reachable" and "some"; consumer thread
 * (the callbacks that call it are served there), with snap_mu held. */
static void note_transition(kafka_srv *k, int up, int known)
{
    bool down = known > 0 && up == 0;
    if (down == k->health.all_down)
        return;
    k->health.all_down = down;
    atomic_store(&k->c.brokers_down, down);
    if (down) {
        atomic_fetch_add(&k->c.broker_outages, 1);
        DL_LOG(DL_LOG_WARNING, "kafka", "no Kafka broker reachable (%d known); records wait, "
               "nothing is lost", known);
    } else {
        DL_LOG(DL_LOG_NOTICE, "kafka", "Kafka brokers reachable again (%d of %d up)", up, known);
    }
}

/* The statistics' "brokers" object (new), parsed alone: the whole
 * document also holds every partition's statistics, and parsing it all
 * each second was most of an idle consumer thread's CPU (2 ms a second
 * with 64 partitions). NULL when there is none. */
static json_t *stats_brokers(const char *json, size_t len)
{
    static const char key[] = "\"brokers\":";
    const char *p = memmem(json, len, key, sizeof(key) - 1);
    if (!p)
        return NULL;
    p += sizeof(key) - 1;
    json_error_t jerr;
    json_t *brokers = json_loadb(p, len - (size_t)(p - json), JSON_DISABLE_EOF_CHECK, &jerr);
    if (!json_is_object(brokers)) {
        json_decref(brokers);
        return NULL;
    }
    return brokers;
}

int kafka_health_on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    kafka_srv *k = opaque;
    json_t *brokers = stats_brokers(json, len);
    if (!brokers)
        return 0;
    /* Brokers learned from metadata (node id >= 0); the bootstrap entries
     * stand in until there are any. Internal and logical ones are not
     * connections. */
    json_t *learned = json_array(), *boot = json_array();
    int up_learned = 0, up_boot = 0;
    const char *name;
    json_t *b;
    json_object_foreach(brokers, name, b) {
        const char *state = json_string_value(json_object_get(b, "state"));
        const char *source = json_string_value(json_object_get(b, "source"));
        json_int_t id = json_integer_value(json_object_get(b, "nodeid"));
        if (!state || (source && (strcmp(source, "internal") == 0 ||
                                  strcmp(source, "logical") == 0)))
            continue;
        bool up = state_is_up(state);
        json_t *row = json_pack("{s:s, s:I, s:s, s:b}", "name", name, "id", id, "state", state,
                                "up", up);
        json_array_append_new(id >= 0 ? learned : boot, row);
        if (id >= 0)
            up_learned += up;
        else
            up_boot += up;
    }
    json_decref(brokers);
    bool use_learned = json_array_size(learned) > 0;
    json_t *rows = use_learned ? learned : boot;
    json_decref(use_learned ? boot : learned);
    int up = use_learned ? up_learned : up_boot;
    int known = (int)json_array_size(rows);

    pthread_mutex_lock(&k->snap_mu);
    json_decref(k->health.brokers);
    k->health.brokers = rows;
    atomic_store(&k->c.brokers_up, up);
    atomic_store(&k->c.brokers_known, known);
    note_transition(k, up, known);
    pthread_mutex_unlock(&k->snap_mu);
    return 0;   /* librdkafka frees json */
}

bool kafka_health_on_error(kafka_srv *k, int e)
{
    if (e != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN && e != RD_KAFKA_RESP_ERR__TRANSPORT)
        return false;
    /* A lost connection is retried by librdkafka and shows in the next
     * statistics; only "all down" changes the state at once. */
    if (e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        pthread_mutex_lock(&k->snap_mu);
        int known = (int)atomic_load(&k->c.brokers_known);
        atomic_store(&k->c.brokers_up, 0);
        json_t *row;
        size_t i;
        json_array_foreach(k->health.brokers, i, row)
            json_object_set_new(row, "up", json_false());
        note_transition(k, 0, known > 0 ? known : 1);
        pthread_mutex_unlock(&k->snap_mu);
    }
    return true;
}

void kafka_health_status(kafka_srv *k, json_t *o)
{
    pthread_mutex_lock(&k->snap_mu);
    json_object_set_new(o, "brokers_up", json_integer(atomic_load(&k->c.brokers_up)));
    json_object_set_new(o, "brokers_reachable", json_boolean(!k->health.all_down));
    json_object_set_new(o, "broker_outages", json_integer(atomic_load(&k->c.broker_outages)));
    json_object_set_new(o, "brokers", k->health.brokers ? json_deep_copy(k->health.brokers)
                                                        : json_array());
    pthread_mutex_unlock(&k->snap_mu);
}

void kafka_health_metrics(kafka_srv *k, dl_sbuf *b)
{
    dl_prom_family(b, "dlserve_kafka_brokers_up", "gauge",
                   "Brokers the consumer is connected to (from librdkafka's statistics).");
    dl_prom_sample(b, "dlserve_kafka_brokers_up", (double)atomic_load(&k->c.brokers_up), NULL);
    dl_prom_family(b, "dlserve_kafka_broker_outages_total", "counter",
                   "Times no broker was reachable.");
    dl_prom_sample(b, "dlserve_kafka_broker_outages_total",
                   (double)atomic_load(&k->c.broker_outages), NULL);
}

bool kafka_health_all_down(kafka_srv *k)
{
    return atomic_load(&k->c.brokers_down);
}

void kafka_health_fini(kafka_srv *k)
{
    json_decref(k->health.brokers);
    k->health.brokers = NULL;
}
