/* grpc_rate.c: a closed-loop gRPC load generator for tests/bench/grpc_vs_http: CONCURRENCY
 * callers each keep one unary call (ModelInfer by default) in flight on libgrpc's C core.
 *
 *   grpc_rate --target HOST:PORT --model NAME [--input NAME] [--datatype FP32]
 *             [--shape 1,784] [--values FILE] [--concurrency 32] [--seconds 8]
 *             [--warmup 1] [--channels 1] [--threads 1] [--token T] [--method PATH]
 *
 * The request, built once, is a ModelInferRequest with one input in raw_input_contents:
 * FILE's bytes (little-endian, packed, as many as the shape holds) or random values. Each
 * caller sends its next call as soon as its last one ends, as wrk's connections do, so
 * the figures compare with tests/bench/http_rate.c's closed loop (-r 0): latency runs
 * from a call's start to its status. The callers share CHANNELS channels (each its own
 * HTTP/2 connection: one local subchannel pool a channel) and THREADS threads, each
 * polling one completion queue for its callers: a call is one batch of the six client
 * ops, so it completes once. After WARMUP seconds, calls that end in the next SECONDS
 * count. Prints one line of JSON:
 *
 *   {"requests":N,"seconds":S,"rps":R,"p50_us":..,"p90_us":..,"p99_us":..,"max_us":..,
 *    "mean_us":..,"errors":E}
 *
 * errors: calls of the whole run (warm-up included) that ended with a status other than
 * OK. The first answer must unpack as a ModelInferResponse. Exit status 0; 1 when a call
 * failed (the first one's status code and details on stderr); 2 on a usage or set-up
 * error. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "grpc_service.pb-c.h"

#define MAX_CALLERS   4096
#define MAX_CHANNELS  64
#define MAX_THREADS   64
#define MAX_DIMS      8
#define DEFAULT_METHOD "/inference.GRPCInferenceService/ModelInfer"

/* One caller: its call in flight and what the call's batch writes into. Only the thread
 * polling the caller's completion queue touches it once it runs. */
typedef struct caller {
    struct worker      *w;
    grpc_channel       *ch;
    void               *method;      /* the channel's registered method */
    grpc_call          *call;
    grpc_byte_buffer   *send;
    grpc_byte_buffer   *recv;
    grpc_metadata_array initial, trailing;
    grpc_status_code    status;
    grpc_slice          details;
    int64_t             start_ns;
} caller;

/* A polling thread: its completion queue, its callers' latencies (us, measured calls
 * only) and how many of its callers still have a call in flight. */
typedef struct worker {
    pthread_t              tid;
    grpc_completion_queue *cq;
    uint32_t              *lat;
    size_t                 nlat, cap;
    double                 sum_us;
    int                    inflight;
} worker;

static struct {
    const char *target, *model, *input, *datatype, *values, *token, *method;
    int64_t     shape[MAX_DIMS];
    int         ndims, concurrency, channels, threads;
    double      seconds, warmup;
} opt = {.input = "input", .datatype = "FP32", .method = DEFAULT_METHOD, .shape = {1, 784},
         .ndims = 2, .concurrency = 32, .channels = 1, .threads = 1, .seconds = 8, .warmup = 1};

static grpc_slice     request;        /* the packed ModelInferRequest, shared by every call */
static grpc_metadata  auth;           /* authorization: Bearer TOKEN, with --token */
static int64_t        measure_from, measure_to;
static atomic_long    errors;
static atomic_flag    first_answer = ATOMIC_FLAG_INIT;
static pthread_mutex_t first_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char           first_error[512];

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "grpc_rate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Bytes an element of DATATYPE takes in raw contents; 0 for one not supported here. */
static size_t datatype_size(const char *dt)
{
    static const struct { const char *name; size_t size; } types[] = {
        {"BOOL", 1}, {"UINT8", 1}, {"INT8", 1}, {"UINT16", 2}, {"INT16", 2}, {"FP16", 2},
        {"BF16", 2}, {"UINT32", 4}, {"INT32", 4}, {"FP32", 4}, {"UINT64", 8}, {"INT64", 8},
        {"FP64", 8},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dt, types[i].name) == 0)
            return types[i].size;
    return 0;
}

/* Fills n elements of datatype dt: floats uniform in [0, 1), integers in [0, 9]; the
 * half-precision types get small random bits (their values do not matter here). */
