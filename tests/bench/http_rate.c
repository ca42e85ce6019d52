/* http_rate.c: an open-loop HTTP load generator for tests/bench/serve_http: requests go
 * out at a fixed rate, each one's latency counted from when it was due (-r 0: closed loop).
 *
 *   http_rate -r RATE|0 -d SECONDS [-c CONNS] [-b BODY_FILE] [-H 'Name: value']... URL
 *
 * wrk is closed-loop: each connection sends its next request when the last
 * one is answered, so a slow answer delays the requests behind it and is
 * counted once (coordinated omission). Here request i is due at
 * start + i / RATE whatever happens to the others; it goes out on a free
 * connection of CONNS (default 32) kept alive, and its latency runs from
 * the moment it was due to the end of its answer, so time spent waiting
 * for a free connection counts too. With BODY_FILE every request is a POST
 * of that file's bytes (Content-Type: application/json unless a -H sets
 * it), else a GET. URL: http://IPV4:PORT/PATH. One thread, epoll; needs
 * Linux 5.11 (epoll_pwait2) for microsecond sleeps between requests.
 *
 * Prints a short report, then one line with the fields of wrk_post.lua's
 * WRKSTAT line (serve_http reads both alike) and a few of its own:
 *
 *   WRKSTAT requests=N duration_us=D rps=R p50_us=.. p90_us=.. p99_us=..
 *           max_us=.. mean_us=.. connect=0 read=.. write=.. status=.. timeout=..
 *           target_rps=.. p999_us=.. max_inflight=.. late=..
 *
 * requests: answers received (any status); read / write: requests lost to
 * a connection closed or failing (the connection is reopened); status:
 * answers not 2xx/3xx; timeout: requests unanswered 10 s after the last
 * was due; max_inflight: most requests outstanding at once (CONNS means
 * the connections ran out and requests waited for one); late: requests
 * sent 1 ms or more after they were due (no free connection, or this
 * program starved of CPU). Exit status 0, or 1 on a usage or setup error
 * (message on stderr).
 *
 * With -r 0 the loop is closed, as wrk's and tests/tools/grpc_rate.c's: each
 * connection sends its next request as soon as its answer is complete, for
 * SECONDS; a latency runs from the request's send, answers count until
 * SECONDS are up, and requests still in flight then are left (timeout=0). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS    4096
#define MAX_HEADERS  16
#define HEAD_MAX     8192               /* an answer's status line and headers */
#define DRAIN_NS     10000000000LL      /* wait for answers after the last request */
#define LATE_NS      1000000LL

typedef struct conn {
    int     fd;
    bool    busy;
    int64_t due_ns;        /* when the request in flight was due */
    size_t  got;           /* bytes of the answer so far */
    size_t  need;          /* header + Content-Length; 0 until the header is complete */
    int     status;
    char    head[HEAD_MAX + 1];
} conn;

static struct sockaddr_in addr;
static char  *request;     /* the whole request, built once */
static size_t request_len;
static int    ep;

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "http_rate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Opens c's connection (blocking connect: loopback answers at once) and
 * registers it with epoll; c->data.ptr is c. */
