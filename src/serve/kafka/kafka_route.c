/* kafka_route.c: which model a Kafka record that names none goes to: its
 * topic's (input_topics = topic:model), else one decided once and logged. */
#include "serve/kafka/kafka_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names of the models served now, comma-separated, into buf; the
 * number of them. */
static int served_names(registry *reg, char *buf, size_t cap)
{
    char **names = registry_names(reg);
    int count = 0;
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; names && names[i]; i++) {
        served *sv = NULL;
        if (registry_acquire(reg, names[i], 0, &sv, NULL) == DL_OK && off < cap) {
            int w = snprintf(buf + off, cap - off, "%s%s", count ? ", " : "", names[i]);
            off += w > 0 ? (size_t)w : 0;
        }
        count += sv != NULL;
        served_release(sv);
        free(names[i]);
    }
    free(names);
    return count;
}

/* DL_OK when model is served; else why not, naming what is. */
static dl_status check_served(kafka_srv *k, const char *what, const char *model, dl_err *err)
{
    served *sv = NULL;
    dl_err why = {0};
    if (registry_acquire(k->reg, model, 0, &sv, &why) == DL_OK) {
        served_release(sv);
        return DL_OK;
    }
    char names[512];
    int n = served_names(k->reg, names, sizeof(names));
    return dl_err_set(err, DL_ERR_INVALID, "[kafka] %s: model '%s' is not served (%s); "
                      "models served: %s", what, model, why.msg, n ? names : "none");
}

/* Whether some input topic has no model of its own. */
static bool some_topic_without_model(const kafka_srv *k)
{
    for (int i = 0; i < k->ntopics; i++)
        if (!k->topics[i].model[0])
            return true;
    return false;
}

/* Fixes def_model for good once models are served (or default_model is
 * set) and logs it. */
static void decide_default(kafka_srv *k)
{
    char names[512];
    int n = served_names(k->reg, names, sizeof(names));
    if (n == 0)
        return;
    k->def_decided = true;
    if (!some_topic_without_model(k))
        return;
    if (n == 1) {
        dl_strlcpy(k->def_model, names, sizeof(k->def_model));
        DL_LOG(DL_LOG_NOTICE, "kafka", "records that name no model go to '%s', the one model "
               "served; models added later do not change this", k->def_model);
    } else {
        DL_LOG(DL_LOG_WARNING, "kafka", "%d models served (%s) and no [kafka] default_model: "
               "records that name no model go to the dead-letter topic", n, names);
    }
}

dl_status kafka_routes_start(kafka_srv *k, dl_err *err)
{
    dl_status st = dl_kafka_topics_parse(k->conf.input_topics, k->topics, DL_KAFKA_TOPICS_MAX,
                                         &k->ntopics, err);
    for (int i = 0; st == DL_OK && i < k->ntopics; i++) {
        if (!k->topics[i].model[0])
            continue;
        char what[300];
        snprintf(what, sizeof(what), "input_topics %s:%s", k->topics[i].topic,
                 k->topics[i].model);
        st = check_served(k, what, k->topics[i].model, err);
        if (st == DL_OK)
            DL_LOG(DL_LOG_NOTICE, "kafka", "records from topic %s that name no model go to "
                   "'%s'", k->topics[i].topic, k->topics[i].model);
    }
    if (st != DL_OK)
        return st;
    if (k->conf.default_model[0]) {
        if ((st = check_served(k, "default_model", k->conf.default_model, err)) != DL_OK)
            return st;
        snprintf(k->def_model, sizeof(k->def_model), "%s", k->conf.default_model);
        k->def_decided = true;
        if (some_topic_without_model(k))
            DL_LOG(DL_LOG_NOTICE, "kafka", "records that name no model go to '%s' "
                   "([kafka] default_model)", k->def_model);
        return DL_OK;
    }
    decide_default(k);
    if (!k->def_decided)
        DL_LOG(DL_LOG_NOTICE, "kafka", "no model served yet: records that name no model go "
               "to the dead-letter topic until models come (if one comes first: to it)");
    return DL_OK;
}

void kafka_routes_tick(kafka_srv *k)
{
    if (!k->def_decided)
        decide_default(k);
}

const char *kafka_route_model(const kafka_srv *k, const char *topic)
{
    for (int i = 0; i < k->ntopics; i++)
        if (k->topics[i].model[0] && !strcmp(k->topics[i].topic, topic))
            return k->topics[i].model;
    return k->def_model;
}
