/* http_load.c: the HTTP load engine of http_load.h: one thread, epoll,
 * keep-alive connections with one request in flight each.
 *
 * Open loop (rate > 0): request i is due at start + i / rate whatever
 * happens to the others; it goes out on a free connection and its latency
 * runs from the moment it was due to the end of its answer, so time spent
 * waiting for a free connection counts too and a slow answer is not
 * counted once for the requests it held up (no coordinated omission).
 * Closed loop (rate 0): each connection sends its next request as soon as
 * its answer is complete, as wrk does. Needs Linux 5.11 (epoll_pwait2)
 * for microsecond sleeps between requests. */
#define _GNU_SOURCE
#include "http_load.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX  8192              /* an answer's status line and headers */
#define DRAIN_NS  10000000000LL     /* wait for answers after the last request */
#define LATE_NS   1000000LL

typedef struct conn {
    int     fd;
    bool    busy;
    int64_t due_ns;        /* when the request in flight was due (closed: sent) */
    size_t  got;           /* bytes of the answer so far */
    size_t  need;          /* header + Content-Length; 0 until the header is complete */
    int     status;
    char    head[HEAD_MAX + 1];
} conn;

struct hl_load {
    struct sockaddr_in addr;
    const char *request;
    size_t      request_len;
    int         ep;
    int         nconns;
    conn       *conns;
    conn      **idle;      /* a stack of free connections */
    int         nidle;
    uint32_t   *lat;
    size_t      lat_cap;
};

static void say(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

bool hl_parse_url(const char *url, struct sockaddr_in *addr, char *hostport,
                  size_t hostport_len, char *path, size_t path_len, char *err, size_t err_len)
{
    const char *p = url;
    if (strncmp(p, "http://", 7) == 0)
        p += 7;
    else if (strstr(p, "://")) {
        say(err, err_len, "URL %s: only http:// is supported", url);
        return false;
    }
    const char *colon = strchr(p, ':'), *slash = strchr(p, '/');
    if (!colon || (slash && slash < colon) || colon == p || colon - p > 253) {
        say(err, err_len, "URL %s: want HOST:PORT or http://HOST:PORT[/PATH]", url);
        return false;
    }
    char host[256], *end;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && *end != '/') || port <= 0 || port > 65535) {
        say(err, err_len, "URL %s: bad port", url);
        return false;
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        say(err, err_len, "URL %s: cannot resolve %s: %s", url, host, gai_strerror(rc));
        return false;
    }
    *addr = *(struct sockaddr_in *)res->ai_addr;
    addr->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    snprintf(hostport, hostport_len, "%s:%ld", host, port);
    snprintf(path, path_len, "%s", *end ? end : "/");
    return true;
}

char *hl_build_request(const char *hostport, const char *path, const char *body,
                       size_t body_len, const char *const *headers, int nheaders, size_t *len)
{
    bool have_type = false;
    size_t cap = strlen(path) + strlen(hostport) + body_len + 256;
    for (int i = 0; i < nheaders; i++) {
        cap += strlen(headers[i]) + 2;
        have_type |= strncasecmp(headers[i], "content-type:", 13) == 0;
    }
    char *req = malloc(cap);
    if (!req)
        return NULL;
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: %s\r\n", body ? "POST" : "GET", path,
                     hostport);
    if (body) {
        n += snprintf(req + n, cap - (size_t)n, "Content-Length: %zu\r\n", body_len);
        if (!have_type)
            n += snprintf(req + n, cap - (size_t)n, "Content-Type: application/json\r\n");
    }
    for (int i = 0; i < nheaders; i++)
        n += snprintf(req + n, cap - (size_t)n, "%s\r\n", headers[i]);
    n += snprintf(req + n, cap - (size_t)n, "\r\n");
    if (body)
        memcpy(req + n, body, body_len);
    *len = (size_t)n + (body ? body_len : 0);
    return req;
}

