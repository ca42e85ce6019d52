/* perf.c: dlserve-perf, a load generator for dlserve (and any server of
 * the Open Inference Protocol) after Triton's perf_analyzer: throughput
 * and latency percentiles at each level of a concurrency or request-rate
 * sweep, over HTTP (JSON, or the binary tensor data extension), gRPC or
 * Kafka.
 * `dlserve-perf --help` lists the options; docs/benchmarks.md shows use.
 *
 * Each level runs measurement windows until the last three agree within
 * --stability-percentage (throughput and mean latency), at most
 * --max-trials of them; those three are reported together. */
#define _GNU_SOURCE
#include "http_load.h"
#include "perf.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADERS 16
#define MAX_LEVELS  1000
#define STABLE_RUN  3       /* windows in a row that must agree */

typedef enum { PROTO_HTTP, PROTO_GRPC, PROTO_KAFKA } proto;

typedef struct opts {
    const char *model, *url, *input_data, *csv;
    const char *headers[MAX_HEADERS];
    int         nheaders;
    proto       protocol;
    bool        binary;
    bool        rate_mode;
    double      range[3];        /* start, end, step */
    int         batch;
    double      interval_ms;
    int         max_trials;
    double      stability;       /* percent */
    int         connections;     /* HTTP open loop; gRPC channels */
    bool        have_connections;
    int         threads;         /* gRPC */
    perf_kafka_opts kafka;
} opts;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlserve-perf: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: dlserve-perf -m MODEL [options]\n"
"\n"
"Measures throughput and latency percentiles of MODEL's inference at each\n"
"level of a concurrency or request-rate sweep.\n"
"\n"
"  -m, --model NAME             the model (required)\n"
"  -u, --url URL                HTTP: HOST:PORT or http://HOST:PORT (localhost:8000);\n"
"                               gRPC: HOST:PORT (localhost:8001); Kafka: the bootstrap\n"
"                               brokers (localhost:9092)\n"
"  -i, --protocol P             http (default), grpc (ModelInfer, inputs in\n"
"                               raw_input_contents) or kafka\n"
"      --binary                 HTTP: the binary tensor data extension (inputs and\n"
"                               outputs as raw bytes, Inference-Header-Content-Length)\n"
"  -b, --batch-size N           samples a request (1): the first dimension of each input\n"
"      --input-data D           random (default) or zero: inputs generated from the\n"
"                               model's metadata (GET /v2/models/MODEL, gRPC's\n"
"                               ModelMetadata; ids 0 or 1);\n"
"                               or a FILE holding an infer request body (JSON, sent as\n"
"                               is; converted with --binary and for gRPC); -b does not\n"
"                               apply to it\n"
"      --concurrency-range S[:E[:STEP]]\n"
"                               closed loop: N requests in flight, N = S, S+STEP..E\n"
"                               (default 1)\n"
"      --request-rate-range S[:E[:STEP]]\n"
"                               open loop: requests due at S, S+STEP..E a second, each\n"
"                               one's latency from when it was due\n"
"      --connections N          HTTP open loop: keep-alive connections (32); a request\n"
"                               waits for a free one, and the wait counts; gRPC: the\n"
"                               channels, each one HTTP/2 connection (1)\n"
"  -p, --measurement-interval MS\n"
"                               a measurement window, milliseconds (5000)\n"
"      --max-trials N           windows at most a level (10)\n"
"      --stability-percentage P the last 3 windows' throughput and mean latency must\n"
"                               lie within P%% of their mean (10)\n"
"  -f FILE                      also write the results as CSV\n"
"      --threads N              gRPC: threads polling the calls' completion queues (1)\n"
"  -H 'Name: value'             an extra HTTP header, gRPC metadata (repeatable)\n"
"      --input-topic T          Kafka: the daemon's input topic (dlserve-in)\n"
"      --output-topic T         Kafka: its output topic (dlserve-out)\n"
"      --dead-letter-topic T    Kafka: its dead-letter topic, counted as errors\n"
"                               (dlserve-dead-letters)\n"
"  -h, --help                   this text\n"
"\n"
"Exit status: 0; 1 when the server cannot be reached, refuses the request, or\n"
"every request of a level failed; 2 on a usage error.\n");
}

