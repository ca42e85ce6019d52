/* http_server.c: the HTTP server's life: the listening socket, TLS, the
 * acceptor thread that deals connections out to the event loops
 * (http_loop.c), the connection limits, and a stop that answers the
 * requests in flight. */
#define _GNU_SOURCE   /* accept4, pthread_setname_np; microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* conf->address:conf->port as a socket address (IPv4 or IPv6). */
static dl_status bind_address(const dl_http_conf *conf, struct sockaddr_storage *ss,
                              unsigned *flags, dl_err *err)
{
    memset(ss, 0, sizeof(*ss));
    if (conf->port < 0 || conf->port > 65535)
        return dl_err_set(err, DL_ERR_INVALID, "http.port %lld is not in 0..65535",
                          (long long)conf->port);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, conf->address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)conf->port);
        return DL_OK;
    }
    if (inet_pton(AF_INET6, conf->address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)conf->port);
        *flags |= MHD_USE_IPv6;
        return DL_OK;
    }
    return dl_err_set(err, DL_ERR_INVALID, "http.address '%s' is not an IPv4 or IPv6 address",
                      conf->address);
}

/* Reads the certificate and key named in conf, if any. */
static dl_status load_tls(http_server *h, const dl_http_conf *conf, unsigned *flags, dl_err *err)
{
    bool cert = conf->tls_cert[0] != '\0', key = conf->tls_key[0] != '\0';
    if (!cert && !key)
        return DL_OK;
    if (!cert || !key)
        return dl_err_set(err, DL_ERR_INVALID, "TLS needs both http.tls_cert and http.tls_key");
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return dl_err_set(err, DL_ERR_INVALID, "this libmicrohttpd was built without TLS");
    size_t len;
    dl_status st = dl_file_read(conf->tls_cert, &h->tls_cert, &len, err);
    if (st != DL_OK)
        return dl_err_prefix(err, "http.tls_cert");
    st = dl_file_read(conf->tls_key, &h->tls_key, &len, err);
    if (st != DL_OK)
        return dl_err_prefix(err, "http.tls_key");
    *flags |= MHD_USE_TLS;
    return DL_OK;
}

static void server_free(http_server *h)
{
    if (!h)
        return;
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    free(h->tls_cert);
    if (h->tls_key) {
        /* The private key does not outlive its use. */
        memset(h->tls_key, 0, strlen(h->tls_key));
        free(h->tls_key);
    }
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

/* The listening socket at ss (SO_REUSEADDR, and IPv6 only for an IPv6
 * address, as libmicrohttpd would set them); its port into *port. */
static dl_status listen_on(const struct sockaddr_storage *ss, int *fd, int *port, dl_err *err)
{
    bool v6 = ss->ss_family == AF_INET6;
    socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int on = 1, s = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage at;
    socklen_t atlen = sizeof(at);
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        (v6 && setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) != 0) ||
        bind(s, (const struct sockaddr *)ss, len) != 0 || listen(s, SOMAXCONN) != 0 ||
        getsockname(s, (struct sockaddr *)&at, &atlen) != 0) {
        dl_err_set(err, DL_ERR_IO, "%s", strerror(errno));
        if (s >= 0)
            close(s);
        return DL_ERR_IO;
    }
    *fd = s;
    *port = ntohs(v6 ? ((struct sockaddr_in6 *)&at)->sin6_port
                     : ((struct sockaddr_in *)&at)->sin_port);
    return DL_OK;
}

/* Accepts connections and deals them out to the event loops. Left to
 * accept for themselves, the loops raced for the listening socket, and one
 * of them often took every connection of a burst (all 32 of a benchmark's)
 * while the others stayed idle. */
static void *acceptor_main(void *arg)
{
    http_server *h = arg;
    pthread_setname_np(pthread_self(), "http-accept");
    const struct timespec retry_pause = {.tv_nsec = 10 * 1000 * 1000};   /* before a retry */
    bool short_of_fds = false;
    for (;;) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof(a);
        int fd = accept4(h->listen_fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            short_of_fds = false;
            /* At the limit this one waits here unread and the next ones in
             * the listen backlog (as when MHD accepted), rather than be
             * accepted only to be closed. */
            while (atomic_load(&h->conns) >= (long long)h->max_conns &&
                   !atomic_load(&h->stopping))
                nanosleep(&retry_pause, NULL);
            if (atomic_load(&h->stopping)) {
                close(fd);
                break;
            }
            http_loops_give(h, fd, (struct sockaddr *)&a, alen);
            continue;
        }
        if (atomic_load(&h->stopping))   /* http_stop shut the socket down */
            break;
        if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL) {   /* not a socket now */
            DL_LOG(DL_LOG_ERR, "http", "accept: %s; no more connections are taken",
                   strerror(errno));
            break;
        }
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            if (!short_of_fds)
                DL_LOG(DL_LOG_WARNING, "http", "cannot accept a connection (%s): retrying",
                       strerror(errno));
            short_of_fds = true;
            nanosleep(&retry_pause, NULL);
        }
        /* else EINTR, or an error of that one connection (ECONNABORTED,
         * EPROTO, EPERM, ...), which accept(2) says to take as EAGAIN */
    }
    return NULL;
}

