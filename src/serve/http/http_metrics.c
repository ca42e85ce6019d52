/* http_metrics.c: the optional listener of http.metrics_port, which
 * serves GET /metrics and nothing else, without the bearer token and
 * without TLS: for a Prometheus that scrapes on an internal network while
 * the main port asks clients for a token. One MHD thread is plenty for a
 * scrape every few seconds. */
#define _GNU_SOURCE   /* microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GET /metrics: the exposition; anything else 404 (405 for /metrics). */
static enum MHD_Result on_metrics(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    http_server *h = cls;
    if (!*con_cls) {   /* first call: headers only */
        *con_cls = h;
        return MHD_YES;
    }
    if (*upload_size > 0) {   /* a body: ignored */
        *upload_size = 0;
        return MHD_YES;
    }
    bool path = strcmp(url, "/metrics") == 0;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    answer a = path && get ? http_metrics_answer(h)
               : path      ? http_status_answer(DL_ERR_INVALID, "/metrics answers GET only")
                           : http_status_answer(DL_ERR_NOT_FOUND,
                                                "http.metrics_port serves /metrics only");
    if (path && !get)
        a.code = 405;
    size_t len = a.len ? a.len : a.body ? strlen(a.body) : 0;
    struct MHD_Response *resp =
        a.body ? MHD_create_response_from_buffer(len, a.body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp) {
        free(a.body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a.ctype ? a.ctype : CT_JSON);
    if (a.code == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result r = MHD_queue_response(c, (unsigned)a.code, resp);
    MHD_destroy_response(resp);
    stats_http(h->deps->st, http_method_name(method), path ? "metrics" : "unknown", a.code);
    return r;
}

dl_status http_metrics_start(http_server *h, const struct sockaddr_storage *ss, unsigned flags,
                             dl_err *err)
{
    const dl_http_conf *conf = h->deps->conf;
    if (conf->metrics_port == 0)
        return DL_OK;
    if (conf->metrics_port == conf->port)
        return dl_err_set(err, DL_ERR_INVALID, "http.metrics_port %lld is http.port",
                          (long long)conf->metrics_port);
    struct sockaddr_storage at = *ss;
    if (at.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&at)->sin6_port = htons((uint16_t)conf->metrics_port);
    else
        ((struct sockaddr_in *)&at)->sin_port = htons((uint16_t)conf->metrics_port);
    errno = 0;
    h->metrics_d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | (flags & MHD_USE_IPv6), 0, NULL,
        NULL, on_metrics, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&at,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (!h->metrics_d)
        return dl_err_set(err, DL_ERR_IO, "cannot listen on %s port %lld (http.metrics_port)%s%s",
                          conf->address, (long long)conf->metrics_port, errno ? ": " : "",
                          errno ? strerror(errno) : "");
    DL_LOG(DL_LOG_NOTICE, "http", "metrics on http://%s%s%s:%lld/metrics, no token",
           flags & MHD_USE_IPv6 ? "[" : "", conf->address, flags & MHD_USE_IPv6 ? "]" : "",
           (long long)conf->metrics_port);
    return DL_OK;
}

void http_metrics_stop(http_server *h)
{
    if (h->metrics_d)
        MHD_stop_daemon(h->metrics_d);
    h->metrics_d = NULL;
}