static void parse_range(const char *s, double r[3], bool integer)
{
    char *end;
    r[0] = strtod(s, &end);
    r[1] = r[0];
    r[2] = 1;
    if (*end == ':')
        r[1] = strtod(end + 1, &end);
    if (*end == ':')
        r[2] = strtod(end + 1, &end);
    bool ints = !integer || (r[0] == floor(r[0]) && r[1] == floor(r[1]) && r[2] == floor(r[2]));
    if (*end || !(r[0] > 0) || r[1] < r[0] || !(r[2] > 0) || !ints) {
        fprintf(stderr, "dlserve-perf: bad range %s (want START[:END[:STEP]], "
                "0 < START <= END%s)\n", s, integer ? ", whole numbers" : "");
        exit(2);
    }
}

static double num_arg(const char *name, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "dlserve-perf: %s %s: want a number in %g..%g\n", name, s, lo, hi);
        exit(2);
    }
    return v;
}

static void parse_opts(int argc, char **argv, opts *o)
{
    enum { O_BINARY = 256, O_INPUT, O_CRANGE, O_RRANGE, O_CONNS, O_TRIALS, O_STAB, O_ITOPIC,
           O_OTOPIC, O_DTOPIC, O_THREADS };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},
        {"url", required_argument, NULL, 'u'},
        {"protocol", required_argument, NULL, 'i'},
        {"binary", no_argument, NULL, O_BINARY},
        {"batch-size", required_argument, NULL, 'b'},
        {"input-data", required_argument, NULL, O_INPUT},
        {"concurrency-range", required_argument, NULL, O_CRANGE},
        {"request-rate-range", required_argument, NULL, O_RRANGE},
        {"connections", required_argument, NULL, O_CONNS},
        {"measurement-interval", required_argument, NULL, 'p'},
        {"max-trials", required_argument, NULL, O_TRIALS},
        {"stability-percentage", required_argument, NULL, O_STAB},
        {"input-topic", required_argument, NULL, O_ITOPIC},
        {"output-topic", required_argument, NULL, O_OTOPIC},
        {"dead-letter-topic", required_argument, NULL, O_DTOPIC},
        {"threads", required_argument, NULL, O_THREADS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (opts){.url = NULL, .input_data = "random", .batch = 1, .interval_ms = 5000,
                .max_trials = 10, .stability = 10, .connections = 32, .threads = 1,
                .range = {1, 1, 1},
                .kafka = {.input_topic = "dlserve-in", .output_topic = "dlserve-out",
                          .dead_letter_topic = "dlserve-dead-letters"}};
    bool have_crange = false;
    int c;
    while ((c = getopt_long(argc, argv, "m:u:i:b:p:f:H:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'u': o->url = optarg; break;
        case 'i':
            if (strcmp(optarg, "http") == 0)
                o->protocol = PROTO_HTTP;
            else if (strcmp(optarg, "grpc") == 0)
                o->protocol = PROTO_GRPC;
            else if (strcmp(optarg, "kafka") == 0)
                o->protocol = PROTO_KAFKA;
            else {
                fprintf(stderr, "dlserve-perf: -i %s: want http, grpc or kafka\n", optarg);
                exit(2);
            }
            break;
        case O_BINARY: o->binary = true; break;
        case 'b': o->batch = (int)num_arg("-b", optarg, 1, 1 << 20); break;
        case O_INPUT: o->input_data = optarg; break;
        case O_CRANGE: parse_range(optarg, o->range, true); have_crange = true; break;
        case O_RRANGE: parse_range(optarg, o->range, false); o->rate_mode = true; break;
        case O_CONNS:
            o->connections = (int)num_arg("--connections", optarg, 1, HL_MAX_CONNS);
            o->have_connections = true;
            break;
        case O_THREADS: o->threads = (int)num_arg("--threads", optarg, 1, 64); break;
        case 'p': o->interval_ms = num_arg("-p", optarg, 10, 3600e3); break;
        case O_TRIALS: o->max_trials = (int)num_arg("--max-trials", optarg, 3, 1000); break;
        case O_STAB: o->stability = num_arg("--stability-percentage", optarg, 0, 1000); break;
        case 'f': o->csv = optarg; break;
        case 'H':
            if (o->nheaders == MAX_HEADERS) {
                fprintf(stderr, "dlserve-perf: at most %d -H\n", MAX_HEADERS);
                exit(2);
            }
            o->headers[o->nheaders++] = optarg;
            break;
        case O_ITOPIC: o->kafka.input_topic = optarg; break;
        case O_OTOPIC: o->kafka.output_topic = optarg; break;
        case O_DTOPIC: o->kafka.dead_letter_topic = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind != argc || !o->model) {
        fprintf(stderr, "dlserve-perf: %s\n", optind != argc ? "unexpected arguments"
                                                              : "-m MODEL is required");
        usage(stderr);
        exit(2);
    }
    if (have_crange && o->rate_mode) {
        fprintf(stderr, "dlserve-perf: --concurrency-range or --request-rate-range, not both\n");
        exit(2);
    }
    if (o->protocol == PROTO_GRPC && o->connections > 64) {
        fprintf(stderr, "dlserve-perf: -i grpc: at most 64 channels (--connections)\n");
        exit(2);
    }
    if (o->protocol == PROTO_GRPC && !o->have_connections)
        o->connections = 1;   /* one HTTP/2 connection, as a client library opens */
    if (o->binary && o->protocol != PROTO_HTTP) {
        fprintf(stderr, "dlserve-perf: --binary is for -i http\n");
        exit(2);
    }
    if (!o->url)
        o->url = o->protocol == PROTO_KAFKA ? "localhost:9092"
                 : o->protocol == PROTO_GRPC ? "localhost:8001" : "localhost:8000";
}

/* ---- request bodies -------------------------------------------------- */

/* Bytes a value of datatype dt takes in a binary tensor; 0: not supported. */
static size_t dt_size(const char *dt)
{
    static const struct { const char *name; size_t size; } t[] = {
        {"BOOL", 1}, {"UINT8", 1}, {"INT8", 1}, {"UINT16", 2}, {"INT16", 2}, {"UINT32", 4},
        {"INT32", 4}, {"UINT64", 8}, {"INT64", 8}, {"FP32", 4}, {"FP64", 8},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcmp(dt, t[i].name) == 0)
            return t[i].size;
    return 0;
}

static bool is_float(const char *dt) { return dt[0] == 'F'; }

/* Inputs of random (or zero) values for MODEL's metadata: each input's
 * shape with -1 as the first dimension given the batch size, and any later
 * -1 as 1. Floats in [0, 1); integers 0 or 1 (an id every vocabulary has). */
static json_t *gen_inputs(json_t *meta, int batch, bool zero)
{
    json_t *inputs = json_object_get(meta, "inputs"), *out = json_array();
    if (!json_is_array(inputs) || json_array_size(inputs) == 0)
        fail("the model's metadata lists no inputs");
    unsigned seed = 1;
    size_t i;
    json_t *in;
    json_array_foreach(inputs, i, in) {
        const char *name = json_string_value(json_object_get(in, "name"));
        const char *dt = json_string_value(json_object_get(in, "datatype"));
        json_t *shape = json_object_get(in, "shape");
        if (!name || !dt || !json_is_array(shape))
            fail("the model's metadata has an input without name, datatype or shape");
        if (!dt_size(dt))
            fail("input %s is %s: generated data covers numbers only (use --input-data FILE)",
                 name, dt);
        json_t *dims = json_array();
        size_t count = 1, j;
        json_t *d;
        json_array_foreach(shape, j, d) {
            json_int_t v = json_integer_value(d);
            if (v < 0)
                v = j == 0 ? batch : 1;
            count *= (size_t)v;
            json_array_append_new(dims, json_integer(v));
        }
        json_t *data = json_array();
        for (size_t k = 0; k < count; k++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = (seed >> 16) & 0x7fff;
            json_array_append_new(data, is_float(dt) ? json_real(zero ? 0 : r / 32768.0)
                                                     : json_integer(zero ? 0 : r & 1));
        }
        json_array_append_new(out, json_pack("{s:s, s:s, s:o, s:o}", "name", name,
                                             "datatype", dt, "shape", dims, "data", data));
    }
    return out;
}

/* Appends the values of a (possibly nested) JSON array to buf as dt. */
static void put_values(json_t *v, const char *dt, char **buf, size_t *len, size_t *cap)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
            put_values(e, dt, buf, len, cap);
        return;
    }
    size_t size = dt_size(dt);
    if (*len + size > *cap) {
        *cap = *cap * 2 + size + 4096;
        *buf = realloc(*buf, *cap);
        if (!*buf)
            fail("out of memory");
    }
    double x = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
    union { float f; double d; int8_t i8; int16_t i16; int32_t i32; int64_t i64; } u;
    if (strcmp(dt, "FP32") == 0)
        u.f = (float)x;
    else if (strcmp(dt, "FP64") == 0)
        u.d = x;
    else if (size == 1)
        u.i8 = (int8_t)(int64_t)x;
    else if (size == 2)
        u.i16 = (int16_t)(int64_t)x;
    else if (size == 4)
        u.i32 = (int32_t)(int64_t)x;
    else
        u.i64 = (int64_t)x;
    memcpy(*buf + *len, &u, size);   /* little-endian, as the extension's values are */
    *len += size;
}

