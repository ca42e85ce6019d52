/* main.c: the dlserve command line: option parsing and dispatch to
 * training, evaluation, prediction and benchmarking. */
#define _POSIX_C_SOURCE 200809L
#include "train/dl_train.h"
#ifdef DL_HAVE_SERVE
#include "serve/dl_serve.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: dlserve [--config FILE] [--set S.K=V]...    run the daemon\n"
    "       dlserve --check-config FILE                 validate, print the effective config\n"
    "       dlserve --train MODEL_DIR [options]         train; write MODEL_DIR/<next version>/\n"
    "       dlserve --eval MODEL_DIR [--version V] [--data DIR]\n"
    "       dlserve --predict MODEL_DIR [--version V] [FILE|-]\n"
    "       dlserve --bench MODEL_DIR [--threads N] [--batch-size B] [--steps S]\n"
    "\n"
    "options:\n"
    "  --data DIR            data folder (IDX or CSV; default " DL_DEFAULT_DATA_DIR ")\n"
    "  --epochs N            training epochs (default: model.json)\n"
    "  --batch-size B        mini-batch size per trainer\n"
    "  --lr X                base learning rate\n"
    "  --optimizer NAME      sgd, momentum or adam\n"
    "  --momentum X          momentum factor\n"
    "  --nesterov            Nesterov momentum\n"
    "  --weight-decay X      L2 weight decay\n"
    "  --seed N              initialisation and shuffle seed\n"
    "  --threads N           CPU threads for everything (default: all cores)\n"
    "  --device D            cpu, cuda or cuda:N (default cpu)\n"
    "  --math M              fp32 (default) or tf32: TF32 tensor-core GEMMs on CUDA\n"
    "  --infer-batch B[,B]   --bench: inference samples/s only, at these batch sizes\n"
    "  --limit N             use only the first N samples of each split\n"
    "  --version V           model version for --eval / --predict (default newest)\n"
    "  --progress | --no-progress   force the progress bar on or off\n"
    "  --steps S             --bench: timed steps (default 50); --train: stop after S\n"
    "                        steps with a checkpoint, to continue with --resume\n"
    "\n"
    "distributed training (under mpirun, srun or an MPIJob; see README):\n"
    "  --dist MODE           allreduce (default), avg[:K], ps-sync or ps-async\n"
    "  --ps-servers S        parameter-server ranks (the last S ranks; default 1)\n"
    "  --max-staleness N     ps-async: steps a trainer may run ahead (default 4)\n"
    "  --stall-timeout SEC   give up a wait after SEC seconds, naming the missing\n"
    "                        ranks (default 300)\n"
    "  --deterministic       reduce in a fixed order (reproducible to the bit)\n"
    "  --checkpoint-every N  write a checkpoint every N steps (MODEL_DIR/checkpoints)\n"
    "  --resume              continue from the newest checkpoint\n"
    "  --publish             --train: progress to the Redis stream dlserve:train:<model>,\n"
    "                        then announce the new version on dlserve:models ([redis]\n"
    "                        from --config and --set, e.g. --set redis.host=HOST)\n"
    "\n"
    "daemon:\n"
    "  --config FILE         configuration file (INI; see conf/dlserve.conf)\n"
    "  --set SECTION.KEY=V   override one option (after the file and DLSERVE_* variables)\n"
    "  --port N              same as --set http.port=N\n"
    "  --models DIR          same as --set models.dir=DIR\n"
    "  --kafka-embedded      same as --set kafka.embedded=true (a local mock Kafka)\n"
    "  --check-config FILE   print the effective configuration and exit\n"
    "  --config-reference    print the configuration reference (Markdown) and exit\n"
    "\n"
    "  -h, --help            this help\n"
    "  -V, --version         print dlserve's version (when given no V)\n";

enum mode { MODE_SERVE, MODE_TRAIN, MODE_EVAL, MODE_PREDICT, MODE_BENCH };

enum {
    OPT_TRAIN = 256, OPT_EVAL, OPT_PREDICT, OPT_BENCH, OPT_DATA, OPT_EPOCHS,
    OPT_BATCH, OPT_LR, OPT_OPTIM, OPT_MOMENTUM, OPT_NESTEROV, OPT_WD, OPT_SEED,
    OPT_THREADS, OPT_DEVICE, OPT_LIMIT, OPT_VERSION, OPT_PROGRESS, OPT_NOPROGRESS,
    OPT_STEPS, OPT_CONFIG, OPT_DIST, OPT_PS_SERVERS, OPT_STALENESS, OPT_STALL,
    OPT_DETERMINISTIC, OPT_CHECKPOINT, OPT_RESUME, OPT_SET, OPT_PORT, OPT_MODELS,
    OPT_CHECK_CONFIG, OPT_CONFIG_REFERENCE, OPT_PUBLISH, OPT_KAFKA_EMBEDDED,
};

/* GPU options, numbered apart: longopts' order above is its index. */
enum { OPT_MATH = 0x300, OPT_INFER_BATCH };