static int connect_to(const struct sockaddr_in *addr, char *err, size_t err_len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) != 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &addr->sin_addr, ip, sizeof(ip));
        say(err, err_len, "cannot connect to %s:%d: %s", ip, ntohs(addr->sin_port),
            strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Parses the complete header in c->head (hlen bytes up to the blank line):
 * the status and Content-Length. Answers must carry a Content-Length. */
static bool parse_head(conn *c, size_t hlen, char *err, size_t err_len)
{
    c->status = 0;
    if (strncmp(c->head, "HTTP/1.", 7) == 0 && hlen > 12)
        c->status = atoi(c->head + 9);
    const char *line = strstr(c->head, "\r\n");
    long long length = -1;
    while (line && line + 2 < c->head + hlen) {
        line += 2;
        if (strncasecmp(line, "content-length:", 15) == 0)
            length = strtoll(line + 15, NULL, 10);
        else if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
            say(err, err_len, "chunked answers are not supported (need Content-Length)");
            return false;
        }
        line = strstr(line, "\r\n");
    }
    if (length < 0) {
        say(err, err_len, "an answer without Content-Length");
        return false;
    }
    c->need = hlen + (size_t)length;
    return true;
}

/* Reads what c has. Returns 1 when the answer is complete, 0 when more is
 * to come, -1 when the connection closed or failed, -2 on an answer this
 * engine cannot read (message in err). Body bytes are counted, not kept. */
static int conn_read(conn *c, char *err, size_t err_len)
{
    for (;;) {
        size_t off = c->need ? 0 : c->got;
        if (off == HEAD_MAX) {
            say(err, err_len, "an answer's header over 8 kB");
            return -2;
        }
        ssize_t n = recv(c->fd, c->head + off, HEAD_MAX - off, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1;
        c->got += (size_t)n;
        if (!c->need) {
            c->head[c->got] = '\0';
            const char *end = memmem(c->head, c->got, "\r\n\r\n", 4);
            if (end && !parse_head(c, (size_t)(end + 4 - c->head), err, err_len))
                return -2;
        }
        if (c->need && c->got >= c->need) {
            if (c->got > c->need) {
                say(err, err_len, "bytes after an answer (nothing was pipelined)");
                return -2;
            }
            return 1;
        }
    }
}

static bool send_all(int fd, const char *buf, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

bool hl_fetch(const struct sockaddr_in *addr, const char *request, size_t request_len,
              int timeout_ms, int *status, char **body, size_t *body_len, char *err,
              size_t err_len)
{
    int fd = connect_to(addr, err, err_len);
    if (fd < 0)
        return false;
    size_t cap = 65536, got = 0, need = 0, hlen = 0;
    char *buf = malloc(cap + 1);
    bool ok = buf && send_all(fd, request, request_len);
    if (!ok)
        say(err, err_len, buf ? "cannot send a request: %s" : "out of memory", strerror(errno));
    int64_t deadline = now_ns() + (int64_t)timeout_ms * 1000000;
    while (ok && (!need || got < need)) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = (deadline - now_ns()) / 1000000;
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
            say(err, err_len, "no answer within %d ms", timeout_ms);
            ok = false;
            break;
        }
        if (got == cap) {
            char *more = realloc(buf, cap * 2 + 1);
            if (!more) {
                say(err, err_len, "out of memory");
                ok = false;
                break;
            }
            buf = more;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + got, cap - got, 0);
        if (n <= 0) {
            say(err, err_len, "the connection closed before the answer was complete");
            ok = false;
            break;
        }
        got += (size_t)n;
        buf[got] = '\0';
        const char *end = hlen ? NULL : memmem(buf, got, "\r\n\r\n", 4);
        if (end) {
            conn c = {.got = got};
            hlen = (size_t)(end + 4 - buf);
            memcpy(c.head, buf, hlen < HEAD_MAX ? hlen : HEAD_MAX);
            c.head[hlen < HEAD_MAX ? hlen : HEAD_MAX] = '\0';
            if (hlen >= HEAD_MAX || !parse_head(&c, hlen, err, err_len)) {
                if (hlen >= HEAD_MAX)
                    say(err, err_len, "an answer's header over 8 kB");
                ok = false;
                break;
            }
            need = c.need;
            *status = c.status;
        }
    }
    close(fd);
    if (!ok) {
        free(buf);
        return false;
    }
    memmove(buf, buf + hlen, need - hlen);
    buf[need - hlen] = '\0';
    *body = buf;
    *body_len = need - hlen;
    return true;
}