/* The binary form of the request req (its inputs' "data" moved behind the
 * JSON header); the header's length in *header_len. */
static char *to_binary(json_t *req, size_t *len, size_t *header_len)
{
    json_t *inputs = json_object_get(req, "inputs");
    size_t cap = 0, blen = 0, i;
    char *bytes = NULL;
    json_t *in;
    json_array_foreach(inputs, i, in) {
        const char *dt = json_string_value(json_object_get(in, "datatype"));
        json_t *data = json_object_get(in, "data");
        if (!dt || !dt_size(dt) || !data)
            fail("--binary: input %zu has no data of a numeric datatype", i);
        size_t before = blen;
        put_values(data, dt, &bytes, &blen, &cap);
        json_object_del(in, "data");
        json_t *params = json_object_get(in, "parameters");
        if (!json_is_object(params))
            json_object_set_new(in, "parameters", params = json_object());
        json_object_set_new(params, "binary_data_size", json_integer((json_int_t)(blen - before)));
    }
    json_t *params = json_object_get(req, "parameters");
    if (!json_is_object(params))
        json_object_set_new(req, "parameters", params = json_object());
    json_object_set_new(params, "binary_data_output", json_true());
    char *header = json_dumps(req, JSON_COMPACT);
    if (!header)
        fail("out of memory");
    *header_len = strlen(header);
    *len = *header_len + blen;
    char *body = realloc(header, *len + 1);
    if (!body)
        fail("out of memory");
    if (blen)
        memcpy(body + *header_len, bytes, blen);
    free(bytes);
    return body;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail("cannot open %s: %s", path, strerror(errno));
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    if (!buf || ferror(f))
        fail("cannot read %s", path);
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The infer request's JSON: --input-data FILE's, or generated from the
 * model's metadata meta. */
static json_t *request_json(const opts *o, json_t *meta)
{
    bool gen = strcmp(o->input_data, "random") == 0 || strcmp(o->input_data, "zero") == 0;
    if (gen)
        return json_pack("{s:o}", "inputs",
                         gen_inputs(meta, o->batch, strcmp(o->input_data, "zero") == 0));
    size_t len;
    char *text = slurp(o->input_data, &len);
    json_error_t jerr;
    json_t *req = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!json_is_object(req) || !json_is_array(json_object_get(req, "inputs")))
        fail("%s: not an infer request (a JSON object with \"inputs\"): %s", o->input_data,
             req ? "no inputs" : jerr.text);
    return req;
}