static const struct option longopts[] = {
    {"train", required_argument, NULL, OPT_TRAIN},
    {"eval", required_argument, NULL, OPT_EVAL},
    {"predict", required_argument, NULL, OPT_PREDICT},
    {"bench", required_argument, NULL, OPT_BENCH},
    {"data", required_argument, NULL, OPT_DATA},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"lr", required_argument, NULL, OPT_LR},
    {"optimizer", required_argument, NULL, OPT_OPTIM},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"nesterov", no_argument, NULL, OPT_NESTEROV},
    {"weight-decay", required_argument, NULL, OPT_WD},
    {"seed", required_argument, NULL, OPT_SEED},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"version", required_argument, NULL, OPT_VERSION},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NOPROGRESS},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"dist", required_argument, NULL, OPT_DIST},
    {"ps-servers", required_argument, NULL, OPT_PS_SERVERS},
    {"max-staleness", required_argument, NULL, OPT_STALENESS},
    {"stall-timeout", required_argument, NULL, OPT_STALL},
    {"deterministic", no_argument, NULL, OPT_DETERMINISTIC},
    {"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"set", required_argument, NULL, OPT_SET},
    {"port", required_argument, NULL, OPT_PORT},
    {"models", required_argument, NULL, OPT_MODELS},
    {"check-config", required_argument, NULL, OPT_CHECK_CONFIG},
    {"config-reference", no_argument, NULL, OPT_CONFIG_REFERENCE},
    {"publish", no_argument, NULL, OPT_PUBLISH},
    {"kafka-embedded", no_argument, NULL, OPT_KAFKA_EMBEDDED},
    {"help", no_argument, NULL, 'h'},
    {"math", required_argument, NULL, OPT_MATH},
    {"infer-batch", required_argument, NULL, OPT_INFER_BATCH},
    {NULL, 0, NULL, 0},
};

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlserve: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

