/* kafka_out.c: the output stage of the Kafka pipeline: one thread takes the
 * requests the batcher finished (and the records the consumer refused),
 * formats each prediction (records.c), produces it or its dead letter, and
 * serves the producer's delivery reports.
 *
 * The batcher's completion callback only appends to the hand-off list and
 * wakes this thread when it waits, so a batch of completions costs one
 * wake-up. Outputs are written into one reused buffer (librdkafka copies
 * them), so a steady stream allocates no text. */
#define _GNU_SOURCE
#include "serve/kafka/kafka_int.h"
#include "serve/oip/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the hand-off ------------------------------------------------------- */

void kafka_handoff(kafka_srv *k, krec *r)
{
    r->next = NULL;
    pthread_mutex_lock(&k->hand_mu);
    if (k->hand_tail)
        k->hand_tail->next = r;
    else
        k->hand_head = r;
    k->hand_tail = r;
    bool wake = k->out_idle;   /* the first hand-off of a run wakes it, the rest need not */
    k->out_idle = false;
    pthread_mutex_unlock(&k->hand_mu);
    if (wake)
        rd_kafka_queue_yield(k->pq);
}

void kafka_on_infer_done(infer_req *q, void *ctx)
{
    kafka_handoff(ctx, (krec *)((char *)q - offsetof(krec, req)));
}

/* ---- producing ---------------------------------------------------------- */

/* Produces to topic, waiting for room in the producer's queue (that is
 * backpressure, not loss). hdrs is taken. value is copied. */
static rd_kafka_resp_err_t produce(kafka_srv *k, const char *topic, const void *key,
                                   size_t key_len, const void *value, size_t len,
                                   rd_kafka_headers_t *hdrs, void *opaque)
{
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            k->prod, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
            RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            if (e)
                rd_kafka_headers_destroy(hdrs);
            return e;
        }
        rd_kafka_poll(k->prod, 10);
    }
}

/* A header whose value is the decimal text of v. */
static void hdr_add_int(rd_kafka_headers_t *h, const char *name, long long v)
{
    char buf[24], *p = buf + sizeof(buf);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    rd_kafka_header_add(h, name, -1, p, buf + sizeof(buf) - p);
}

/* The source's topic/partition/offset headers. */
static void hdr_source(rd_kafka_headers_t *h, const krec *r)
{
    rd_kafka_header_add(h, "dlserve-source-topic", -1, r->tp->topic, -1);
    hdr_add_int(h, "dlserve-source-partition", r->tp->partition);
    hdr_add_int(h, "dlserve-source-offset", r->offset);
    rd_kafka_timestamp_type_t tt;
    int64_t ts = rd_kafka_message_timestamp(r->msg, &tt);
    if (ts >= 0)
        hdr_add_int(h, "dlserve-source-timestamp", ts);
}

/* The input record's trace context (traceparent, when valid, and its
 * tracestate), into t. */
static void record_trace(rd_kafka_message_t *m, trace_ctx *t)
{
    char parent[TRACE_PARENT_MAX + 1], state[TRACE_STATE_MAX + 1];
    trace_set(t, kafka_header(m, TRACE_PARENT_HEADER, parent, sizeof(parent)), (size_t)-1,
              kafka_header(m, TRACE_STATE_HEADER, state, sizeof(state)), (size_t)-1);
}

/* The output carries the input's trace context on. */
static void hdr_trace(rd_kafka_headers_t *h, const trace_ctx *t)
{
    if (!trace_present(t))
        return;
    rd_kafka_header_add(h, TRACE_PARENT_HEADER, -1, t->parent, -1);
    if (t->state[0])
        rd_kafka_header_add(h, TRACE_STATE_HEADER, -1, t->state, -1);
}

/* The record's state after a produce: done now when producing is enough
 * (the transaction decides), after the delivery report otherwise. A
 * produce error that is not about room is logged, counted and the record
 * passes as done: its fate is in the log and /metrics rather than
 * blocking the partition. */