/* ---- measuring --------------------------------------------------------- */

typedef struct window {
    uint32_t *lat;
    size_t    answered, good;
    double    seconds, sum_us;
    long long errors;
    int       first_bad_status;
} window;

typedef struct level {
    double    value;
    size_t    requests;
    long long errors;
    double    infer_per_s, p50, p90, p95, p99, mean;
    int       windows;
    bool      stable;
    int       first_bad_status;
} level;

static bool within(const double *v, double pct)
{
    double mean = (v[0] + v[1] + v[2]) / 3;
    for (int i = 0; i < 3; i++)
        if (fabs(v[i] - mean) > mean * pct / 100)
            return false;
    return true;
}

static bool stable(const window *w, double pct)
{
    double rps[3], lat[3];
    for (int i = 0; i < 3; i++) {
        rps[i] = (double)w[i].good / w[i].seconds;
        lat[i] = w[i].answered ? w[i].sum_us / (double)w[i].answered : 0;
    }
    return within(rps, pct) && within(lat, pct);
}

/* Runs one level: windows until STABLE_RUN in a row agree, at most
 * max_trials; fills lv from the last STABLE_RUN. */
static void measure(const opts *o, perf_target *t, level *lv)
{
    window w[STABLE_RUN] = {{0}};
    int n = 0;
    char err[512];
    for (; n < o->max_trials; n++) {
        hl_stats st;
        if (!t->run(t, o->rate_mode ? lv->value : 0, o->interval_ms / 1000, &st, err,
                    sizeof(err)))
            fail("%s", err);
        window *x = &w[STABLE_RUN - 1];
        free(w[0].lat);
        memmove(&w[0], &w[1], (STABLE_RUN - 1) * sizeof(window));
        long long errors = st.lost_read + st.lost_write + st.bad_status + st.timeouts;
        *x = (window){.answered = st.answered, .good = st.answered - (size_t)st.bad_status,
                      .seconds = st.elapsed_ns > 0 ? (double)st.elapsed_ns / 1e9 : 1e-9,
                      .sum_us = st.sum_us, .errors = errors,
                      .first_bad_status = st.first_bad_status};
        x->lat = malloc((st.answered ? st.answered : 1) * sizeof(*x->lat));
        if (!x->lat)
            fail("out of memory");
        if (st.answered)
            memcpy(x->lat, st.lat, st.answered * sizeof(*x->lat));
        if (n + 1 >= STABLE_RUN && stable(w, o->stability)) {
            lv->stable = true;
            n++;
            break;
        }
        if (n + 1 >= STABLE_RUN && x->good == 0) {   /* nothing answered well: */
            n++;                                      /* no use waiting */
            break;
        }
    }
    size_t all = 0, good = 0;
    double secs = 0, sum = 0;
    for (int i = 0; i < STABLE_RUN; i++) {
        all += w[i].answered;
        good += w[i].good;
        secs += w[i].seconds;
        sum += w[i].sum_us;
        lv->errors += w[i].errors;
        if (!lv->first_bad_status)
            lv->first_bad_status = w[i].first_bad_status;
    }
    uint32_t *lat = malloc((all ? all : 1) * sizeof(*lat));
    if (!lat)
        fail("out of memory");
    for (int i = 0, off = 0; i < STABLE_RUN; off += (int)w[i].answered, i++)
        if (w[i].answered)
            memcpy(lat + off, w[i].lat, w[i].answered * sizeof(*lat));
    hl_sort(lat, all);
    lv->requests = all;
    lv->windows = n;
    lv->infer_per_s = secs > 0 ? (double)good * o->batch / secs : 0;
    lv->p50 = hl_percentile(lat, all, 50);
    lv->p90 = hl_percentile(lat, all, 90);
    lv->p95 = hl_percentile(lat, all, 95);
    lv->p99 = hl_percentile(lat, all, 99);
    lv->mean = all ? sum / (double)all : 0;
    free(lat);
    for (int i = 0; i < STABLE_RUN; i++)
        free(w[i].lat);
}