static void fill_random(uint8_t *buf, size_t n, const char *dt, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)random() / ((double)RAND_MAX + 1.0);
        if (strcmp(dt, "FP32") == 0) {
            float f = (float)u;
            memcpy(buf + i * 4, &f, 4);
        } else if (strcmp(dt, "FP64") == 0) {
            memcpy(buf + i * 8, &u, 8);
        } else {
            uint64_t v = strcmp(dt, "BOOL") == 0 ? (uint64_t)(u * 2) : (uint64_t)(u * 10);
            for (size_t b = 0; b < size; b++)   /* little-endian */
                buf[i * size + b] = (uint8_t)(v >> (8 * b));
        }
    }
}

static uint8_t *read_values(const char *path, size_t want)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    uint8_t *data = malloc(want);   /* want >= 1 */
    if (!data)
        die("%s", "out of memory");
    size_t got = fread(data, 1, want, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != want || extra != EOF) {
        char msg[128];
        snprintf(msg, sizeof msg, "holds other than the %zu bytes the shape and datatype need",
                 want);
        fprintf(stderr, "grpc_rate: %s %s\n", path, msg);
        exit(2);
    }
    return data;
}

/* Packs the request into the shared slice. */
static void build_request(void)
{
    size_t size = datatype_size(opt.datatype);
    if (!size)
        die("datatype %s is not supported (BYTES neither)", opt.datatype);
    size_t n = 1;
    for (int i = 0; i < opt.ndims; i++)
        n *= (size_t)opt.shape[i];
    uint8_t *raw;
    if (opt.values) {
        raw = read_values(opt.values, n * size);
    } else {
        raw = malloc(n * size);   /* n, size >= 1 */
        if (!raw)
            die("%s", "out of memory");
        fill_random(raw, n, opt.datatype, size);
    }

    Inference__ModelInferRequest__InferInputTensor in =
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
    in.name = (char *)opt.input;
    in.datatype = (char *)opt.datatype;
    in.n_shape = (size_t)opt.ndims;
    in.shape = opt.shape;
    Inference__ModelInferRequest__InferInputTensor *inputs[] = {&in};
    ProtobufCBinaryData contents = {.len = n * size, .data = raw};
    Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
    req.model_name = (char *)opt.model;
    req.n_inputs = 1;
    req.inputs = inputs;
    req.n_raw_input_contents = 1;
    req.raw_input_contents = &contents;

    size_t len = inference__model_infer_request__get_packed_size(&req);
    request = grpc_slice_malloc(len);
    inference__model_infer_request__pack(&req, GRPC_SLICE_START_PTR(request));
    free(raw);
}

/* Starts c's next call: the whole unary exchange as one batch. */
static void caller_start(caller *c)
{
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_seconds(10, GPR_TIMESPAN));
    c->call = grpc_channel_create_registered_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                                  c->w->cq, c->method, deadline, NULL);
    c->send = grpc_raw_byte_buffer_create(&request, 1);   /* a reference, not a copy */
    c->recv = NULL;
    grpc_metadata_array_init(&c->initial);
    grpc_metadata_array_init(&c->trailing);
    c->details = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = opt.token ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = opt.token ? &auth : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;

    c->start_ns = now_ns();
    grpc_call_error e = grpc_call_start_batch(c->call, ops, 6, c, NULL);
    if (e != GRPC_CALL_OK)
        die("grpc_call_start_batch: %s", grpc_call_error_to_string(e));
    c->w->inflight++;
}

/* The first answer must be a ModelInferResponse (the echo server's or the daemon's). */
static bool check_answer(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!bb || !grpc_byte_buffer_reader_init(&r, bb))
        return false;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    Inference__ModelInferResponse *res = inference__model_infer_response__unpack(
        NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (!res)
        return false;
    inference__model_infer_response__free_unpacked(res, NULL);
    return true;
}

static void note_error(grpc_status_code code, const char *details)
{
    if (atomic_fetch_add(&errors, 1) != 0)
        return;
    pthread_mutex_lock(&first_error_lock);
    snprintf(first_error, sizeof first_error, "status %d: %s", (int)code, details);
    pthread_mutex_unlock(&first_error_lock);
}

