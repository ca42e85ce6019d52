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
 * With -r 0 the loop is closed, as wrk's: each
 * connection sends its next request as soon as its answer is complete, for
 * SECONDS; a latency runs from the request's send, answers count until
 * SECONDS are up, and requests still in flight then are left (timeout=0).
 *
 * The engine is dlserve-perf's (src/perf/http_load.c); build with
 *   cc -O2 -std=c11 -I src/perf tests/bench/http_rate.c src/perf/http_load.c -lm */
#define _GNU_SOURCE
#include "http_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_HEADERS 16

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "http_rate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
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
    static const char usage[] = "usage: http_rate -r RATE (0: closed loop) -d SECONDS "
                                "[-c CONNS 1..4096] [-b BODY_FILE] [-H 'Name: value']... URL";
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
            die("%s", usage);
        }
    }
    if (optind != argc - 1 || rate < 0 || seconds <= 0 || nconns < 1 || nconns > HL_MAX_CONNS)
        die("%s", usage);
    const char *url = argv[optind];
    size_t body_len = 0, request_len;
    char *body = body_path ? read_file(body_path, &body_len) : NULL;
    char hostport[300], path[4096], err[512];
    struct sockaddr_in addr;
    if (!hl_parse_url(url, &addr, hostport, sizeof(hostport), path, sizeof(path), err,
                      sizeof(err)))
        die("%s", err);
    char *request = hl_build_request(hostport, path, body, body_len, headers, nheaders,
                                     &request_len);
    if (!request)
        die("%s", "out of memory");
    hl_load *load = hl_open(&addr, request, request_len, nconns, err, sizeof(err));
    hl_stats st;
    if (!load || !hl_run(load, rate, seconds, &st, err, sizeof(err)))
        die("%s", err);

    hl_sort(st.lat, st.answered);
    uint32_t p50 = hl_percentile(st.lat, st.answered, 50);
    uint32_t p90 = hl_percentile(st.lat, st.answered, 90);
    uint32_t p99 = hl_percentile(st.lat, st.answered, 99);
    uint32_t p999 = hl_percentile(st.lat, st.answered, 99.9);
    uint32_t max = st.answered ? st.lat[st.answered - 1] : 0;
    double secs = (double)st.elapsed_ns / 1e9;
    double rps = secs > 0 ? (double)st.answered / secs : 0;
    double mean = st.answered ? st.sum_us / (double)st.answered : 0;
    if (rate == 0)
        printf("closed loop over %d connections to %s for %.1f s\n", nconns, url, seconds);
    else
        printf("%.0f requests due at %.0f/s over %d connections to %s for %.1f s\n",
               rate * seconds, rate, nconns, url, seconds);
    printf("  %zu answered in %.2f s: %.1f/s; latency from when due, us: p50 %u, p90 %u, "
           "p99 %u, p99.9 %u, max %u, mean %.1f\n", st.answered, secs, rps, p50, p90, p99,
           p999, max, mean);
    printf("  at most %zu in flight; %zu sent 1 ms or more late; lost: %lld read, %lld write, "
           "%lld unanswered; %lld not 2xx/3xx\n", st.max_inflight, st.late, st.lost_read,
           st.lost_write, st.timeouts, st.bad_status);
    printf("WRKSTAT requests=%zu duration_us=%lld rps=%.1f p50_us=%u p90_us=%u p99_us=%u "
           "max_us=%u mean_us=%.1f connect=0 read=%lld write=%lld status=%lld timeout=%lld "
           "target_rps=%.1f p999_us=%u max_inflight=%zu late=%zu\n",
           st.answered, (long long)(st.elapsed_ns / 1000), rps, p50, p90, p99, max, mean,
           st.lost_read, st.lost_write, st.bad_status, st.timeouts, rate, p999,
           st.max_inflight, st.late);
    hl_close(load);
    free(request);
    free(body);
    return 0;
}
