/* mhd_floor.c: the least an infer request over libmicrohttpd can cost, for
 * tests/bench/serve_http: a server set up nearly as dlserve's HTTP side
 * (MHD's internal epoll where dlserve's own loops run MHD's, a pool of
 * event loops fed by an acceptor thread through MHD_add_connection,
 * suspend and resume allowed) that reads each POST body and answers it
 * with a fixed body, doing no other work. (The internal loop can stall on
 * 128 sockets turning ready at once, src/serve/http/http_loop.c: the
 * benchmark's 32 connections stay clear of that.)
 *
 *   mhd_floor -p PORT [-t THREADS] [-a ANSWER_BYTES] [-j JSON_LEN] [-s | -r | -n]
 *
 * -t: event loops (default 2); -a: the answer's body size (default 64);
 * -j: sent back as header Inference-Header-Content-Length (as a binary
 * answer of the Open Inference Protocol has it; default none); -s: each
 * request is handed off as dlserve hands it to its batcher: the connection
 * is suspended, a worker thread woken through a condition variable takes
 * every request waiting and resumes their connections, and the access
 * handler, called again, answers. -r: the connection is suspended and
 * resumed at once by the event loop itself, and the handler, called again,
 * answers: libmicrohttpd's part of the hand-off, without a second thread.
 * -n: the handler returns without an answer and without suspending, and
 * answers when libmicrohttpd calls it again on the event loop's next pass
 * (as dlserve answers a held batch's requests). Without -s, -r or -n the
 * handler answers at once.
 * Runs until SIGINT or SIGTERM. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

typedef struct request {
    struct request *next;
    struct MHD_Connection *c;
    bool queued, done;
} request;

static struct {
    struct MHD_Daemon *d;
    int listen_fd;
    char mode;         /* 's', 'r', 'n', or 0: answered at once */
    char *answer;
    size_t answer_len;
    char json_len[24];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request *head;
    bool sleeping;     /* the worker waits on cv */
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static enum MHD_Result answer(struct MHD_Connection *c)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(srv.answer_len, srv.answer, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    if (srv.json_len[0])
        MHD_add_response_header(r, "Inference-Header-Content-Length", srv.json_len);
    enum MHD_Result res = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return res;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)cls, (void)url, (void)method, (void)version, (void)upload_data;
    request *rq = *con_cls;
    if (!rq) {   /* the headers: the body follows */
        if (!(rq = calloc(1, sizeof(*rq))))
            return MHD_NO;
        rq->c = c;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_data_size) {   /* a part of the body, read and dropped */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!srv.mode || rq->done)
        return answer(c);
    if (srv.mode == 'n' || srv.mode == 'r') {
        rq->done = true;
        if (srv.mode == 'r') {
            MHD_suspend_connection(c);
            MHD_resume_connection(c);
        }
        return MHD_YES;
    }
    if (!rq->queued) {
        rq->queued = true;
        MHD_suspend_connection(c);
        pthread_mutex_lock(&srv.mu);
        rq->next = srv.head;
        srv.head = rq;
        bool wake = srv.sleeping;
        pthread_mutex_unlock(&srv.mu);
        if (wake)
            pthread_cond_signal(&srv.cv);
    }
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)c, (void)toe;
    free(*con_cls);
    *con_cls = NULL;
}

/* The hand-off's other side: resumes every request waiting. */
static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&srv.mu);
    for (;;) {
        while (!srv.head) {
            srv.sleeping = true;
            pthread_cond_wait(&srv.cv, &srv.mu);
            srv.sleeping = false;
        }
        request *list = srv.head;
        srv.head = NULL;
        pthread_mutex_unlock(&srv.mu);
        for (request *r = list, *next; r; r = next) {
            next = r->next;
            r->done = true;
            MHD_resume_connection(r->c);
        }
        pthread_mutex_lock(&srv.mu);
    }
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    for (;;) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof(a);
        int fd = accept4(srv.listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            MHD_add_connection(srv.d, fd, (struct sockaddr *)&a, alen);
        else if (errno == EBADF || errno == EINVAL)
            return NULL;
    }
}

int main(int argc, char **argv)
{
    int port = 0, threads = 2, opt;
    long answer_len = 64, json_len = -1;
    while ((opt = getopt(argc, argv, "p:t:a:j:srn")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'a': answer_len = atol(optarg); break;
        case 'j': json_len = atol(optarg); break;
        case 's':
        case 'r':
        case 'n':
            if (srv.mode && srv.mode != opt) {
                fprintf(stderr, "mhd_floor: one of -s, -r and -n\n");
                return 2;
            }
            srv.mode = (char)opt;
            break;
        default:
            fprintf(stderr,
                    "usage: mhd_floor -p PORT [-t THREADS] [-a BYTES] [-j JSON_LEN] [-s | -r | -n]\n");
            return 2;
        }
    }
    if (port <= 0 || threads < 1 || answer_len < 0) {
        fprintf(stderr, "mhd_floor: -p PORT is needed; -t >= 1, -a >= 0\n");
        return 2;
    }
    srv.answer_len = (size_t)answer_len;
    srv.answer = calloc(1, srv.answer_len + 1);
    if (json_len >= 0)
        snprintf(srv.json_len, sizeof(srv.json_len), "%ld", json_len);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int on = 1;
    srv.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!srv.answer || srv.listen_fd < 0 ||
        setsockopt(srv.listen_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        bind(srv.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(srv.listen_fd, SOMAXCONN) != 0) {
        fprintf(stderr, "mhd_floor: cannot listen on port %d: %s\n", port, strerror(errno));
        return 1;
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
    struct MHD_OptionItem pool[] = {
        {threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    srv.d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                             on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 60u,
                             MHD_OPTION_ARRAY, pool, MHD_OPTION_END);
    pthread_t at, wt;
    if (!srv.d || pthread_create(&at, NULL, acceptor, NULL) != 0 ||
        (srv.mode == 's' && pthread_create(&wt, NULL, worker, NULL) != 0)) {
        fprintf(stderr, "mhd_floor: cannot start\n");
        return 1;
    }
    printf("listening on 127.0.0.1:%d, %d threads, %s\n", port, threads,
           srv.mode == 's'   ? "hand-off"
           : srv.mode == 'r' ? "suspend and resume at once"
           : srv.mode == 'n' ? "answered on the next pass, not suspended"
                             : "direct");
    fflush(stdout);
    for (;;)   /* until SIGINT or SIGTERM ends the process */
        pause();
}