/* c's call has ended: counts it, frees it and starts the next unless the run is over. */
static void caller_done(caller *c, bool ok)
{
    int64_t t = now_ns();
    c->w->inflight--;
    bool good = ok && c->status == GRPC_STATUS_OK;
    if (!good) {
        char *details = grpc_slice_to_c_string(c->details);
        note_error(ok ? c->status : GRPC_STATUS_UNKNOWN, ok ? details : "the batch failed");
        gpr_free(details);
    } else if (!atomic_flag_test_and_set(&first_answer) && !check_answer(c->recv)) {
        note_error(GRPC_STATUS_OK, "the answer is not a ModelInferResponse");
        good = false;
    }
    if (good && t >= measure_from && t < measure_to) {
        worker *w = c->w;
        if (w->nlat == w->cap) {
            w->cap = w->cap ? 2 * w->cap : 65536;
            w->lat = realloc(w->lat, w->cap * sizeof(*w->lat));
            if (!w->lat)
                die("%s", "out of memory");
        }
        uint32_t us = (uint32_t)((t - c->start_ns) / 1000);
        w->lat[w->nlat++] = us;
        w->sum_us += us;
    }
    grpc_byte_buffer_destroy(c->send);
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    grpc_metadata_array_destroy(&c->initial);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_slice_unref(c->details);
    grpc_call_unref(c->call);
    c->call = NULL;
    if (t < measure_to)
        caller_start(c);
}

