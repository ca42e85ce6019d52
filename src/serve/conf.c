/* conf.c: the daemon's option table (dlserve.conf) and its loading:
 * defaults, then the file, then DLSERVE_* variables, then cross-field checks. */
#define _POSIX_C_SOURCE 200809L
#include "serve/dl_serve.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_SIZE(sec, f) sizeof(((dl_serve_conf *)0)->sec.f)
#define INT(sec, f, def, lo, hi, doc)                                         \
    {#sec, #f, DL_OPT_INT, offsetof(dl_serve_conf, sec.f), 0, def, lo, hi, doc}
#define BOOL(sec, f, def, doc)                                                \
    {#sec, #f, DL_OPT_BOOL, offsetof(dl_serve_conf, sec.f), 0, def, 0, 0, doc}
#define STR(sec, f, def, doc)                                                 \
    {#sec, #f, DL_OPT_STRING, offsetof(dl_serve_conf, sec.f), FIELD_SIZE(sec, f), \
     def, 0, 0, doc}

const dl_opt dl_serve_opts[] = {
    STR(http, address, "127.0.0.1", "address to bind; 0.0.0.0 exposes the server to the network"),
    INT(http, port, "8000", 0, 65535, "TCP port; 0 picks any free port (logged)"),
    INT(http, max_body_bytes, "8388608", 1024, 1 << 30, "larger request bodies get 413"),
    STR(http, token, "", "bearer token required on requests; empty = no authentication"),
    STR(http, tls_cert, "", "PEM certificate file for HTTPS; set with tls_key or not at all"),
    STR(http, tls_key, "", "PEM private key file for HTTPS; set with tls_cert or not at all"),
    INT(batching, max_batch_size, "64", 1, 65536, "most samples in one inference batch"),
    INT(batching, max_queue_delay_us, "500", 0, 10000000,
        "longest a request waits for a batch to fill, in microseconds"),
    INT(batching, max_queue_size, "4096", 1, 1 << 24,
        "queued samples per model before requests get 503"),
    STR(models, dir, "models", "the model repository folder"),
    STR(models, policy, "latest", "versions served: latest, latest:N or versions:1,3,..."),
    BOOL(models, watch, "true", "reload when the model folder changes"),
    STR(models, device, "cpu", "inference device: cpu, cuda or cuda:N"),
    INT(models, threads, "0", 0, 1024, "CPU threads for inference; 0 = all cores"),
    STR(log, level, "info", "err, warning, notice, info or debug"),
    STR(log, debug, "", "comma-separated subsystems logged at debug level, e.g. http,batch"),
    {0},
};

/* Sections a later component reads as raw properties (librdkafka, Redis). */
static const char *const passthrough[] = {"kafka", "kafka.consumer", "kafka.producer",
                                          "redis", NULL};

/* A whole decimal number >= 1 at *s; advances *s past it. */
static bool positive_int(const char **s)
{
    if (!isdigit((unsigned char)**s))
        return false;
    char *end;
    errno = 0;
    long long n = strtoll(*s, &end, 10);
    *s = end;
    return errno == 0 && n >= 1;
}

/* "latest", "latest:N" or "versions:N[,N...]", every N >= 1. */
static bool policy_ok(const char *p)
{
    bool list;
    if (!strcmp(p, "latest"))
        return true;
    if (!strncmp(p, "latest:", 7)) {
        p += 7;
        list = false;
    } else if (!strncmp(p, "versions:", 9)) {
        p += 9;
        list = true;
    } else {
        return false;
    }
    for (;;) {
        if (!positive_int(&p))
            return false;
        if (!list || *p != ',')
            break;
        p++;
    }
    return *p == '\0';
}

/* "cpu", "cuda" or "cuda:N", N >= 0. */
static bool device_ok(const char *d)
{
    if (!strcmp(d, "cpu") || !strcmp(d, "cuda"))
        return true;
    if (strncmp(d, "cuda:", 5) || !d[5])
        return false;
    for (d += 5; *d; d++)
        if (!isdigit((unsigned char)*d))
            return false;
    return true;
}

static bool level_ok(const char *l)
{
    static const char *const levels[] = {"err", "warning", "notice", "info", "debug"};
    for (size_t i = 0; i < sizeof(levels) / sizeof(*levels); i++)
        if (!strcmp(l, levels[i]))
            return true;
    return false;
}

dl_status dl_serve_conf_validate(const dl_serve_conf *c, dl_err *err)
{
    if (!c->http.tls_cert[0] != !c->http.tls_key[0])
        return dl_err_set(err, DL_ERR_INVALID,
                          "[http] tls_cert and tls_key must be set together (%s is empty)",
                          c->http.tls_cert[0] ? "tls_key" : "tls_cert");
    if (!policy_ok(c->models.policy))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[models] policy '%.60s' is invalid: expected latest, latest:N "
                          "or versions:N,N,... with every N >= 1", c->models.policy);
    if (!device_ok(c->models.device))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[models] device '%s' is invalid: expected cpu, cuda or cuda:N",
                          c->models.device);
    if (!level_ok(c->log.level))
        return dl_err_set(err, DL_ERR_INVALID,
                          "[log] level '%s' is invalid: expected err, warning, notice, "
                          "info or debug", c->log.level);
    return DL_OK;
}

dl_status dl_serve_conf_load(dl_serve_conf *conf, const char *path, dl_err *err)
{
    /* Built in a copy so that a failed reload (SIGHUP) keeps the old config. */
    dl_serve_conf tmp;
    memset(&tmp, 0, sizeof(tmp));
    dl_status st = dl_conf_defaults(dl_serve_opts, &tmp, err);
    if (st == DL_OK && path)
        st = dl_conf_load_file(dl_serve_opts, &tmp, path, passthrough, NULL, NULL, err);
    if (st == DL_OK)
        st = dl_conf_apply_env(dl_serve_opts, &tmp, err);
    if (st == DL_OK)
        st = dl_serve_conf_validate(&tmp, err);
    if (st == DL_OK)
        memcpy(conf, &tmp, sizeof(tmp));
    return st;
}