/* ---- HTTP targets ---------------------------------------------------- */

typedef struct http_target {
    perf_target base;
    struct sockaddr_in addr;
    char   *request;
    size_t  request_len;
    hl_load *load;
    int      nconns;
} http_target;

static bool http_run(perf_target *t, double rate, double seconds, hl_stats *st, char *err,
                     size_t err_len)
{
    http_target *h = (http_target *)t;
    return hl_run(h->load, rate, seconds, st, err, err_len);
}

static bool http_level(perf_target *t, double value, bool rate_mode, int connections,
                       char *err, size_t err_len)
{
    http_target *h = (http_target *)t;
    int n = rate_mode ? connections : (int)value;
    if (h->load && h->nconns == n)
        return true;
    hl_close(h->load);
    h->nconns = n;
    h->load = hl_open(&h->addr, h->request, h->request_len, n, err, err_len);
    return h->load != NULL;
}

static void http_close(perf_target *t)
{
    http_target *h = (http_target *)t;
    hl_close(h->load);
    free(h->request);
    free(h);
}

/* GET PATH on the server; fails with a clear message unless it answers 200. */
static char *http_get(const struct sockaddr_in *addr, const char *hostport, const char *path,
                      size_t *len)
{
    char err[512], *body;
    size_t req_len;
    int status = 0;
    char *req = hl_build_request(hostport, path, NULL, 0, NULL, 0, &req_len);
    if (!req)
        fail("out of memory");
    if (!hl_fetch(addr, req, req_len, 10000, &status, &body, len, err, sizeof(err)))
        fail("%s (is the server running?)", err);
    free(req);
    if (status != 200)
        fail("GET %s answered %d: %.300s", path, status, body);
    return body;
}