static void *worker_run(void *arg)
{
    worker *w = arg;
    while (w->inflight > 0) {
        gpr_timespec wake = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_millis(200, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(w->cq, wake, NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            caller_done(ev.tag, ev.success != 0);
        else if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
    }
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t percentile(const uint32_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    return v[rank > 0 ? rank - 1 : 0];
}

static void parse_shape(const char *s)
{
    opt.ndims = 0;
    for (const char *p = s; *p;) {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 1 || d > (1LL << 30) || opt.ndims == MAX_DIMS ||
            (*end && *end != ','))
            die("--shape must be up to 8 positive sizes separated by commas, not %s", s);
        opt.shape[opt.ndims++] = d;
        p = *end ? end + 1 : end;
    }
    if (opt.ndims == 0)
        die("%s", "--shape is empty");
}

static const char usage[] =
    "usage: grpc_rate --target HOST:PORT --model NAME [--input NAME] [--datatype FP32] "
    "[--shape 1,784] [--values FILE] [--concurrency 32] [--seconds 8] [--warmup 1] "
    "[--channels 1] [--threads 1] [--token TOKEN] [--method /SERVICE/METHOD]";

static void parse_args(int argc, char **argv)
{
    static const struct option longs[] = {
        {"target", required_argument, NULL, 'T'},   {"model", required_argument, NULL, 'm'},
        {"input", required_argument, NULL, 'i'},    {"datatype", required_argument, NULL, 'D'},
        {"shape", required_argument, NULL, 's'},    {"values", required_argument, NULL, 'v'},
        {"concurrency", required_argument, NULL, 'c'},
        {"seconds", required_argument, NULL, 'd'},  {"warmup", required_argument, NULL, 'w'},
        {"channels", required_argument, NULL, 'C'}, {"threads", required_argument, NULL, 't'},
        {"token", required_argument, NULL, 'k'},    {"method", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},           {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (o) {
        case 'T': opt.target = optarg; break;
        case 'm': opt.model = optarg; break;
        case 'i': opt.input = optarg; break;
        case 'D': opt.datatype = optarg; break;
        case 's': parse_shape(optarg); break;
        case 'v': opt.values = optarg; break;
        case 'c': opt.concurrency = atoi(optarg); break;
        case 'd': opt.seconds = atof(optarg); break;
        case 'w': opt.warmup = atof(optarg); break;
        case 'C': opt.channels = atoi(optarg); break;
        case 't': opt.threads = atoi(optarg); break;
        case 'k': opt.token = optarg; break;
        case 'M': opt.method = optarg; break;
        case 'h': printf("%s\n", usage); exit(0);
        default: die("%s", usage);
        }
    }
    if (optind != argc || !opt.target || !opt.model || opt.seconds <= 0 || opt.warmup < 0 ||
        opt.concurrency < 1 || opt.concurrency > MAX_CALLERS || opt.channels < 1 ||
        opt.channels > MAX_CHANNELS || opt.threads < 1 || opt.threads > MAX_THREADS)
        die("%s", usage);
    if (opt.method[0] != '/')
        die("--method must start with /, not %s", opt.method);
}

/* One channel a connection: a local subchannel pool keeps channels with the same target
 * and arguments from sharing one. Messages are not capped at the 4 MiB default. */
static grpc_channel *channel_new(void)
{
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
         .value.integer = 1},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = -1},
    };
    grpc_channel_args ca = {.num_args = sizeof args / sizeof args[0], .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(opt.target, creds, &ca);
    grpc_channel_credentials_release(creds);
    return ch;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    grpc_init();
    build_request();
    char *bearer = NULL;
    if (opt.token) {
        if (asprintf(&bearer, "Bearer %s", opt.token) < 0)
            die("%s", "out of memory");
        auth.key = grpc_slice_from_static_string("authorization");
        auth.value = grpc_slice_from_copied_string(bearer);
    }

    grpc_channel *chans[MAX_CHANNELS];
    void *methods[MAX_CHANNELS];
    for (int i = 0; i < opt.channels; i++) {
        chans[i] = channel_new();
        methods[i] = grpc_channel_register_call(chans[i], opt.method, NULL, NULL);
    }
    worker *workers = calloc((size_t)opt.threads, sizeof(*workers));
    caller *callers = calloc((size_t)opt.concurrency, sizeof(*callers));
    if (!workers || !callers)
        die("%s", "out of memory");
    for (int i = 0; i < opt.threads; i++)
        workers[i].cq = grpc_completion_queue_create_for_next(NULL);

    int64_t start = now_ns();
    measure_from = start + (int64_t)(opt.warmup * 1e9);
    measure_to = measure_from + (int64_t)(opt.seconds * 1e9);
    for (int i = 0; i < opt.concurrency; i++) {
        caller *c = &callers[i];
        c->w = &workers[i % opt.threads];
        c->ch = chans[i % opt.channels];
        c->method = methods[i % opt.channels];
        caller_start(c);
    }
    for (int i = 0; i < opt.threads; i++)
        if (pthread_create(&workers[i].tid, NULL, worker_run, &workers[i]) != 0)
            die("%s", "pthread_create failed");
    for (int i = 0; i < opt.threads; i++)
        pthread_join(workers[i].tid, NULL);

    /* every latency, in one sorted array */
    size_t n = 0;
    double sum_us = 0;
    for (int i = 0; i < opt.threads; i++)
        n += workers[i].nlat;
    uint32_t *lat = malloc((n ? n : 1) * sizeof(*lat));
    if (!lat)
        die("%s", "out of memory");
    n = 0;
    for (int i = 0; i < opt.threads; i++) {
        memcpy(lat + n, workers[i].lat, workers[i].nlat * sizeof(*lat));
        n += workers[i].nlat;
        sum_us += workers[i].sum_us;
        free(workers[i].lat);
    }
    qsort(lat, n, sizeof(*lat), cmp_u32);
    long nerr = atomic_load(&errors);
    printf("{\"requests\":%zu,\"seconds\":%.3f,\"rps\":%.1f,\"p50_us\":%u,\"p90_us\":%u,"
           "\"p99_us\":%u,\"max_us\":%u,\"mean_us\":%.1f,\"errors\":%ld}\n", n, opt.seconds,
           (double)n / opt.seconds, percentile(lat, n, 50), percentile(lat, n, 90),
           percentile(lat, n, 99), n ? lat[n - 1] : 0, n ? sum_us / (double)n : 0, nerr);
    fflush(stdout);
    if (nerr)
        fprintf(stderr, "grpc_rate: %ld calls failed; the first: %s\n", nerr, first_error);

    for (int i = 0; i < opt.threads; i++) {
        grpc_completion_queue_shutdown(workers[i].cq);
        while (grpc_completion_queue_next(workers[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                          NULL).type != GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(workers[i].cq);
    }
    for (int i = 0; i < opt.channels; i++)
        grpc_channel_destroy(chans[i]);
    if (opt.token) {
        grpc_slice_unref(auth.value);
        free(bearer);
    }
    grpc_slice_unref(request);
    grpc_shutdown();
    free(lat);
    free(callers);
    free(workers);
    return nerr ? 1 : 0;
}
