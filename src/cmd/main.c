/* main.c: dlserve's entry point: the command line (cli.c) dispatched to
 * the daemon, training, evaluation, prediction, generation, benchmarking
 * and the ONNX export. */
#define _POSIX_C_SOURCE 200809L
#include "cmd/cli.h"
#include "onnx/dl_onnx.h"
#ifdef DL_HAVE_SERVE
#include "serve/dl_serve.h"
#endif
#ifdef DL_HAVE_REDIS
#include "cmd/publish.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DL_HAVE_JEMALLOC
/* jemalloc's options, read at its start (MALLOC_CONF adds to them).
 * Allocations of 8 MiB and more (librdkafka's fetch buffers among them)
 * otherwise go to an arena that gives their pages back to the kernel as
 * soon as they are freed, so that every fetch faults its buffer in again
 * (about one page fault a Kafka record, a tenth of its CPU); here they keep
 * the common decay (pages kept 10 s after their last use). */
const char *malloc_conf = "oversize_threshold:0";
#endif

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlserve: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

/* --check-config: the file, the DLSERVE_* variables and the --set
 * options, as the daemon loads them, then every raw Kafka property set as
 * the daemon sets it, so that librdkafka refuses what it would refuse at
 * start; the effective configuration on standard output. */
static int check_config(const char *config, const char *const *ov, int nov)
{
#ifdef DL_HAVE_SERVE
    static dl_serve_conf conf;
    dl_err err = {0};
    dl_status st = dl_serve_conf_load(&conf, config, &err);
    if (st == DL_OK)
        st = dl_serve_conf_apply(&conf, ov, nov, &err);
    if (st == DL_OK)
        st = dl_serve_conf_validate(&conf, &err);
    if (st == DL_OK && (st = dl_serve_conf_check_kafka(&conf, &err)) == DL_ERR_UNAVAILABLE) {
        if (conf.kafka.nprops > 0)
            fprintf(stderr, "dlserve: %s: the [kafka.*] properties were not checked\n",
                    err.msg);
        st = DL_OK;
    }
    if (st != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 2;
    }
    dl_serve_conf_print(&conf, stdout);
    return 0;
#else
    (void)config;
    (void)ov;
    (void)nov;
    return fail("this build has no daemon (it needs libmicrohttpd and inih)%s%s", "", "");
#endif
}

/* The daemon. */
static int serve(const char *config, const char *const *ov, int nov)
{
#ifdef DL_HAVE_SERVE
    return dl_serve_main(config, ov, nov);
#else
    (void)config;
    (void)ov;
    (void)nov;
    return fail("this build has no daemon (it needs libmicrohttpd and inih)%s%s", "", "");
#endif
}

/* --train --publish: [redis] from --config and --set (the daemon's
 * configuration, loaded as the daemon loads it); training progress goes
 * to Redis as it happens and the version is announced at the end. */
static int train_and_publish(dl_run_opts *o, const char *config, const char *const *ov, int nov)
{
#ifdef DL_HAVE_REDIS
    static dl_serve_conf conf;
    dl_err err = {0};
    if (dl_serve_conf_load(&conf, config, &err) != DL_OK ||
        dl_serve_conf_apply(&conf, ov, nov, &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 2;
    }
    if (!conf.redis.host[0])
        return fail("--publish needs [redis] host (--set redis.host=HOST or --config FILE)%s%s",
                    "", "");
    if (publish_run(o, &conf.redis, &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    return 0;
#else
    (void)o;
    (void)config;
    (void)ov;
    (void)nov;
    return fail("--publish needs a build with Redis (hiredis)%s%s", "", "");
#endif
}

/* --import FILE.onnx --models DIR --name NAME: DIR from the last
 * models.dir override (--models or --set), "models" without one. */
static int import_onnx(const cli *c)
{
    const char *dir = "models", *key = "models.dir=";
    for (int i = 0; i < c->noverrides; i++)
        if (strncmp(c->overrides[i], key, strlen(key)) == 0)
            dir = c->overrides[i] + strlen(key);
    if (!c->import_name)
        return fail("--import needs --name NAME (the model's folder under %s)%s", dir, "");
    dl_err err = {0};
    int64_t version = 0;
    if (dl_onnx_import(c->run.model_dir, dir, c->import_name, c->import_max_length, &version,
                       &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s/%lld", dir, c->import_name, (long long)version);
    dl_sbuf b = {0};
    dl_sbuf_printf(&b, "{\"model\":\"%s\",\"version\":%lld,\"path\":", c->import_name,
                   (long long)version);
    dl_sbuf_json_string(&b, path);
    dl_sbuf_printf(&b, "}\n");
    fputs(b.oom ? "{}\n" : b.s, stdout);
    dl_sbuf_free(&b);
    return 0;
}

/* --export: one JSON line saying what was written. */
static dl_status export_onnx(const cli *c, dl_err *err)
{
    dl_onnx_export_info info;
    dl_status st = dl_onnx_export(c->run.model_dir, c->run.version, c->onnx, &info, err);
    if (st != DL_OK)
        return st;
    dl_sbuf b = {0};
    dl_sbuf_printf(&b, "{\"model_dir\":");
    dl_sbuf_json_string(&b, c->run.model_dir);
    dl_sbuf_printf(&b, ",\"version\":%lld,\"onnx\":", (long long)info.version);
    dl_sbuf_json_string(&b, c->onnx);
    dl_sbuf_printf(&b, ",\"nodes\":%d,\"initializers\":%d,\"bytes\":%zu}\n", info.nodes,
                   info.initializers, info.bytes);
    fputs(b.oom ? "{}\n" : b.s, stdout);
    dl_sbuf_free(&b);
    return DL_OK;
}

/* OpenBLAS on a CPU it does not know runs its generic kernels: name the
 * core the CPU's features match and start again, before anything else
 * (dl_blas_core_override). Should the exec fail, dlserve runs on with
 * OpenBLAS's choice. */
static void blas_core_fixup(char **argv)
{
    const char *core = dl_blas_core_override();
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv)
{
    blas_core_fixup(argv);
    cli c;
    int rc = cli_parse(argc, argv, &c);
    if (rc >= 0)
        return rc;
    if (c.mode == CLI_IMPORT)
        return import_onnx(&c);
    if (c.mode == CLI_SERVE && c.check_config)
        return check_config(c.config, c.overrides, c.noverrides);
    if (c.mode == CLI_SERVE)
        return serve(c.config, c.overrides, c.noverrides);
    if (c.publish)
        return train_and_publish(&c.run, c.config, c.overrides, c.noverrides);

    dl_run_opts *o = &c.run;
    dl_err err = {0};
    dl_status st = DL_OK;
    switch (c.mode) {
    case CLI_TRAIN:   st = dl_train_run(o, &err); break;
    case CLI_EVAL:    st = dl_eval_run(o, &err); break;
    case CLI_PREDICT: st = dl_predict_run(o, &err); break;
    case CLI_GENERATE: st = dl_gen_run(o, &c.gen, &err); break;
    case CLI_BENCH:   st = o->infer_batches ? dl_bench_infer_run(o, &err)
                                            : dl_bench_run(o, &err); break;
    case CLI_EXPORT:  st = export_onnx(&c, &err); break;
    case CLI_SERVE:
    case CLI_IMPORT:  break;
    }
    if (st != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