static rec_state produced(kafka_srv *k, const krec *r, rd_kafka_resp_err_t e, const char *what)
{
    if (e) {
        DL_LOG(DL_LOG_ERR, "kafka", "cannot produce the %s of %s/%d@%lld: %s", what,
               r->tp->topic, (int)r->tp->partition, (long long)r->offset, rd_kafka_err2str(e));
        atomic_fetch_add(&k->c.produce_retries, 1);
        return R_DONE;
    }
    k->txn_dirty = true;
    if (!k->mode->done_on_produce)
        return R_SENT;
    if (r->fault == REC_OK)   /* else counted when delivered */
        atomic_fetch_add(&k->c.outputs, 1);
    return R_DONE;
}

/* Sends the record, unchanged, to the dead-letter topic with headers
 * naming the error and its source. */
static rec_state dead_letter(kafka_srv *k, krec *r, record_fault f, const char *why)
{
    rd_kafka_message_t *m = r->msg;
    rd_kafka_headers_t *in = NULL, *h;
    r->fault = f;
    h = rd_kafka_message_headers(m, &in) == RD_KAFKA_RESP_ERR_NO_ERROR
            ? rd_kafka_headers_copy(in) : rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "dlserve-error", -1, why, -1);
    rd_kafka_header_add(h, "dlserve-error-kind", -1, record_fault_name(f), -1);
    if (r->env.id)
        rd_kafka_header_add(h, "dlserve-id", -1, r->env.id, -1);
    hdr_source(h, r);
    atomic_fetch_add(&k->c.dead[f], 1);
    if (k->dead_logged++ < 100) {
        /* the copied headers carry the trace on; the line names it */
        trace_ctx t;
        char trace_id[33];
        record_trace(m, &t);
        trace_id_of(&t, trace_id);
        dl_log_ids ids = {.request_id = r->env.id, .model = r->env.model[0] ? r->env.model : NULL,
                          .trace_id = trace_id[0] ? trace_id : NULL};
        const dl_log_ids *prev = dl_log_ids_push(&ids);
        DL_LOG(DL_LOG_NOTICE, "kafka", "dead letter %s/%d@%lld (%s): %s%s", r->tp->topic,
               (int)r->tp->partition, (long long)r->offset, record_fault_name(f), why,
               k->dead_logged == 100 ? " (further dead letters are counted, not logged)" : "");
        dl_log_ids_pop(prev);
    }
    rd_kafka_resp_err_t e = produce(k, k->conf.dead_letter_topic, m->key, m->key_len,
                                    m->payload, m->len, h,
                                    k->mode->done_on_produce ? NULL : r);
    return produced(k, r, e, "dead letter");
}

/* Writes r's prediction into b in the configured form; *json_len: its
 * bytes of JSON (binary tensors after them in oip-binary). Results kept
 * with the offsets (redis) are text: oip-binary writes them as oip-json. */
static bool format(kafka_srv *k, const record_out *o, dl_sbuf *b, size_t *json_len)
{
    b->len = 0;   /* reused: its memory stays */
    b->oom = false;
    if (k->conf.output_format == DL_OUTPUT_DLSERVE) {
        bool ok = record_format(o, b);
        *json_len = b->len;
        return ok;
    }
    bool binary = k->conf.output_format == DL_OUTPUT_OIP_BINARY && !k->mode->keeps_results;
    return record_format_oip(o, binary, b, json_len);
}

static rec_state produce_output(kafka_srv *k, krec *r, dl_sbuf *b, size_t json_len);

/* A finished inference: its output to the output topic, or kept in the
 * record when the mode writes results with the offsets. */
static rec_state output(kafka_srv *k, krec *r)
{
    served *sv = r->req.sv;
    record_out o = {
        .id = r->env.id, .model = sv->name, .version = sv->version, .conf = sv->conf,
        .n = r->req.n, .out_dim = sv->out_dim, .y = r->req.out,
        .x = r->req.x, .in_dim = sv->in_dim,
        .topic = r->tp->topic, .partition = r->tp->partition, .offset = r->offset,
    };
    dl_sbuf *b = k->mode->keeps_results ? &r->result : &k->out_text;
    size_t json_len;
    if (!format(k, &o, b, &json_len))
        return dead_letter(k, r, REC_INFERENCE, "out of memory writing the output");
    return produce_output(k, r, b, json_len);
}