static void conn_open(conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        die("cannot connect: %s", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        die("epoll_ctl: %s", strerror(errno));
    c->busy = false;
}

static void conn_reopen(conn *c)
{
    close(c->fd);   /* also removes it from epoll */
    conn_open(c);
}

/* Sends the request on c. The socket is blocking, but with one request
 * in flight per connection the send buffer always has room. */
static bool conn_send(conn *c, int64_t due_ns)
{
    c->busy = true;
    c->due_ns = due_ns;
    c->got = c->need = 0;
    for (size_t off = 0; off < request_len;) {
        ssize_t n = send(c->fd, request + off, request_len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

/* Parses the complete header in c->head (hlen bytes up to the blank line):
 * the status and Content-Length. Answers must carry a Content-Length. */
static void parse_head(conn *c, size_t hlen)
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
        else if (strncasecmp(line, "transfer-encoding:", 18) == 0)
            die("%s", "chunked answers are not supported (need Content-Length)");
        line = strstr(line, "\r\n");
    }
    if (length < 0)
        die("%s", "an answer without Content-Length");
    c->need = hlen + (size_t)length;
}

/* Reads what c has. Returns 1 when the answer is complete, 0 when more is
 * to come, -1 when the connection closed or failed. Body bytes are counted,
 * not kept. */
static int conn_read(conn *c)
{
    for (;;) {
        size_t off = c->need ? 0 : c->got;
        if (off == HEAD_MAX)
            die("%s", "an answer's header over 8 kB");
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
            if (end)
                parse_head(c, (size_t)(end + 4 - c->head));
        }
        if (c->need && c->got >= c->need) {
            if (c->got > c->need)
                die("%s", "bytes after an answer (nothing was pipelined)");
            return 1;
        }
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile of the n sorted values (nearest rank). */
static uint32_t percentile(const uint32_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    return v[rank > 0 ? rank - 1 : 0];
}

/* Builds the request for URL (http://IPV4:PORT/PATH) with the body and
 * extra headers; sets addr. */
static void build_request(const char *url, const char *body, size_t body_len,
                          const char **headers, int nheaders)
{
    char host[64];
    int port = 0, used = 0;
    if (sscanf(url, "http://%63[0-9.]:%d%n", host, &port, &used) != 2 || port <= 0 || port > 65535)
        die("URL must be http://IPV4:PORT/PATH, not %s", url);
    const char *path = url[used] ? url + used : "/";
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        die("bad address %s", host);

    bool have_type = false;
    size_t cap = strlen(path) + strlen(host) + body_len + 256;
    for (int i = 0; i < nheaders; i++) {
        cap += strlen(headers[i]) + 2;
        have_type |= strncasecmp(headers[i], "content-type:", 13) == 0;
    }
    request = malloc(cap);
    if (!request)
        die("%s", "out of memory");
    int n = snprintf(request, cap, "%s %s HTTP/1.1\r\nHost: %s:%d\r\n", body ? "POST" : "GET",
                     path, host, port);
    if (body) {
        n += snprintf(request + n, cap - (size_t)n, "Content-Length: %zu\r\n", body_len);
        if (!have_type)
            n += snprintf(request + n, cap - (size_t)n, "Content-Type: application/json\r\n");
    }
    for (int i = 0; i < nheaders; i++)
        n += snprintf(request + n, cap - (size_t)n, "%s\r\n", headers[i]);
    n += snprintf(request + n, cap - (size_t)n, "\r\n");
    if (body)
        memcpy(request + n, body, body_len);
    request_len = (size_t)n + (body ? body_len : 0);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *data = malloc(size > 0 ? (size_t)size : 1);
    if (!data || size < 0 || fread(data, 1, (size_t)size, f) != (size_t)size)
        die("cannot read %s", path);
    fclose(f);
    *len = (size_t)size;
    return data;
}

int main(int argc, char **argv)
{
    double rate = 0, seconds = 0;
    int nconns = 32, nheaders = 0, opt;
    const char *body_path = NULL, *headers[MAX_HEADERS];
    while ((opt = getopt(argc, argv, "r:d:c:b:H:")) != -1) {
        switch (opt) {
        case 'r': rate = atof(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 'b': body_path = optarg; break;
        case 'H':
            if (nheaders == MAX_HEADERS)
                die("%s", "too many -H");
            headers[nheaders++] = optarg;
            break;
        default:
            die("%s", "usage: http_rate -r RATE (0: closed loop) -d SECONDS [-c CONNS] "
                      "[-b BODY_FILE] [-H 'Name: value']... URL");
        }
    }
    if (optind != argc - 1 || rate < 0 || seconds <= 0 || nconns < 1 || nconns > MAX_CONNS)
        die("%s", "usage: http_rate -r RATE (0: closed loop) -d SECONDS [-c CONNS 1..4096] "
                  "[-b BODY_FILE] [-H 'Name: value']... URL");
    size_t body_len = 0;
    char *body = body_path ? read_file(body_path, &body_len) : NULL;
    build_request(argv[optind], body, body_len, headers, nheaders);

    bool closed = rate == 0;
    double want = closed ? 0 : rate * seconds;
    if (!closed && (want < 1 || want > 1e8))
        die("%s", "RATE x SECONDS must be 1..1e8 requests");
    size_t total = closed ? SIZE_MAX : (size_t)llround(want);   /* closed: until SECONDS */
    size_t lat_cap = closed ? 1 << 20 : total;
    uint32_t *lat = malloc(lat_cap * sizeof(*lat));      /* microseconds, answer order */
    conn *conns = calloc((size_t)nconns, sizeof(*conns));
    conn **idle = malloc((size_t)nconns * sizeof(*idle)); /* a stack of free connections */
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (!lat || !conns || !idle || ep < 0)
        die("%s", "out of memory");
    prctl(PR_SET_TIMERSLACK, 1UL);   /* wake up on time, not up to 50 us late */

    int nidle = 0;
    for (int i = 0; i < nconns; i++) {
        conn_open(&conns[i]);
        idle[nidle++] = &conns[i];
    }

    /* request i is due at start + i * period; closed, when it is sent */
    double period = closed ? 0 : 1e9 / rate;
    size_t next = 0, answered = 0, inflight = 0, max_inflight = 0, late = 0;
    long long lost_read = 0, lost_write = 0, bad_status = 0;
    double sum_us = 0;
    int64_t start = now_ns(), t = start;
    int64_t deadline = closed ? start + (int64_t)(seconds * 1e9)
                              : start + (int64_t)((double)total * period) + DRAIN_NS;
    struct epoll_event evs[64];

    while ((next < total || inflight > 0) && t < deadline) {
        int64_t due = closed ? t : start + (int64_t)((double)next * period);
        while (next < total && due <= t && nidle > 0) {
            conn *c = idle[--nidle];
            late += t - due >= LATE_NS;
            if (conn_send(c, due)) {
                inflight++;
                max_inflight = inflight > max_inflight ? inflight : max_inflight;
            } else {
                lost_write++;
                conn_reopen(c);
                idle[nidle++] = c;
            }
            next++;
            due = closed ? t : start + (int64_t)((double)next * period);
        }
        /* sleep until the next request is due (or, with none free or none
         * left, until an answer comes), waking for answers meanwhile */
        int64_t wake = next < total && nidle > 0 ? due : deadline;
        int64_t wait = wake > t ? wake - t : 0;
        struct timespec ts = {.tv_sec = wait / 1000000000LL, .tv_nsec = wait % 1000000000LL};
        int n = epoll_pwait2(ep, evs, 64, &ts, NULL);
        if (n < 0 && errno != EINTR)
            die("epoll_pwait2: %s", strerror(errno));
        t = now_ns();
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (!c->busy) {          /* closed by the server while idle: */
                conn_reopen(c);      /* it stays in the idle stack */
                continue;
            }
            int r = conn_read(c);
            if (r == 0)
                continue;
            if (r == 1 && answered == lat_cap) {   /* only closed: total bounds it */
                lat_cap *= 2;
                lat = realloc(lat, lat_cap * sizeof(*lat));
                if (!lat)
                    die("%s", "out of memory");
            }
            if (r == 1) {
                uint32_t us = (uint32_t)((t - c->due_ns) / 1000);
                lat[answered++] = us;
                sum_us += us;
                bad_status += c->status < 200 || c->status > 399;
                c->busy = false;
            } else {
                lost_read++;
                conn_reopen(c);
            }
            inflight--;
            idle[nidle++] = c;
        }
    }
    int64_t elapsed = t - start;
    long long timeouts = closed ? 0 : (long long)(total - next + inflight);

    qsort(lat, answered, sizeof(*lat), cmp_u32);
    uint32_t p50 = percentile(lat, answered, 50), p90 = percentile(lat, answered, 90);
    uint32_t p99 = percentile(lat, answered, 99), p999 = percentile(lat, answered, 99.9);
    uint32_t max = answered ? lat[answered - 1] : 0;
    double rps = (double)answered / ((double)elapsed / 1e9);
    double mean = answered ? sum_us / (double)answered : 0;
    if (closed)
        printf("closed loop over %d connections to %s for %.1f s\n", nconns, argv[optind],
               seconds);
    else
        printf("%zu requests due at %.0f/s over %d connections to %s for %.1f s\n",
               total, rate, nconns, argv[optind], seconds);
    printf("  %zu answered in %.2f s: %.1f/s; latency from when due, us: p50 %u, p90 %u, "
           "p99 %u, p99.9 %u, max %u, mean %.1f\n", answered, (double)elapsed / 1e9, rps,
           p50, p90, p99, p999, max, mean);
    printf("  at most %zu in flight; %zu sent 1 ms or more late; lost: %lld read, %lld write, "
           "%lld unanswered; %lld not 2xx/3xx\n", max_inflight, late, lost_read, lost_write,
           timeouts, bad_status);
    printf("WRKSTAT requests=%zu duration_us=%lld rps=%.1f p50_us=%u p90_us=%u p99_us=%u "
           "max_us=%u mean_us=%.1f connect=0 read=%lld write=%lld status=%lld timeout=%lld "
           "target_rps=%.1f p999_us=%u max_inflight=%zu late=%zu\n",
           answered, (long long)(elapsed / 1000), rps, p50, p90, p99, max, mean, lost_read,
           lost_write, bad_status, timeouts, rate, p999, max_inflight, late);
    return 0;
}