/* As many connections as file descriptors allow, less a reserve (MHD's
 * default, FD_SETSIZE - 4, would turn clients away at 1,020 whatever the
 * descriptor limit). */
static unsigned connection_limit(void)
{
    struct rlimit rl;
    rlim_t fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (fds == RLIM_INFINITY || fds > 1000000)
        fds = 1000000;
    return fds > 2 * HTTP_FD_RESERVE ? (unsigned)(fds - HTTP_FD_RESERVE) : (unsigned)(fds / 2);
}

dl_status http_start(const http_deps *deps, http_server **out, int *port, dl_err *err)
{
    *out = NULL;
    const dl_http_conf *conf = deps->conf;
    if (conf->max_body_bytes < 1)
        return dl_err_set(err, DL_ERR_INVALID, "http.max_body_bytes must be positive");
    http_server *h = calloc(1, sizeof(*h));
    if (!h)
        return dl_err_set(err, DL_ERR_NOMEM, "http server");
    h->deps = deps;
    h->listen_fd = -1;
    atomic_init(&h->stopping, false);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    h->threads = conf->threads > 0 ? (int)conf->threads : cores > 0 ? (int)cores : 1;
    h->max_conns = connection_limit();
    if (conf->max_connections > 0 && conf->max_connections + HTTP_OVER_CONNS < h->max_conns)
        h->max_conns = (unsigned)(conf->max_connections + HTTP_OVER_CONNS);
    /* MHD's epoll without a thread of its own: http_loop.c runs it, and
     * wakes it for new connections and resumes. The listening socket is
     * the acceptor's. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET;
    struct sockaddr_storage ss;
    int bound = 0;
    dl_status st = bind_address(conf, &ss, &flags, err);
    if (st == DL_OK)
        st = load_tls(h, conf, &flags, err);
    if (st == DL_OK && listen_on(&ss, &h->listen_fd, &bound, err) != DL_OK)
        st = dl_err_prefix(err, "cannot listen on %s port %lld", conf->address,
                           (long long)conf->port);
    if (st == DL_OK)
        st = http_loops_start(h, flags, err);
    if (st == DL_OK)
        st = http_metrics_start(h, &ss, flags, err);
    if (st == DL_OK && pthread_create(&h->acceptor, NULL, acceptor_main, h) != 0)
        st = dl_err_set(err, DL_ERR_IO, "cannot start the HTTP acceptor thread");
    if (st != DL_OK) {
        http_metrics_stop(h);
        http_loops_stop(h);
        server_free(h);
        return st;
    }
    if (port)
        *port = bound;
    DL_LOG(DL_LOG_NOTICE, "http",
           "listening on %s://%s%s%s:%d, %d thread%s, up to %u connections%s",
           flags & MHD_USE_TLS ? "https" : "http", flags & MHD_USE_IPv6 ? "[" : "", conf->address,
           flags & MHD_USE_IPv6 ? "]" : "", bound, h->threads, h->threads == 1 ? "" : "s",
           h->max_conns, conf->token[0] ? ", bearer token required" : "");
    *out = h;
    return DL_OK;
}

void http_stop(http_server *h)
{
    if (!h)
        return;
    atomic_store(&h->stopping, true);
    shutdown(h->listen_fd, SHUT_RDWR);   /* accept returns: no new connections */
    pthread_join(h->acceptor, NULL);
    /* Requests already begun are answered (with Connection: close); new
     * ones on open connections get 503. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HTTP_DRAIN_S;
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    while (h->inflight > 0 && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&h->cv, &h->mu, &until);
    int64_t left = h->inflight;
    if (h->waiting > 0)
        DL_LOG(DL_LOG_WARNING, "http", "waiting for the batcher to answer %lld requests",
               (long long)h->waiting);
    /* MHD must not stop with a connection suspended, and a request the
     * batcher holds is resumed only by its completion: wait for those
     * (after batcher_drain there are none). */
    while (h->waiting > 0)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (left > 0)
        DL_LOG(DL_LOG_WARNING, "http", "stopping with %lld requests unanswered after %d s",
               (long long)left, HTTP_DRAIN_S);
    http_loops_stop(h);
    http_metrics_stop(h);   /* scraped until the end */
    server_free(h);
}
