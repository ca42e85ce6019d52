/* grpc_echo.c: the gRPC transport's ceiling for tests/bench/grpc_vs_http: a server on
 * libgrpc's C core that answers every ModelInfer call at once with one fixed answer.
 *
 *   grpc_echo [--port 0] [--address 127.0.0.1] [--threads 1] [--model fashion-mlp]
 *
 * It registers /inference.GRPCInferenceService/ModelInfer and answers each call, whatever
 * it asks, with a ModelInferResponse packed once at start: the answer dlserve gives
 * fashion-mlp's one image (model_name, model_version "1", output "probabilities", FP32
 * [1,10], its 40 bytes in raw_output_contents), so the bytes on the wire are the
 * daemon's; a call to another method gets UNIMPLEMENTED. THREADS threads each poll their
 * own completion queue, registered with the server, and keep SLOTS calls requested on
 * it; a call is one batch of the server ops, then its slot is requested again. No thread
 * a call, no parsing, no inference: what libgrpc costs a unary call. Prints the bound
 * port (PORT 0: any free one) on stdout, one line, once listening; runs until SIGINT or
 * SIGTERM, then shuts down and exits 0; exit status 2 on a usage or set-up error. */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "grpc_service.pb-c.h"

#define SLOTS        256       /* calls requested a thread: more than the callers at once */
#define OTHER_SLOTS  4         /* calls to other methods requested a thread */
#define MAX_THREADS  64
#define METHOD       "/inference.GRPCInferenceService/ModelInfer"

/* One requested call and its exchange; the thread polling its queue owns it. */
typedef struct slot {
    struct worker      *w;
    bool                other;       /* a slot for calls to methods other than ModelInfer */
    bool                answering;   /* false: requested; true: its answer batch runs */
    grpc_call          *call;
    grpc_call_details   details;     /* other calls' */
    gpr_timespec        deadline;
    grpc_metadata_array request_md;
    grpc_byte_buffer   *payload;
    grpc_byte_buffer   *send;
    int                 cancelled;
} slot;

typedef struct worker {
    pthread_t              tid;
    grpc_completion_queue *cq;
    slot                   slots[SLOTS + OTHER_SLOTS];
} worker;

static grpc_server *server;
static void        *method;
static grpc_slice   answer;     /* the packed ModelInferResponse */
static grpc_slice   unimplemented;   /* other methods' status details */

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "grpc_echo: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static void build_answer(const char *model)
{
    static int64_t shape[] = {1, 10};
    uint8_t probs[40] = {0};   /* 10 FP32; their values do not change the size */
    Inference__ModelInferResponse__InferOutputTensor out =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    out.name = "probabilities";
    out.datatype = "FP32";
    out.n_shape = 2;
    out.shape = shape;
    Inference__ModelInferResponse__InferOutputTensor *outputs[] = {&out};
    ProtobufCBinaryData raw = {.len = sizeof probs, .data = probs};
    Inference__ModelInferResponse res = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    res.model_name = (char *)model;
    res.model_version = "1";
    res.n_outputs = 1;
    res.outputs = outputs;
    res.n_raw_output_contents = 1;
    res.raw_output_contents = &raw;
    size_t len = inference__model_infer_response__get_packed_size(&res);
    answer = grpc_slice_malloc(len);
    inference__model_infer_response__pack(&res, GRPC_SLICE_START_PTR(answer));
}

static void slot_request(slot *s)
{
    s->answering = false;
    s->call = NULL;
    s->payload = NULL;
    grpc_metadata_array_init(&s->request_md);
    grpc_call_error e;
    if (s->other) {
        grpc_call_details_init(&s->details);
        e = grpc_server_request_call(server, &s->call, &s->details, &s->request_md, s->w->cq,
                                     s->w->cq, s);
    } else {
        e = grpc_server_request_registered_call(server, method, &s->call, &s->deadline,
                                                &s->request_md, &s->payload, s->w->cq,
                                                s->w->cq, s);
    }
    if (e != GRPC_CALL_OK)
        die("grpc_server_request_registered_call: %s", grpc_call_error_to_string(e));
}

/* A call has come: answers it in one batch (initial metadata, the answer, status OK);
 * one to another method gets UNIMPLEMENTED, as from a server without it. */