static bool conn_open(hl_load *l, conn *c, char *err, size_t err_len)
{
    c->fd = connect_to(&l->addr, err, err_len);
    if (c->fd < 0)
        return false;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        say(err, err_len, "epoll_ctl: %s", strerror(errno));
        close(c->fd);
        c->fd = -1;
        return false;
    }
    c->busy = false;
    return true;
}

static bool conn_reopen(hl_load *l, conn *c, char *err, size_t err_len)
{
    close(c->fd);   /* also removes it from epoll */
    return conn_open(l, c, err, err_len);
}

/* Sends the request on c. The socket is blocking, but with one request
 * in flight per connection the send buffer always has room. */
static bool conn_send(hl_load *l, conn *c, int64_t due_ns)
{
    c->busy = true;
    c->due_ns = due_ns;
    c->got = c->need = 0;
    return send_all(c->fd, l->request, l->request_len);
}

hl_load *hl_open(const struct sockaddr_in *addr, const char *request, size_t request_len,
                 int nconns, char *err, size_t err_len)
{
    if (nconns < 1 || nconns > HL_MAX_CONNS) {
        say(err, err_len, "connections must be 1..%d", HL_MAX_CONNS);
        return NULL;
    }
    hl_load *l = calloc(1, sizeof(*l));
    if (!l || !(l->conns = calloc((size_t)nconns, sizeof(*l->conns))) ||
        !(l->idle = malloc((size_t)nconns * sizeof(*l->idle)))) {
        say(err, err_len, "out of memory");
        hl_close(l);
        return NULL;
    }
    l->addr = *addr;
    l->request = request;
    l->request_len = request_len;
    for (int i = 0; i < nconns; i++)
        l->conns[i].fd = -1;
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    if (l->ep < 0) {
        say(err, err_len, "epoll_create1: %s", strerror(errno));
        l->nconns = nconns;
        hl_close(l);
        return NULL;
    }
    l->nconns = nconns;
    prctl(PR_SET_TIMERSLACK, 1UL);   /* wake up on time, not up to 50 us late */
    for (int i = 0; i < nconns; i++) {
        if (!conn_open(l, &l->conns[i], err, err_len)) {
            hl_close(l);
            return NULL;
        }
        l->idle[l->nidle++] = &l->conns[i];
    }
    return l;
}

void hl_close(hl_load *l)
{
    if (!l)
        return;
    for (int i = 0; l->conns && i < l->nconns; i++)
        if (l->conns[i].fd >= 0)
            close(l->conns[i].fd);
    if (l->ep > 0)
        close(l->ep);
    free(l->conns);
    free(l->idle);
    free(l->lat);
    free(l);
}

static bool keep_latency(hl_load *l, size_t n, uint32_t us)
{
    if (n == l->lat_cap) {
        size_t cap = l->lat_cap ? l->lat_cap * 2 : 1 << 16;
        uint32_t *more = realloc(l->lat, cap * sizeof(*more));
        if (!more)
            return false;
        l->lat = more;
        l->lat_cap = cap;
    }
    l->lat[n] = us;
    return true;
}