/* A generation that ended: its output, or its dead letter. */
static rec_state gen_output(kafka_srv *k, krec *r)
{
    dl_sbuf *b = k->mode->keeps_results ? &r->result : &k->out_text;
    record_fault f;
    dl_err err = {0};
    if (kafka_gen_output(k, r, b, &f, &err) != R_DONE)
        return dead_letter(k, r, f, err.msg);
    return produce_output(k, r, b, b->len);
}

/* Produces r's output b (its first json_len bytes JSON) to the output
 * topic, or keeps it in the record when the mode writes results with the
 * offsets. */
static rec_state produce_output(kafka_srv *k, krec *r, dl_sbuf *b, size_t json_len)
{
    served *sv = r->req.sv;
    if (k->mode->keeps_results)
        return R_DONE;
    if (k->mode->on_output)
        k->mode->on_output(k, r, b->s, b->len);
    rd_kafka_headers_t *h = rd_kafka_headers_new(10);
    trace_ctx t;
    record_trace(r->msg, &t);
    hdr_source(h, r);
    hdr_trace(h, &t);
    rd_kafka_header_add(h, "dlserve-model", -1, sv->name, -1);
    hdr_add_int(h, "dlserve-version", sv->version);
    if (json_len < b->len) {   /* binary tensors follow: say where the JSON ends */
        hdr_add_int(h, OIP_HEADER_JSON_LEN, (long long)json_len);
        rd_kafka_header_add(h, "content-type", -1, "application/octet-stream", -1);
    } else {
        rd_kafka_header_add(h, "content-type", -1, "application/json", -1);
    }
    rd_kafka_resp_err_t e = produce(k, k->conf.output_topic, r->msg->key, r->msg->key_len,
                                    b->s, b->len, h, k->mode->done_on_produce ? NULL : r);
    return produced(k, r, e, "output");
}

/* One request's outcome and timings into the stats, as HTTP's: from the
 * record's consumption to its answer. */
static void account(kafka_srv *k, const krec *r, bool ok)
{
    infer_req_account(k->st, &r->req, r->t_received, ok);
}

/* The record's spans, when traced: from its consumption to its output's
 * (or dead letter's) produce, parented on its traceparent header. */
static void trace_record(kafka_srv *k, const krec *r, bool ok)
{
    trace_ctx t;
    record_trace(r->msg, &t);
    const served *sv = r->req.sv;
    trace_done d = {.ctx = &t, .q = &r->req, .t_received = r->t_received, .model = sv->name,
                    .version = sv->version, .topic = r->tp->topic, .partition = r->tp->partition,
                    .offset = r->offset, .ok = ok};
    tracer_record(k->tr, &d);
}

/* Produces what r needs (nothing when it was forgotten meanwhile), drops
 * what only this use of r needed (its input buffer goes to *back, for the
 * consumer's pool), and hands r back to the consumer thread through its
 * state. Called with out_mu held. */
