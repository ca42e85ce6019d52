/* dl_serve.h: the serving daemon: configuration and the entry point that
 * `dlserve` (no mode flag) runs. Depends on nn, tensor and util; only
 * serve/ sees libmicrohttpd and systemd. */
#ifndef DL_SERVE_H
#define DL_SERVE_H

#include "nn/dl_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_PATH_MAX 1024

typedef struct dl_http_conf {
    char    address[64];         /* bind address; 127.0.0.1 by default */
    int64_t port;                /* 0: any free port (logged) */
    int64_t max_body_bytes;      /* larger bodies get 413 */
    char    token[256];          /* bearer token; empty: no authentication */
    char    tls_cert[DL_PATH_MAX];
    char    tls_key[DL_PATH_MAX];
} dl_http_conf;

typedef struct dl_batching_conf {
    int64_t max_batch_size;
    int64_t max_queue_delay_us;
    int64_t max_queue_size;      /* queued samples per model before 503 */
} dl_batching_conf;

typedef struct dl_models_conf {
    char    dir[DL_PATH_MAX];    /* the model repository */
    char    policy[128];         /* "latest", "latest:N" or "versions:1,3" */
    bool    watch;               /* reload on changes in the folder (inotify) */
    char    device[32];          /* cpu, cuda, cuda:N */
    int64_t threads;             /* CPU threads for inference (0: all cores) */
} dl_models_conf;

typedef struct dl_log_conf {
    char    level[16];           /* err, warning, notice, info, debug */
    char    debug[128];          /* subsystems at debug level: "http,batch" */
} dl_log_conf;

typedef struct dl_serve_conf {
    dl_http_conf     http;
    dl_batching_conf batching;
    dl_models_conf   models;
    dl_log_conf      log;
} dl_serve_conf;

/* The daemon's option table (all sections). */
extern const dl_opt dl_serve_opts[];

/* Loads defaults, then the file (NULL: none), then the environment.
 * Errors name the file and line or the variable. */
dl_status dl_serve_conf_load(dl_serve_conf *conf, const char *path, dl_err *err);

/* Cross-field checks (TLS files both or neither, version policy syntax),
 * for a configuration changed after dl_serve_conf_load. */
dl_status dl_serve_conf_validate(const dl_serve_conf *conf, dl_err *err);

/* Runs the daemon until SIGTERM/SIGINT; returns the process exit code.
 * config_path may be NULL. overrides: "section.key=value" strings from the
 * command line, applied last. */
int dl_serve_main(const char *config_path, const char *const *overrides, int noverrides);

#ifdef __cplusplus
}
#endif
#endif /* DL_SERVE_H */