bool hl_run(hl_load *l, double rate, double seconds, hl_stats *st, char *err, size_t err_len)
{
    memset(st, 0, sizeof(*st));
    bool closed = rate == 0;
    double want = closed ? 0 : rate * seconds;
    if (!closed && (want < 1 || want > 1e8)) {
        say(err, err_len, "rate x seconds must be 1..1e8 requests");
        return false;
    }
    size_t total = closed ? SIZE_MAX : (size_t)llround(want);   /* closed: until the end */
    double period = closed ? 0 : 1e9 / rate;
    size_t next = 0, inflight = 0;
    int64_t start = now_ns(), t = start, last = start;
    int64_t end = start + (int64_t)(seconds * 1e9);   /* closed: no request sent after */
    int64_t deadline = closed ? end + DRAIN_NS : start + (int64_t)((double)total * period) +
                       DRAIN_NS;
    struct epoll_event evs[64];

    while ((next < total || inflight > 0) && t < deadline) {
        if (closed && t >= end) {
            total = next;   /* stop sending; wait for what is in flight, uncounted */
            if (inflight == 0)
                break;
        }
        int64_t due = closed ? t : start + (int64_t)((double)next * period);
        while (next < total && due <= t && l->nidle > 0) {
            conn *c = l->idle[--l->nidle];
            st->late += t - due >= LATE_NS;
            if (conn_send(l, c, due)) {
                inflight++;
                st->max_inflight = inflight > st->max_inflight ? inflight : st->max_inflight;
            } else {
                st->lost_write++;
                if (!conn_reopen(l, c, err, err_len))
                    return false;
                l->idle[l->nidle++] = c;
            }
            next++;
            due = closed ? t : start + (int64_t)((double)next * period);
        }
        /* sleep until the next request is due (or, with none free or none
         * left, until an answer comes), waking for answers meanwhile */
        int64_t wake = next < total && l->nidle > 0 ? due : closed && t < end ? end : deadline;
        int64_t wait = wake > t ? wake - t : 0;
        struct timespec ts = {.tv_sec = wait / 1000000000LL, .tv_nsec = wait % 1000000000LL};
        int n = epoll_pwait2(l->ep, evs, 64, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            say(err, err_len, "epoll_pwait2: %s", strerror(errno));
            return false;
        }
        t = now_ns();
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (!c->busy) {          /* closed by the server while idle: */
                if (!conn_reopen(l, c, err, err_len))   /* it stays in the idle stack */
                    return false;
                continue;
            }
            int r = conn_read(c, err, err_len);
            if (r == 0)
                continue;
            if (r == -2)
                return false;
            bool counted = !closed || c->due_ns < end;
            if (r == 1 && counted && (!closed || t <= end)) {
                uint32_t us = (uint32_t)((t - c->due_ns) / 1000);
                if (!keep_latency(l, st->answered, us)) {
                    say(err, err_len, "out of memory");
                    return false;
                }
                st->answered++;
                st->sum_us += us;
                last = t;
                if (c->status < 200 || c->status > 399) {
                    st->bad_status++;
                    if (!st->first_bad_status)
                        st->first_bad_status = c->status;
                }
            } else if (r == -1) {
                st->lost_read += counted;
            }
            c->busy = false;
            if (r == -1 && !conn_reopen(l, c, err, err_len))
                return false;
            inflight--;
            l->idle[l->nidle++] = c;
        }
    }
    st->elapsed_ns = closed ? end - start : last - start;
    st->timeouts = closed ? 0 : (long long)(total - next + inflight);
    /* open loop, unanswered requests still hold connections: start afresh */
    for (int i = 0; i < l->nconns && inflight > 0; i++) {
        conn *c = &l->conns[i];
        if (c->busy) {
            c->busy = false;
            if (!conn_reopen(l, c, err, err_len))
                return false;
            l->idle[l->nidle++] = c;
        }
    }
    st->lat = l->lat;
    return true;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void hl_sort(uint32_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u32);
}

uint32_t hl_percentile(const uint32_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    return v[rank > 0 ? rank - 1 : 0];
}