static void write_record(kafka_srv *k, krec *r, kbuf **back)
{
    rec_state next = R_DONE;
    if (!atomic_load(&r->stale)) {
        if (r->fault != REC_OK) {   /* refused before or by the batcher */
            next = dead_letter(k, r, r->fault, r->req.err.msg);
        } else if (r->gen) {        /* a generation */
            next = gen_output(k, r);
        } else {
            bool ok = r->req.err.code == DL_OK;
            account(k, r, ok);
            /* queued past its deadline: "expired"; a failed batch: "inference" */
            record_fault f = r->req.err.code == DL_ERR_TIMEOUT ? REC_EXPIRED : REC_INFERENCE;
            next = ok ? output(k, r) : dead_letter(k, r, f, r->req.err.msg);
            trace_record(k, r, ok);
        }
    }
    rd_kafka_timestamp_type_t tt;
    r->ts_ms = rd_kafka_message_timestamp(r->msg, &tt);   /* for the delivery report */
    r->ts_type = (int)tt;
    rd_kafka_message_destroy(r->msg);
    r->msg = NULL;
    r->req.out = NULL;   /* the input buffer's, which goes back below */
    kafka_gen_free(r);   /* before the version it ran on */
    served_release(r->req.sv);
    r->req.sv = NULL;
    if (r->in) {
        r->in->next = *back;
        *back = r->in;
        r->in = NULL;
        r->req.x = NULL;
    }
    atomic_store_explicit(&r->state, next, memory_order_release);   /* the last touch */
}

/* ---- delivery reports --------------------------------------------------- */

/* Delivery reports (output thread, from rd_kafka_poll). A failed delivery
 * is produced again: librdkafka has already retried for
 * message.timeout.ms, so this is an outage, and the record must not be
 * lost. Modes done on produce send no opaque: the transaction fails
 * instead. */
void kafka_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    kafka_srv *k = opaque;
    krec *r = m->_private;
    if (!r)
        return;
    if (atomic_load(&r->stale)) {   /* its partition was dropped meanwhile */
        atomic_store_explicit(&r->state, R_DONE, memory_order_release);
        return;
    }
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (r->fault == REC_OK) {
            atomic_fetch_add(&k->c.outputs, 1);
            kafka_latency_observe(k, r->ts_ms, r->ts_type);
        }
        atomic_store_explicit(&r->state, R_DONE, memory_order_release);
        return;
    }
    DL_LOG(DL_LOG_WARNING, "kafka", "delivery to %s failed (%s): producing again",
           rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err));
    atomic_fetch_add(&k->c.produce_retries, 1);
    rd_kafka_headers_t *h = NULL;
    if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
        h = rd_kafka_headers_copy(h);
    else
        h = rd_kafka_headers_new(0);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(rd_kafka_topic_name(m->rkt)), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_VALUE(m->payload, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(h);
        DL_LOG(DL_LOG_ERR, "kafka", "cannot produce again (%s): record %s/%d@%lld stays "
               "uncommitted and is consumed again after a restart", rd_kafka_err2str(e),
               r->tp->topic, (int)r->tp->partition, (long long)r->offset);
    }
}

/* ---- the thread ---------------------------------------------------------- */

void *kafka_out_main(void *arg)
{
    kafka_srv *k = arg;
    pthread_setname_np(pthread_self(), "kafka-out");
    for (;;) {
        pthread_mutex_lock(&k->hand_mu);
        krec *list = k->hand_head;
        k->hand_head = k->hand_tail = NULL;
        bool stop = !list && atomic_load(&k->out_stop);
        k->out_idle = !list;   /* from here a hand-off yields pq: the wait below ends */
        pthread_mutex_unlock(&k->hand_mu);
        if (stop)
            break;
        kbuf *back = NULL;
        if (list) {
            pthread_mutex_lock(&k->out_mu);
            for (krec *r = list, *next; r; r = next) {
                next = r->next;   /* read first: r is the consumer's once written */
                write_record(k, r, &back);
            }
            pthread_mutex_unlock(&k->out_mu);
        }
        /* Delivery reports; when idle, wait for them or the next hand-off. */
        int served = rd_kafka_poll(k->prod, list ? 0 : 100);
        if (list || served > 0) {
            pthread_mutex_lock(&k->hand_mu);
            k->rounds++;
            while (back) {   /* the input buffers, back to the consumer in one go */
                kbuf *b = back;
                back = b->next;
                b->next = k->bufs_back;
                k->bufs_back = b;
            }
            pthread_cond_broadcast(&k->hand_cv);
            pthread_mutex_unlock(&k->hand_mu);
            rd_kafka_queue_yield(k->cq);   /* the consumer releases what is done */
        }
    }
    return NULL;
}