static perf_target *http_target_new(const opts *o)
{
    http_target *h = calloc(1, sizeof(*h));
    char hostport[300], base[2048], path[2300], err[512];
    if (!h)
        fail("out of memory");
    if (!hl_parse_url(o->url, &h->addr, hostport, sizeof(hostport), base, sizeof(base), err,
                      sizeof(err)))
        fail("%s", err);
    const char *prefix = strcmp(base, "/") == 0 ? "" : base;
    json_t *meta = NULL;
    if (strcmp(o->input_data, "random") == 0 || strcmp(o->input_data, "zero") == 0) {
        size_t len;
        snprintf(path, sizeof(path), "%s/v2/models/%s", prefix, o->model);
        char *text = http_get(&h->addr, hostport, path, &len);
        json_error_t jerr;
        meta = json_loadb(text, len, 0, &jerr);
        if (!meta)
            fail("GET %s: not JSON: %s", path, jerr.text);
        free(text);
    }
    json_t *req = request_json(o, meta);
    json_decref(meta);
    char *body;
    size_t body_len, header_len = 0;
    const char *headers[MAX_HEADERS + 2];
    int nh = 0;
    for (int i = 0; i < o->nheaders; i++)
        headers[nh++] = o->headers[i];
    char length_header[80];
    if (o->binary) {
        body = to_binary(req, &body_len, &header_len);
        snprintf(length_header, sizeof(length_header), "Inference-Header-Content-Length: %zu",
                 header_len);
        headers[nh++] = length_header;
        headers[nh++] = "Content-Type: application/octet-stream";
    } else if (strcmp(o->input_data, "random") == 0 || strcmp(o->input_data, "zero") == 0) {
        body = json_dumps(req, JSON_COMPACT);
        body_len = body ? strlen(body) : 0;
    } else {
        body = slurp(o->input_data, &body_len);   /* sent byte for byte */
    }
    json_decref(req);
    if (!body)
        fail("out of memory");
    snprintf(path, sizeof(path), "%s/v2/models/%s/infer", prefix, o->model);
    h->request = hl_build_request(hostport, path, body, body_len, headers, nh, &h->request_len);
    free(body);
    if (!h->request)
        fail("out of memory");

    /* one request first: a refusal is reported with its answer, not as
     * a level of errors */
    int status = 0;
    char *answer;
    size_t answer_len;
    if (!hl_fetch(&h->addr, h->request, h->request_len, 30000, &status, &answer, &answer_len,
                  err, sizeof(err)))
        fail("%s (is the server running?)", err);
    if (status != 200)
        fail("POST %s answered %d: %.300s", path, status, answer);
    free(answer);
    h->base.run = http_run;
    h->base.level = http_level;
    h->base.close = http_close;
    snprintf(h->base.what, sizeof(h->base.what),
             "HTTP %s, POST http://%s%.400s, %zu-byte request",
             o->binary ? "binary tensor data" : "JSON", hostport, path, h->request_len);
    return &h->base;
}

