/* http_loop.c: the HTTP event loops: one libmicrohttpd daemon each, run by
 * a thread of ours in MHD's external epoll mode, and the hand-over of the
 * acceptor's connections to them.
 *
 * Why not MHD's own threads (MHD_USE_EPOLL_INTERNAL_THREAD): their loop
 * (MHD_epoll, in 0.9.75 as in later releases) calls epoll_wait again,
 * with the same timeout, whenever one call returned its whole array of 128
 * events, before it handles any of them. The sockets are edge-triggered:
 * when 128 or more turn ready together (a burst of new connections, or of
 * requests on open ones) and nothing follows, that second call sleeps
 * until the next connection timeout (60 s) on events already taken, every
 * request of the burst unread; the timeout then closes them all. MHD_run's
 * pass never sleeps (its timeout is 0); this loop sleeps only between
 * passes, on MHD's epoll descriptor and its own eventfd, for at most what
 * MHD_get_timeout allows.
 *
 * The eventfd also carries resumes: without a thread of its own MHD has no
 * inter-thread channel (it drops MHD_USE_ITC), so MHD_resume_connection
 * wakes nothing, and a resumed connection would wait for the loop's next
 * wake-up for any other reason (at worst the next connection timeout). */
#define _GNU_SOURCE   /* pthread_setname_np; microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* A connection the acceptor has given a loop, not yet added to its MHD. */
typedef struct pending {
    struct pending         *next;
    int                     fd;
    socklen_t               alen;
    struct sockaddr_storage a;
} pending;

struct http_loop {
    struct MHD_Daemon *d;
    pthread_t          thread;
    bool               running;      /* thread started */
    atomic_bool        stop;
    int                wake_fd;      /* eventfd: connections pending, a resume, stop */
    atomic_bool        woken;        /* wake_fd signalled since the loop cleared it */
    pthread_mutex_t    mu;           /* guards the pending list */
    pending           *head, *tail;  /* in the acceptor's order */
};

/* The loop whose thread this is. */
static _Thread_local http_loop *this_loop;

/* Counts open connections, for the acceptor's limit. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)c;
    (void)socket_context;
    http_server *h = cls;
    atomic_fetch_add(&h->conns, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

/* libmicrohttpd's own messages, as warnings on our log. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    DL_LOG(DL_LOG_WARNING, "http", "microhttpd: %s", msg);
}

/* One loop's daemon: no listening socket, no thread of its own. Each may
 * hold every connection (the acceptor keeps the total). */