/* Strict numbers: the whole argument, in range. */
static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_f64(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

static int parse_option(int c, const char *arg, dl_run_opts *o)
{
    int64_t i;
    double d;
    switch (c) {
    case OPT_DATA:   o->data_dir = arg; return 0;
    case OPT_DEVICE: o->device = arg; return 0;
    case OPT_INFER_BATCH: o->infer_batches = arg; return 0;
    case OPT_MATH:
        if (strcmp(arg, "fp32") && strcmp(arg, "tf32"))
            return fail("--math: '%s' is not fp32 or tf32%s", arg, "");
        o->tf32 = strcmp(arg, "tf32") == 0;
        return 0;
    case OPT_NESTEROV: o->nesterov = 1; return 0;
    case OPT_PROGRESS: o->progress = 1; return 0;
    case OPT_NOPROGRESS: o->progress = 0; return 0;
    case OPT_DETERMINISTIC: o->dist.deterministic = true; return 0;
    case OPT_RESUME: o->resume = true; return 0;
    case OPT_DIST: {
        dl_err err = {0};
        if (dl_dist_parse_mode(arg, &o->dist, &err) != DL_OK)
            return fail("%s%s", err.msg, "");
        o->dist_given = true;
        return 0;
    }
    case OPT_PS_SERVERS: case OPT_STALENESS: case OPT_CHECKPOINT:
        if (!parse_i64(arg, c == OPT_STALENESS ? 0 : 1, 1 << 20, &i))
            return fail("--%s: '%s' is not a valid count", longopts[c - OPT_TRAIN].name, arg);
        if (c == OPT_PS_SERVERS) o->dist.servers = (int)i;
        if (c == OPT_STALENESS) o->dist.max_staleness = (int)i;
        if (c == OPT_CHECKPOINT) o->checkpoint_every = i;
        return 0;
    case OPT_STALL:
        if (!parse_f64(arg, 0.1, 1e7, &d))
            return fail("--stall-timeout: '%s' is not a number of seconds >= 0.1%s", arg, "");
        o->dist.stall_timeout = d;
        return 0;
    case OPT_OPTIM:
        if (!strcmp(arg, "sgd"))           o->optimizer = DL_OPTIM_SGD;
        else if (!strcmp(arg, "momentum")) o->optimizer = DL_OPTIM_MOMENTUM;
        else if (!strcmp(arg, "adam"))     o->optimizer = DL_OPTIM_ADAM;
        else return fail("--optimizer: '%s' is not sgd, momentum or adam%s", arg, "");
        return 0;
    case OPT_EPOCHS: case OPT_BATCH: case OPT_SEED: case OPT_THREADS:
    case OPT_LIMIT: case OPT_VERSION: case OPT_STEPS:
        if (!parse_i64(arg, c == OPT_SEED ? 0 : 1, c == OPT_THREADS ? 1024 : INT64_MAX / 2, &i))
            return fail("--%s: '%s' is not a valid count", longopts[c - OPT_TRAIN].name, arg);
        if (c == OPT_EPOCHS) o->epochs = i;
        if (c == OPT_BATCH) o->batch_size = i;
        if (c == OPT_SEED) o->seed = i;
        if (c == OPT_THREADS) o->threads = (int)i;
        if (c == OPT_LIMIT) o->limit = i;
        if (c == OPT_VERSION) o->version = i;
        if (c == OPT_STEPS) o->steps = i;
        return 0;
    case OPT_LR: case OPT_MOMENTUM: case OPT_WD:
        if (!parse_f64(arg, 0.0, c == OPT_MOMENTUM ? 1.0 : 1e6, &d))
            return fail("--%s: '%s' is not a valid number", longopts[c - OPT_TRAIN].name, arg);
        if (c == OPT_LR) o->lr = d;
        if (c == OPT_MOMENTUM) o->momentum = d;
        if (c == OPT_WD) o->weight_decay = d;
        return 0;
    }
    return fail("unexpected option%s%s", "", "");
}

#define MAX_OVERRIDES 64

/* The daemon, or --check-config. */
static int serve(const char *config, bool check, const char *const *ov, int nov)
{
#ifdef DL_HAVE_SERVE
    if (!check)
        return dl_serve_main(config, ov, nov);
    dl_serve_conf conf;
    dl_err err = {0};
    if (dl_serve_conf_load(&conf, config, &err) != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 2;
    }
    dl_conf_print(dl_serve_opts, &conf, stdout);
    return 0;
#else
    (void)config;
    (void)check;
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
    if (dl_redis_train_publish(o, &conf.redis, &err) != DL_OK) {
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

/* "--version" alone prints the program's version; "--version V" selects a
 * model version for --eval and --predict. */
static bool wants_program_version(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--version") == 0 &&
            (i + 1 == argc || strncmp(argv[i + 1], "--", 2) == 0))
            return true;
    return false;
}

int main(int argc, char **argv)
{
    if (wants_program_version(argc, argv)) {
        printf("dlserve %s\n", DL_VERSION_STRING);
        return 0;
    }
    dl_run_opts o;
    dl_run_opts_init(&o);
    enum mode mode = MODE_SERVE;
    int c, rc;
    const char *config = NULL, *overrides[MAX_OVERRIDES];
    static char owned[MAX_OVERRIDES][1100];
    int noverrides = 0;
    bool check_config = false, publish = false;
    while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return 0;
        case 'V':
            printf("dlserve %s\n", DL_VERSION_STRING);
            return 0;
        case OPT_TRAIN: case OPT_EVAL: case OPT_PREDICT: case OPT_BENCH:
            if (mode != MODE_SERVE)
                return fail("only one of --train, --eval, --predict, --bench%s%s", "", "");
            mode = c == OPT_TRAIN ? MODE_TRAIN : c == OPT_EVAL ? MODE_EVAL
                 : c == OPT_PREDICT ? MODE_PREDICT : MODE_BENCH;
            o.model_dir = optarg;
            break;
        case OPT_CONFIG:
            config = optarg;
            break;
        case OPT_CHECK_CONFIG:
            config = optarg;
            check_config = true;
            break;
        case OPT_CONFIG_REFERENCE:
#ifdef DL_HAVE_SERVE
            dl_conf_print_markdown(dl_serve_opts, stdout);
            return 0;
#else
            return fail("this build has no daemon%s%s", "", "");
#endif
        case OPT_PUBLISH:
            publish = true;
            break;
        case OPT_SET: case OPT_PORT: case OPT_MODELS: case OPT_KAFKA_EMBEDDED:
            if (noverrides == MAX_OVERRIDES)
                return fail("too many --set options%s%s", "", "");
            if (c == OPT_SET) {
                overrides[noverrides++] = optarg;
            } else {
                snprintf(owned[noverrides], sizeof(owned[0]), "%s=%s",
                         c == OPT_PORT ? "http.port" : c == OPT_MODELS ? "models.dir"
                                                                      : "kafka.embedded",
                         c == OPT_KAFKA_EMBEDDED ? "true" : optarg);
                overrides[noverrides] = owned[noverrides];
                noverrides++;
            }
            break;
        case '?':
            fputs("try 'dlserve --help'\n", stderr);
            return 2;
        default:
            if ((rc = parse_option(c, optarg, &o)) != 0)
                return rc;
        }
    }
    if (optind < argc && mode == MODE_PREDICT)
        o.input = argv[optind++];
    if (optind < argc)
        return fail("unexpected argument '%s'%s", argv[optind], "");
    if (mode == MODE_SERVE)
        return serve(config, check_config, overrides, noverrides);
    if (publish && mode != MODE_TRAIN)
        return fail("--publish goes with --train%s%s", "", "");
    if (publish)
        return train_and_publish(&o, config, overrides, noverrides);

    dl_err err = {0};
    dl_status st = DL_OK;
    switch (mode) {
    case MODE_TRAIN:   st = dl_train_run(&o, &err); break;
    case MODE_EVAL:    st = dl_eval_run(&o, &err); break;
    case MODE_PREDICT: st = dl_predict_run(&o, &err); break;
    case MODE_BENCH:   st = o.infer_batches ? dl_bench_infer_run(&o, &err)
                                            : dl_bench_run(&o, &err); break;
    case MODE_SERVE:   break;
    }
    if (st != DL_OK) {
        fprintf(stderr, "dlserve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