/* ---- gRPC target ----------------------------------------------------- */

/* The request's inputs packed for raw_input_contents: each input's "data"
 * as its datatype, little-endian. */
static perf_target *grpc_target_new(const opts *o)
{
    char err[512];
    perf_grpc_opts g = {.target = o->url, .model = o->model, .headers = o->headers,
                        .nheaders = o->nheaders, .channels = o->connections,
                        .threads = o->threads};
    json_t *meta = NULL;
    if (strcmp(o->input_data, "random") == 0 || strcmp(o->input_data, "zero") == 0) {
        meta = perf_grpc_metadata(&g, err, sizeof(err));
        if (!meta)
            fail("%s", err);
    }
    json_t *req = request_json(o, meta);
    json_decref(meta);
    json_t *inputs = json_object_get(req, "inputs");
    size_t n = json_array_size(inputs), i;
    perf_grpc_input *in = calloc(n ? n : 1, sizeof(*in));
    if (!in)
        fail("out of memory");
    json_t *x;
    json_array_foreach(inputs, i, x) {
        const char *name = json_string_value(json_object_get(x, "name"));
        const char *dt = json_string_value(json_object_get(x, "datatype"));
        json_t *shape = json_object_get(x, "shape"), *data = json_object_get(x, "data"), *d;
        if (!name || !dt || !dt_size(dt) || !json_is_array(shape) || !data ||
            json_array_size(shape) > PERF_GRPC_MAX_DIMS)
            fail("-i grpc: input %zu wants a name, a numeric datatype, a shape of at most %d "
                 "dimensions and data", i, PERF_GRPC_MAX_DIMS);
        size_t j, cap = 0;
        json_array_foreach(shape, j, d)
            in[i].shape[j] = json_integer_value(d);
        in[i].ndims = json_array_size(shape);
        in[i].name = name;
        in[i].datatype = dt;
        char *raw = NULL;
        put_values(data, dt, &raw, &in[i].raw_len, &cap);
        in[i].raw = raw;
    }
    perf_target *t = perf_grpc_target(&g, in, n, err, sizeof(err));
    for (i = 0; i < n; i++)
        free((void *)in[i].raw);
    free(in);
    json_decref(req);
    if (!t)
        fail("%s", err);
    return t;
}

/* ---- main ------------------------------------------------------------- */