static struct MHD_Daemon *start_daemon(http_server *h, unsigned flags)
{
    struct MHD_OptionItem opt[3];
    int n = 0;
    if (flags & MHD_USE_TLS) {
        opt[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert};
        opt[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key};
    }
    opt[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    /* The logger first, so that MHD's own messages about later options
     * reach it. */
    return MHD_start_daemon(flags, 0, NULL, NULL, http_on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                            MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
                            MHD_OPTION_CONNECTION_LIMIT, h->max_conns + HTTP_ACCEPT_SLACK,
                            MHD_OPTION_ARRAY, opt, MHD_OPTION_END);
}

/* Signals loop l's eventfd unless a signal is already pending. */
static void wake(http_loop *l)
{
    if (atomic_exchange(&l->woken, true))
        return;
    uint64_t one = 1;
    if (write(l->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        DL_LOG(DL_LOG_WARNING, "http", "cannot wake an event loop: %s", strerror(errno));
}

/* Clears l's eventfd, then gives l's daemon the connections the acceptor
 * left it (MHD closes one it refuses, and says why on the log). The flag
 * goes down after the read: a signal written between the two would
 * otherwise be read with the flag left up, and no later wake would write
 * another. What a wake skipped for the flag being up is taken up here or
 * by the pass that follows. On l's thread: MHD_add_connection on a daemon
 * without a thread of its own is not safe from any other. */
static void take_wake(http_loop *l)
{
    uint64_t count;
    if (read(l->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
        DL_LOG(DL_LOG_WARNING, "http", "event loop wake-up: %s", strerror(errno));
    atomic_store(&l->woken, false);
    pthread_mutex_lock(&l->mu);
    pending *p = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (p) {
        pending *next = p->next;
        MHD_add_connection(l->d, p->fd, (struct sockaddr *)&p->a, p->alen);
        free(p);
        p = next;
    }
}

/* How long the loop may sleep: until MHD's next connection timeout, 0
 * while it has work left (a request it calls again, data already read),
 * -1 (no limit) without either. */
static int wait_ms(struct MHD_Daemon *d)
{
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(d, &ms) != MHD_YES)
        return -1;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void *loop_main(void *arg)
{
    http_loop *l = arg;
    this_loop = l;
    pthread_setname_np(pthread_self(), "http-loop");
    /* As MHD's own threads did: a write to a socket that the client has
     * closed fails with EPIPE rather than kill the daemon, whichever
     * library writes it (MHD passes MSG_NOSIGNAL, TLS may not). */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(l->d, MHD_DAEMON_INFO_EPOLL_FD);
    struct pollfd pf[2] = {{.fd = info->epoll_fd, .events = POLLIN},
                           {.fd = l->wake_fd, .events = POLLIN}};
    const struct timespec retry_pause = {.tv_nsec = 10 * 1000 * 1000};   /* after a failed poll */
    bool warned = false;
    while (!atomic_load(&l->stop)) {
        /* One pass: every ready connection, the resumed ones, the new ones
         * given last time, timeouts. It does not wait. */
        MHD_run(l->d);
        pf[1].revents = 0;
        if (poll(pf, 2, wait_ms(l->d)) < 0 && errno != EINTR) {
            if (!warned)
                DL_LOG(DL_LOG_ERR, "http", "event loop poll: %s", strerror(errno));
            warned = true;
            nanosleep(&retry_pause, NULL);
        }
        if (pf[1].revents & POLLIN)
            take_wake(l);
    }
    return NULL;
}

/* Starts loop l (its daemon, eventfd and thread); stopped with loop_stop
 * even when this fails part-way. */
static dl_status loop_start(http_server *h, http_loop *l, unsigned flags, dl_err *err)
{
    l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->wake_fd < 0)
        return dl_err_set(err, DL_ERR_IO, "cannot start an HTTP event loop: eventfd: %s",
                          strerror(errno));
    errno = 0;
    l->d = start_daemon(h, flags);
    if (!l->d)
        return dl_err_set(err, DL_ERR_IO, "cannot start the HTTP event loops%s%s",
                          errno ? ": " : "", errno ? strerror(errno) : " (see the log)");
    if (pthread_create(&l->thread, NULL, loop_main, l) != 0)
        return dl_err_set(err, DL_ERR_IO, "cannot start an HTTP event loop thread");
    l->running = true;
    return DL_OK;
}

/* Stops loop l's thread, closes what it was never given, then stops its
 * daemon (which closes its connections). */
static void loop_stop(http_loop *l)
{
    if (l->running) {
        atomic_store(&l->stop, true);
        wake(l);
        pthread_join(l->thread, NULL);
    }
    for (pending *p = l->head, *next; p; p = next) {
        next = p->next;
        close(p->fd);
        free(p);
    }
    if (l->d)
        MHD_stop_daemon(l->d);
    if (l->wake_fd >= 0)
        close(l->wake_fd);
    pthread_mutex_destroy(&l->mu);
}

dl_status http_loops_start(http_server *h, unsigned flags, dl_err *err)
{
    h->loops = calloc((size_t)h->threads, sizeof(*h->loops));
    if (!h->loops)
        return dl_err_set(err, DL_ERR_NOMEM, "HTTP event loops");
    for (int i = 0; i < h->threads; i++) {
        h->loops[i].wake_fd = -1;
        atomic_init(&h->loops[i].stop, false);
        atomic_init(&h->loops[i].woken, false);
        pthread_mutex_init(&h->loops[i].mu, NULL);
    }
    for (int i = 0; i < h->threads; i++) {
        dl_status st = loop_start(h, &h->loops[i], flags, err);
        if (st != DL_OK) {
            http_loops_stop(h);
            return st;
        }
    }
    return DL_OK;
}

void http_loops_give(http_server *h, int fd, const struct sockaddr *a, socklen_t alen)
{
    /* Round robin: a burst of new connections spreads over every loop. */
    unsigned i = atomic_fetch_add(&h->next_loop, 1) % (unsigned)h->threads;
    http_loop *l = &h->loops[i];
    pending *p = malloc(sizeof(*p));
    if (!p) {
        DL_LOG(DL_LOG_WARNING, "http", "out of memory: a new connection is closed");
        close(fd);
        return;
    }
    *p = (pending){.next = NULL, .fd = fd, .alen = alen};
    memcpy(&p->a, a, alen < sizeof(p->a) ? alen : sizeof(p->a));
    pthread_mutex_lock(&l->mu);
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    pthread_mutex_unlock(&l->mu);
    wake(l);
}

void http_loops_stop(http_server *h)
{
    if (!h->loops)
        return;
    for (int i = 0; i < h->threads; i++)
        loop_stop(&h->loops[i]);
    free(h->loops);
    h->loops = NULL;
}

http_loop *http_loop_current(void)
{
    return this_loop;
}

void http_loop_resume(http_loop *l, struct MHD_Connection *c)
{
    MHD_resume_connection(c);
    wake(l);   /* after the resume: the pass that the wake-up brings sees it */
}
