/* http_load.h: an epoll HTTP/1.1 load engine over keep-alive connections,
 * closed loop (N in flight) or open loop (requests due at fixed times),
 * with every latency kept; used by dlserve-perf (perf.c) and
 * tests/bench/http_rate.c. Plain C11 and POSIX, no other library, so that
 * a benchmark script can compile it alone with cc. */
#ifndef DL_HTTP_LOAD_H
#define DL_HTTP_LOAD_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HL_MAX_CONNS 4096

typedef struct hl_load hl_load;

/* One window's figures. lat holds the latencies (microseconds) of the
 * answers in the order they came; it belongs to the engine and stays valid
 * until the next hl_run or hl_close. */
typedef struct hl_stats {
    size_t     answered;        /* answers received (any status) */
    uint32_t  *lat;
    double     sum_us;
    int64_t    elapsed_ns;      /* from the window's start to its last answer counted */
    long long  lost_read;       /* requests lost to a connection closed or failing */
    long long  lost_write;
    long long  bad_status;      /* answers not 2xx/3xx */
    long long  timeouts;        /* open loop: unanswered 10 s after the last was due */
    size_t     max_inflight;
    size_t     late;            /* sent 1 ms or more after they were due */
    int        first_bad_status;  /* the status of the first answer not 2xx/3xx; 0: none */
} hl_stats;

/* Parses URL ("http://HOST:PORT", "HOST:PORT", an optional /PATH after
 * either; HOST a name or an IPv4 address) into addr, the host:port for a
 * Host header (hostport, hostport_len bytes) and the path (path, path_len
 * bytes; "/" when none). Returns false with a message in err. */
bool hl_parse_url(const char *url, struct sockaddr_in *addr, char *hostport,
                  size_t hostport_len, char *path, size_t path_len, char *err, size_t err_len);

/* Builds a request (a POST with body when body is non-NULL, else a GET)
 * with the extra header lines (each "Name: value"); Content-Type
 * application/json unless one of them sets it. Returns a malloc'ed buffer
 * and its length in *len, NULL when out of memory. */
char *hl_build_request(const char *hostport, const char *path, const char *body,
                       size_t body_len, const char *const *headers, int nheaders, size_t *len);

/* One request and its answer on a connection of its own, blocking, for at
 * most timeout_ms: the answer's status in *status and its body (malloc'ed,
 * NUL-terminated) in *body, *body_len. Returns false with a message in err
 * when the connection or the exchange fails. */
bool hl_fetch(const struct sockaddr_in *addr, const char *request, size_t request_len,
              int timeout_ms, int *status, char **body, size_t *body_len, char *err,
              size_t err_len);

/* Opens nconns keep-alive connections to addr for request (kept, not
 * copied). Returns NULL with a message in err when one does not connect. */
hl_load *hl_open(const struct sockaddr_in *addr, const char *request, size_t request_len,
                 int nconns, char *err, size_t err_len);

/* One window on l's connections. rate > 0: open loop, rate x seconds
 * requests, request i due at start + i / rate, its latency from when it
 * was due, waiting for answers up to 10 s after the last was due. rate 0:
 * closed loop for seconds, each connection sending its next request when
 * its answer is complete, a latency from the send; requests still in
 * flight at the end are waited for and not counted, so that the next
 * window starts with every connection free. Returns false with a message
 * in err when a connection cannot be reopened (the server went away) or
 * an answer cannot be read as HTTP/1.1 with a Content-Length. */
bool hl_run(hl_load *l, double rate, double seconds, hl_stats *st, char *err, size_t err_len);

void hl_close(hl_load *l);

/* The p-th percentile (nearest rank) of n sorted values. */
uint32_t hl_percentile(const uint32_t *v, size_t n, double p);

/* Sorts n latencies in place. */
void hl_sort(uint32_t *v, size_t n);

#endif