static void slot_answer(slot *s)
{
    s->answering = true;
    s->send = s->other ? NULL : grpc_raw_byte_buffer_create(&answer, 1);   /* a reference */
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (s->send) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = s->send;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status =
        s->other ? GRPC_STATUS_UNIMPLEMENTED : GRPC_STATUS_OK;
    ops[n++].data.send_status_from_server.status_details = s->other ? &unimplemented : NULL;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &s->cancelled;
    grpc_call_error e = grpc_call_start_batch(s->call, ops, n, s, NULL);
    if (e != GRPC_CALL_OK)
        die("grpc_call_start_batch: %s", grpc_call_error_to_string(e));
}

static void slot_release(slot *s)
{
    if (s->payload)
        grpc_byte_buffer_destroy(s->payload);
    if (s->answering && s->send)
        grpc_byte_buffer_destroy(s->send);
    if (s->other)
        grpc_call_details_destroy(&s->details);
    if (s->call)
        grpc_call_unref(s->call);
    grpc_metadata_array_destroy(&s->request_md);
}

/* Polls until the queue shuts down; a failed request means the server is shutting down. */
static void *worker_run(void *arg)
{
    worker *w = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                                   NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return NULL;
        slot *s = ev.tag;
        if (!s->answering && ev.success) {
            slot_answer(s);
            continue;
        }
        slot_release(s);
        if (ev.success)
            slot_request(s);
    }
}

static const char usage[] =
    "usage: grpc_echo [--port 0] [--address 127.0.0.1] [--threads 1] [--model fashion-mlp]";

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"port", required_argument, NULL, 'p'},  {"address", required_argument, NULL, 'a'},
        {"threads", required_argument, NULL, 't'}, {"model", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},        {0},
    };
    int port = 0, threads = 1, o;
    const char *address = "127.0.0.1", *model = "fashion-mlp";
    while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (o) {
        case 'p': port = atoi(optarg); break;
        case 'a': address = optarg; break;
        case 't': threads = atoi(optarg); break;
        case 'm': model = optarg; break;
        case 'h': printf("%s\n", usage); return 0;
        default: die("%s", usage);
        }
    }
    if (optind != argc || port < 0 || port > 65535 || threads < 1 || threads > MAX_THREADS)
        die("%s", usage);

    /* SIGINT and SIGTERM are taken by sigwait below, in this thread only */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    grpc_init();
    build_answer(model);
    unimplemented = grpc_slice_from_static_string("only ModelInfer is served here");
    server = grpc_server_create(NULL, NULL);
    method = grpc_server_register_method(server, METHOD, NULL,
                                         GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    worker *workers = calloc((size_t)threads, sizeof(*workers));
    if (!workers || !method)
        die("%s", "set-up failed");
    for (int i = 0; i < threads; i++) {
        workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(server, workers[i].cq, NULL);
    }
    grpc_completion_queue *done_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server, done_cq, NULL);

    char addr[300];
    snprintf(addr, sizeof addr, strchr(address, ':') ? "[%s]:%d" : "%s:%d", address, port);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int bound = grpc_server_add_http2_port(server, addr, creds);
    grpc_server_credentials_release(creds);
    if (bound == 0)
        die("cannot listen on %s", addr);
    grpc_server_start(server);
    for (int i = 0; i < threads; i++) {
        for (int j = 0; j < SLOTS + OTHER_SLOTS; j++) {
            workers[i].slots[j].w = &workers[i];
            workers[i].slots[j].other = j >= SLOTS;
            slot_request(&workers[i].slots[j]);
        }
        if (pthread_create(&workers[i].tid, NULL, worker_run, &workers[i]) != 0)
            die("%s", "pthread_create failed");
    }
    printf("%d\n", bound);
    fflush(stdout);

    int sig;
    sigwait(&sigs, &sig);
    grpc_server_shutdown_and_notify(server, done_cq, NULL);
    grpc_server_cancel_all_calls(server);
    grpc_completion_queue_next(done_cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    for (int i = 0; i < threads; i++)
        grpc_completion_queue_shutdown(workers[i].cq);
    for (int i = 0; i < threads; i++) {
        pthread_join(workers[i].tid, NULL);
        grpc_completion_queue_destroy(workers[i].cq);
    }
    grpc_server_destroy(server);
    grpc_completion_queue_shutdown(done_cq);
    while (grpc_completion_queue_next(done_cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                      NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(done_cq);
    grpc_slice_unref(answer);
    grpc_shutdown();
    free(workers);
    return 0;
}