int main(int argc, char **argv)
{
    opts o;
    parse_opts(argc, argv, &o);
    perf_target *t;
    if (o.protocol == PROTO_KAFKA) {
        char err[512];
        json_t *req = NULL;
        if (strcmp(o.input_data, "random") == 0 || strcmp(o.input_data, "zero") == 0)
            fail("-i kafka needs --input-data FILE (an infer request body): the brokers "
                 "serve no model metadata");
        req = request_json(&o, NULL);
        json_object_set_new(req, "model", json_string(o.model));
        o.kafka.brokers = o.url;
        t = perf_kafka_target(&o.kafka, req, err, sizeof(err));
        json_decref(req);
        if (!t)
            fail("%s", err);
    } else if (o.protocol == PROTO_GRPC) {
        t = grpc_target_new(&o);
    } else {
        t = http_target_new(&o);
    }

    FILE *csv = NULL;
    if (o.csv && !(csv = fopen(o.csv, "w")))
        fail("cannot write %s: %s", o.csv, strerror(errno));
    const char *what = o.rate_mode ? "Request Rate" : "Concurrency";
    printf("*** Measurement Settings ***\n  Model: %s, batch size %d\n  %s\n"
           "  Measurement window: %.0f msec, up to %d windows a level, stable when %d in a "
           "row lie within %g%%\n",
           o.model, o.batch, t->what, o.interval_ms, o.max_trials, STABLE_RUN, o.stability);
    if (o.rate_mode && o.protocol == PROTO_GRPC)
        printf("  Open loop: a call started when it is due, its latency from then\n");
    else if (o.rate_mode)
        printf("  Open loop over %d connections: latency from when a request was due\n",
               o.connections);
    printf("\n");
    if (csv)
        fprintf(csv, "%s,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency,"
                     "Avg latency,Requests,Errors,Stable\n", what);

    level levels[MAX_LEVELS];
    int nlevels = 0, status = 0;
    for (double v = o.range[0]; v <= o.range[1] + 1e-9 && nlevels < MAX_LEVELS;
         v += o.range[2]) {
        char err[512];
        if (!t->level(t, v, o.rate_mode, o.connections, err, sizeof(err)))
            fail("%s", err);
        level *lv = &levels[nlevels++];
        *lv = (level){.value = v};
        measure(&o, t, lv);
        if (o.rate_mode)
            printf("Request rate: %g\n", v);
        else
            printf("Request concurrency: %g\n", v);
        printf("  Client:\n    Request count: %zu (the last %d of %d windows)\n"
               "    Throughput: %.1f infer/sec\n    Errors: %lld\n"
               "    p50 latency: %.0f usec\n    p90 latency: %.0f usec\n"
               "    p95 latency: %.0f usec\n    p99 latency: %.0f usec\n"
               "    Avg latency: %.0f usec\n",
               lv->requests, STABLE_RUN, lv->windows, lv->infer_per_s, lv->errors, lv->p50,
               lv->p90, lv->p95, lv->p99, lv->mean);
        if (!lv->stable)
            printf("    Not stable: the last %d windows differ by more than %g%%\n", STABLE_RUN,
                   o.stability);
        if (t->first_error[0])
            printf("    First error answer: %s\n", t->first_error);
        else if (lv->first_bad_status)
            printf("    First error answer: HTTP %d\n", lv->first_bad_status);
        fflush(stdout);
        if (csv)
            fprintf(csv, "%g,%.1f,%.0f,%.0f,%.0f,%.0f,%.0f,%zu,%lld,%d\n", v, lv->infer_per_s,
                    lv->p50, lv->p90, lv->p95, lv->p99, lv->mean, lv->requests, lv->errors,
                    lv->stable);
        if (lv->infer_per_s == 0) {
            fprintf(stderr, "dlserve-perf: every request at %s %g failed\n",
                    o.rate_mode ? "request rate" : "concurrency", v);
            status = 1;
        }
    }
    t->close(t);
    if (csv && fclose(csv) != 0)
        fail("cannot write %s", o.csv);

    printf("\nInferences/Second vs. Client Latency\n");
    for (int i = 0; i < nlevels; i++)
        printf("%s: %g, throughput: %.1f infer/sec, latency p50 %.0f / p90 %.0f / p95 %.0f / "
               "p99 %.0f usec, errors %lld\n", what, levels[i].value, levels[i].infer_per_s,
               levels[i].p50, levels[i].p90, levels[i].p95, levels[i].p99, levels[i].errors);
    return status;
}
