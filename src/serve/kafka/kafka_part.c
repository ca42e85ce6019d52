/* kafka_part.c: the consumer's partitions: each assigned partition's state
 * and the ring of its records in offset order (kafka_int.h says who may
 * touch them), and reading a record's headers, for the consumer and the
 * output stage. */
#include "serve/kafka/kafka_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- partitions ------------------------------------------------------- */

tpart *kafka_tp_find(kafka_srv *k, const char *topic, int32_t partition)
{
    for (int i = 0; i < k->ntps; i++)
        if (k->tps[i]->partition == partition && strcmp(k->tps[i]->topic, topic) == 0)
            return k->tps[i];
    return NULL;
}

tpart *kafka_tp_get(kafka_srv *k, const char *topic, int32_t partition)
{
    tpart *tp = kafka_tp_find(k, topic, partition);
    if (tp)
        return tp;
    tpart **n = realloc(k->tps, (size_t)(k->ntps + 1) * sizeof(*n));
    if (!n)
        return NULL;
    k->tps = n;
    if (!(tp = calloc(1, sizeof(*tp))))
        return NULL;
    snprintf(tp->topic, sizeof(tp->topic), "%s", topic);
    tp->partition = partition;
    tp->next_expected = tp->done_next = tp->committed = -1;
    k->tps[k->ntps++] = tp;
    return tp;
}

bool kafka_tp_push(tpart *tp, krec *r)
{
    if (tp->count == tp->cap) {
        size_t cap = tp->cap ? tp->cap * 2 : 256;
        krec **n = malloc(cap * sizeof(*n));
        if (!n)
            return false;
        for (size_t i = 0; i < tp->count; i++)
            n[i] = tp_at(tp, i);
        free(tp->ring);
        tp->ring = n;
        tp->cap = cap;
        tp->head = 0;
    }
    tp->ring[(tp->head + tp->count++) % tp->cap] = r;
    return true;
}

krec *kafka_tp_pop(tpart *tp)
{
    krec *r = tp->ring[tp->head];
    tp->head = (tp->head + 1) % tp->cap;
    tp->count--;
    return r;
}

size_t kafka_done_prefix(const tpart *tp)
{
    size_t n = 0;
    while (n < tp->count && rec_state_of(tp_at(tp, n)) == R_DONE)
        n++;
    return n;
}

/* ---- record headers ----------------------------------------------------- */

const char *kafka_header(rd_kafka_message_t *m, const char *name, char *buf, size_t cap)
{
    rd_kafka_headers_t *h;
    const void *v;
    size_t len;
    if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(h, name, &v, &len) != RD_KAFKA_RESP_ERR_NO_ERROR || !v ||
        len >= cap)
        return NULL;
    memcpy(buf, v, len);
    buf[len] = '\0';
    return buf;
}
