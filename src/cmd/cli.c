/* cli.c: the dlserve command line from one option table: getopt_long's
 * array, values parsed and bounds-checked, --help, the Markdown option
 * reference that docs/training.md carries (--options-reference) and the
 * manual page dlserve.8 (--man, which the build installs). */
#define _POSIX_C_SOURCE 200809L
#include "cmd/cli.h"
#ifdef DL_HAVE_SERVE
#include "serve/dl_serve.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char synopsis[] =
    "usage: dlserve [--config FILE] [--set S.K=V]...    run the daemon\n"
    "       dlserve --check-config FILE [--set S.K=V]... validate, print the effective config\n"
    "       dlserve --train MODEL_DIR [options]         train; write MODEL_DIR/<next version>/\n"
    "       dlserve --eval MODEL_DIR [--model-version V] [--data DIR]\n"
    "       dlserve --predict MODEL_DIR [--model-version V] [FILE|-]\n"
    "       dlserve --generate MODEL_DIR (--prompt TEXT | --prompts FILE) [options]\n"
    "       dlserve --bench MODEL_DIR [--threads N] [--batch-size B] [--steps S]\n"
    "       dlserve --import FILE.onnx --models DIR --name NAME [--max-length N]\n"
    "       dlserve --export MODEL_DIR [--model-version V] --onnx OUT.onnx\n";

/* ---- the table -------------------------------------------------------------- */

typedef enum opt_kind {
    OPT_NUM,    /* integer field (bool, int or int64_t, told apart by size) in min..max */
    OPT_REAL,   /* double field in min..max */
    OPT_TEXT,   /* const char * field: the argument itself */
    OPT_WORD,   /* integer field: the value of one of words */
    OPT_FLAG,   /* no argument: the integer field takes value */
    OPT_SET,    /* a daemon override: "set=ARG" ("set=true" without an argument);
                   set NULL: ARG is "section.key=value" itself */
    OPT_CALL,   /* call(o, ARG, c) */
} opt_kind;

/* Groups, in --help's order; modes are in the synopsis. */
typedef enum opt_group { G_MODE, G_RUN, G_GEN, G_DIST, G_DAEMON, G_GENERAL, G_COUNT } opt_group;

static const char *const group_title[G_COUNT] = {
    [G_RUN] = "options:",
    [G_GEN] = "generation (--generate; see docs/generation.md):",
    [G_DIST] = "distributed training (under mpirun, srun or an MPIJob; see README):",
    [G_DAEMON] = "daemon:",
    [G_GENERAL] = "",
};

typedef struct cli_opt cli_opt;
struct cli_opt {
    const char *name;        /* long name, without "--" */
    char        shortopt;    /* one-letter alias ('h'), or 0 */
    bool        short_only;  /* getopt knows it by shortopt only: its long name
                                belongs to another entry */
    bool        hidden;      /* an old name: parsed, left out of --help and the
                                references (the entry it stands for says so) */
    opt_group   group;
    opt_kind    kind;
    const char *arg;         /* the argument in --help ("N"); NULL: takes none */
    size_t      offset, size;   /* the field in struct cli */
    double      min, max;    /* OPT_NUM, OPT_REAL */
    int         value;       /* OPT_FLAG; OPT_CALL: the handler's parameter */
    const dl_opt_word *words;   /* OPT_WORD; for the others, the accepted forms (help only) */
    const char *what;        /* OPT_NUM, OPT_REAL: what a bad value "is not" */
    const char *set;         /* OPT_SET */
    int       (*call)(const cli_opt *o, const char *arg, cli *c);  /* -1 or an exit code */
    const char *doc;         /* one line */
};

/* Counts: at most this, so that sums of two stay in range. */
#define COUNT_MAX ((double)(INT64_MAX / 2))

/* A macro's value as a string literal, for defaults in the docs. */
#define STR(x) #x
#define XSTR(x) STR(x)

#define FIELD(f) .offset = offsetof(cli, f), .size = sizeof(((cli *)0)->f)
#define COUNT(f, lo, hi) .kind = OPT_NUM, FIELD(f), .min = lo, .max = hi, .what = "a valid count"
#define REAL(f, lo, hi, text) .kind = OPT_REAL, FIELD(f), .min = lo, .max = hi, .what = text

static int call_mode(const cli_opt *o, const char *arg, cli *c);
static int call_dist(const cli_opt *o, const char *arg, cli *c);
static int call_stop(const cli_opt *o, const char *arg, cli *c);
static int call_check_config(const cli_opt *o, const char *arg, cli *c);
static int call_config_reference(const cli_opt *o, const char *arg, cli *c);
static int call_options_reference(const cli_opt *o, const char *arg, cli *c);
static int call_help(const cli_opt *o, const char *arg, cli *c);
static int call_man(const cli_opt *o, const char *arg, cli *c);
static int call_version(const cli_opt *o, const char *arg, cli *c);
static int call_version_alias(const cli_opt *o, const char *arg, cli *c);

static const dl_opt_word optimizer_words[] = {
    {"sgd", DL_OPTIM_SGD}, {"momentum", DL_OPTIM_MOMENTUM}, {"adam", DL_OPTIM_ADAM},
    {"adamw", DL_OPTIM_ADAMW}, {"adagrad", DL_OPTIM_ADAGRAD}, {NULL, 0},
};
static const dl_opt_word math_words[] = {{"fp32", 0}, {"tf32", 1}, {NULL, 0}};
static const dl_opt_word onoff_words[] = {{"on", 1}, {"off", 0}, {NULL, 0}};
static const dl_opt_word device_forms[] = {{"cpu", 0}, {"cuda", 0}, {"cuda:N", 0}, {NULL, 0}};
static const dl_opt_word dist_forms[] = {
    {"allreduce", 0}, {"avg", 0}, {"avg:K", 0}, {"ps-sync", 0}, {"ps-async", 0}, {NULL, 0},
};

static const cli_opt opts[] = {
    {"train", .group = G_MODE, .kind = OPT_CALL, .arg = "MODEL_DIR", .call = call_mode,
     .value = CLI_TRAIN, .doc = "train; write MODEL_DIR/<next version>/"},
    {"eval", .group = G_MODE, .kind = OPT_CALL, .arg = "MODEL_DIR", .call = call_mode,
     .value = CLI_EVAL, .doc = "evaluate a version on the test split"},
    {"predict", .group = G_MODE, .kind = OPT_CALL, .arg = "MODEL_DIR", .call = call_mode,
     .value = CLI_PREDICT, .doc = "predict the samples of FILE or standard input"},
    {"generate", .group = G_MODE, .kind = OPT_CALL, .arg = "MODEL_DIR", .call = call_mode,
     .value = CLI_GENERATE, .doc = "generate text for --prompt or each line of --prompts"},
    {"bench", .group = G_MODE, .kind = OPT_CALL, .arg = "MODEL_DIR", .call = call_mode,
     .value = CLI_BENCH, .doc = "measure training and inference samples/s"},
    {"export", .group = G_MODE, .kind = OPT_CALL, .arg = "MODEL_DIR", .call = call_mode,
     .value = CLI_EXPORT, .doc = "write a version as ONNX (--onnx)"},
    {"import", .group = G_MODE, .kind = OPT_CALL, .arg = "FILE.onnx", .call = call_mode,
     .value = CLI_IMPORT, .doc = "translate an ONNX model into DIR/NAME/<next version>/"},
    {"name", .group = G_MODE, .kind = OPT_TEXT, .arg = "NAME", FIELD(import_name),
     .doc = "--import: the model's name (its folder)"},
    {"max-length", .group = G_MODE, .arg = "N", COUNT(import_max_length, 1, 1 << 20),
     .doc = "--import: the capacity of each symbolic time axis (a sequence input's "
            "max_length; default: the model.json beside, the metadata, or 256)"},

    {"data", .group = G_RUN, .kind = OPT_TEXT, .arg = "DIR", FIELD(run.data_dir),
     .doc = "data folder: IDX (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
            "t10k-...), train.csv / test.csv (label, then features) or, for a graph model, "
            "train.jsonl / test.jsonl; default: MODEL_DIR/data when MODEL_DIR has a prepare "
            "script (run first to write it), else " DL_DEFAULT_DATA_DIR},
    {"epochs", .group = G_RUN, .arg = "N", COUNT(run.epochs, 1, COUNT_MAX),
     .doc = "training epochs (default: model.json)"},
    {"batch-size", .group = G_RUN, .arg = "B", COUNT(run.batch_size, 1, COUNT_MAX),
     .doc = "mini-batch size per trainer (default: model.json)"},
    {"lr", .group = G_RUN, .arg = "X", REAL(run.lr, 0, 1e6, "a valid number"),
     .doc = "base learning rate (default: model.json)"},
    {"optimizer", .group = G_RUN, .kind = OPT_WORD, .arg = "NAME", FIELD(run.optimizer),
     .words = optimizer_words, .doc = "optimizer instead of model.json's"},
    {"momentum", .group = G_RUN, .arg = "X", REAL(run.momentum, 0, 1, "a valid number"),
     .doc = "momentum factor"},
    {"nesterov", .group = G_RUN, .kind = OPT_FLAG, FIELD(run.nesterov), .value = 1,
     .doc = "Nesterov momentum"},
    {"weight-decay", .group = G_RUN, .arg = "X", REAL(run.weight_decay, 0, 1e6, "a valid number"),
     .doc = "weight decay: L2, decoupled for adamw"},
    {"clip-norm", .group = G_RUN, .arg = "X", REAL(run.clip_norm, 0, 1e6, "a valid number"),
     .doc = "clip the gradients' global L2 norm to X before each step; 0: off"},
    {"seed", .group = G_RUN, .arg = "N", COUNT(run.seed, 0, COUNT_MAX),
     .doc = "initialisation and shuffle seed; the same seed gives the same run; --generate: "
            "the sampling seed"},
    {"threads", .group = G_RUN, .arg = "N", COUNT(run.threads, 1, 1024),
     .doc = "CPU threads for everything: OpenBLAS, oneDNN and dlserve's own loops, one at "
            "a time (default: all cores)"},
    {"device", .group = G_RUN, .kind = OPT_TEXT, .arg = "D", FIELD(run.device),
     .words = device_forms, .doc = "backend; cpu by default"},
    {"math", .group = G_RUN, .kind = OPT_WORD, .arg = "M", FIELD(run.tf32), .words = math_words,
     .doc = "GEMM precision, fp32 by default; tf32 runs TF32 tensor-core GEMMs on CUDA"},
    {"infer-batch", .group = G_RUN, .kind = OPT_TEXT, .arg = "B[,B]", FIELD(run.infer_batches),
     .doc = "--bench: inference samples/s only, at these batch sizes"},
    {"batch-invariant", .group = G_RUN, .kind = OPT_WORD, .arg = "on|off",
     FIELD(run.batch_invariant), .words = onoff_words,
     .doc = "--eval, --predict, --generate, --bench: each answer the same bits in any batch; "
            "default: model.json's serving.batch_invariant, else as the daemon"},
    {"limit", .group = G_RUN, .arg = "N", COUNT(run.limit, 1, COUNT_MAX),
     .doc = "use only the first N samples of each split (quick runs)"},
    {"model-version", .group = G_RUN, .arg = "V", COUNT(run.version, 1, COUNT_MAX),
     .doc = "model version for --eval / --predict / --generate / --export (default newest); "
            "--train: start from its weights (fine-tuning); formerly --version V"},
    /* before --model-version, "--version V"; "--version" alone is -V's */
    {"version", .hidden = true, .group = G_RUN, .kind = OPT_CALL, .arg = "V",
     .call = call_version_alias, .doc = "old name of --model-version V"},
    {"onnx", .group = G_RUN, .kind = OPT_TEXT, .arg = "FILE", FIELD(onnx),
     .doc = "--export: the ONNX file to write (opset 17, a dynamic batch dimension)"},
    {"progress", .group = G_RUN, .kind = OPT_FLAG, FIELD(run.progress), .value = 1,
     .doc = "force the progress bar on (default: on a terminal)"},
    {"no-progress", .group = G_RUN, .kind = OPT_FLAG, FIELD(run.progress), .value = 0,
     .doc = "force plain progress lines, one per epoch"},
    {"steps", .group = G_RUN, .arg = "S", COUNT(run.steps, 1, COUNT_MAX),
     .doc = "--bench: timed steps (default 50); --train: stop after S steps with a "
            "checkpoint, to continue with --resume"},

    {"prompt", .group = G_GEN, .kind = OPT_TEXT, .arg = "TEXT", FIELD(gen.prompt),
     .doc = "the prompt (an encoder-decoder's source text)"},
    {"prompts", .group = G_GEN, .kind = OPT_TEXT, .arg = "FILE", FIELD(gen.prompts),
     .doc = "a prompt a line (\"-\": standard input), all decoded together; answers in "
            "their order"},
    {"max-tokens", .group = G_GEN, .arg = "N", COUNT(gen.max_tokens, 1, COUNT_MAX),
     .doc = "tokens generated at most (default 16)"},
    {"temperature", .group = G_GEN, .arg = "X", REAL(gen.temperature, 0, 1e6, "a valid number"),
     .doc = "sampling temperature; 0 (the default): greedy"},
    {"top-k", .group = G_GEN, .arg = "N", COUNT(gen.top_k, 0, COUNT_MAX),
     .doc = "sample among the N likeliest tokens; 0 (the default): all"},
    {"top-p", .group = G_GEN, .arg = "X", REAL(gen.top_p, 0, 1, "a valid number"),
     .doc = "sample among the likeliest tokens whose probabilities sum to X (default 1)"},
    {"stop", .group = G_GEN, .kind = OPT_CALL, .arg = "TEXT", .call = call_stop,
     .doc = "end an answer before TEXT (repeatable, at most " XSTR(DL_GEN_MAX_STOP) ")"},
    {"beam-width", .group = G_GEN, .arg = "W", COUNT(gen.beam_width, 1, 16),
     .doc = "beam search over W beams (default 1: none)"},
    {"length-penalty", .group = G_GEN, .arg = "X",
     REAL(gen.length_penalty, 0, 100, "a valid number"),
     .doc = "beam search: finished beams ranked by log-probability / length^X (default 1)"},
    {"max-seqs", .group = G_GEN, .arg = "N", COUNT(gen.max_seqs, 1, 1 << 16),
     .doc = "sequences decoded at once, a beam counting its width (default "
            XSTR(DL_GEN_RUN_SEQS) "); the other prompts wait for room"},
    {"recompute", .group = G_GEN, .kind = OPT_FLAG, FIELD(gen.recompute), .value = 1,
     .doc = "recompute the whole prefix every step instead of the key-value cache (tests)"},
    {"ids", .group = G_GEN, .kind = OPT_FLAG, FIELD(gen.ids), .value = 1,
     .doc = "print the generated ids with each answer"},

    {"dist", .group = G_DIST, .kind = OPT_CALL, .arg = "MODE", .call = call_dist,
     .words = dist_forms, .doc = "how trainers combine their work, allreduce by default"},
    {"ps-servers", .group = G_DIST, .arg = "S", COUNT(run.dist.servers, 1, 1 << 20),
     .doc = "parameter-server ranks: the last S ranks (default 1)"},
    {"max-staleness", .group = G_DIST, .arg = "N", COUNT(run.dist.max_staleness, 0, 1 << 20),
     .doc = "ps-async: steps a trainer may run ahead (default 4)"},
    {"stall-timeout", .group = G_DIST, .arg = "SEC", REAL(run.dist.stall_timeout, 0.1, 1e7, "a number of seconds >= 0.1"),
     .doc = "give up a wait after SEC seconds, naming the missing ranks (default 300)"},
    {"bucket-kb", .group = G_DIST, .kind = OPT_NUM, .arg = "N", FIELD(run.dist.bucket_kb),
     .min = 0, .max = 1 << 20, .what = "a bucket size in KiB from 0 to 1048576",
     .doc = "allreduce on the CPU: sum the gradients in buckets of at least N KiB while "
            "backward still runs (default " XSTR(DL_DIST_BUCKET_KB) "); 0: one sum after backward"},
    {"deterministic", .group = G_DIST, .kind = OPT_FLAG, FIELD(run.dist.deterministic),
     .value = 1, .doc = "reduce in a fixed order (reproducible to the bit)"},
    {"checkpoint-every", .group = G_DIST, .arg = "N", COUNT(run.checkpoint_every, 1, 1 << 20),
     .doc = "write a checkpoint every N steps (MODEL_DIR/checkpoints)"},
    {"resume", .group = G_DIST, .kind = OPT_FLAG, FIELD(run.resume), .value = 1,
     .doc = "continue from the newest checkpoint"},
    {"publish", .group = G_DIST, .kind = OPT_FLAG, FIELD(publish), .value = 1,
     .doc = "--train: progress to the Redis stream dlserve:train:<model>, then announce the "
            "new version on dlserve:models ([redis] from --config and --set, e.g. "
            "--set redis.host=HOST)"},

    {"config", .group = G_DAEMON, .kind = OPT_TEXT, .arg = "FILE", FIELD(config),
     .doc = "configuration file (INI; see conf/dlserve.conf)"},
    {"set", .group = G_DAEMON, .kind = OPT_SET, .arg = "SECTION.KEY=V",
     .doc = "override one option (after the file and DLSERVE_* variables)"},
    {"port", .group = G_DAEMON, .kind = OPT_SET, .arg = "N", .set = "http.port",
     .doc = "same as --set http.port=N"},
    {"models", .group = G_DAEMON, .kind = OPT_SET, .arg = "DIR", .set = "models.dir",
     .doc = "same as --set models.dir=DIR"},
    {"kafka-embedded", .group = G_DAEMON, .kind = OPT_SET, .set = "kafka.embedded",
     .doc = "same as --set kafka.embedded=true (a local mock Kafka)"},
    {"check-config", .group = G_DAEMON, .kind = OPT_CALL, .arg = "FILE",
     .call = call_check_config,
     .doc = "check FILE with the DLSERVE_* variables and --set options as the daemon "
            "would (the Kafka properties through librdkafka), print the effective "
            "configuration (secrets as ***) and exit"},
    {"config-reference", .group = G_DAEMON, .kind = OPT_CALL, .call = call_config_reference,
     .doc = "print the configuration reference (Markdown) and exit"},
    {"options-reference", .group = G_DAEMON, .kind = OPT_CALL, .call = call_options_reference,
     .doc = "print the reference of the training options (Markdown) and exit"},

    {"help", .shortopt = 'h', .group = G_GENERAL, .kind = OPT_CALL, .call = call_help,
     .doc = "this help"},
    {"man", .group = G_GENERAL, .kind = OPT_CALL, .call = call_man,
     .doc = "print the manual page, dlserve.8 (roff; man -l - reads it), and exit"},
    {"version", .shortopt = 'V', .short_only = true, .group = G_GENERAL, .kind = OPT_CALL,
     .call = call_version, .doc = "print dlserve's version and exit"},
};

#define NOPTS (sizeof(opts) / sizeof(*opts))

/* ---- values ------------------------------------------------------------------ */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("dlserve: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* Strict numbers: the whole argument, in range. */
static bool parse_i64(const char *s, double lo, double hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || (double)v < lo || (double)v > hi)
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

/* An integer field of struct cli: bool, int or int64_t. */
static void store_int(const cli_opt *o, cli *c, int64_t v)
{
    void *field = (char *)c + o->offset;
    if (o->size == sizeof(bool))
        *(bool *)field = v != 0;
    else if (o->size == sizeof(int))
        *(int *)field = (int)v;
    else {
        DL_ASSERT(o->size == sizeof(int64_t));
        *(int64_t *)field = v;
    }
}

static int add_override(const cli_opt *o, const char *arg, cli *c)
{
    if (c->noverrides == CLI_OVERRIDES_MAX)
        return fail("too many --set options");
    if (!o->set) {
        c->overrides[c->noverrides++] = arg;
        return -1;
    }
    snprintf(c->owned[c->noverrides], sizeof(c->owned[0]), "%s=%s", o->set,
             arg ? arg : "true");
    c->overrides[c->noverrides] = c->owned[c->noverrides];
    c->noverrides++;
    return -1;
}

/* Applies one option; -1 to go on, or the exit code. */
static int apply(const cli_opt *o, const char *arg, cli *c)
{
    void *field = (char *)c + o->offset;
    int64_t i;
    double d;
    int w;
    char words[160];
    switch (o->kind) {
    case OPT_NUM:
        if (!parse_i64(arg, o->min, o->max, &i))
            return fail("--%s: '%s' is not %s", o->name, arg, o->what);
        store_int(o, c, i);
        return -1;
    case OPT_REAL:
        if (!parse_f64(arg, o->min, o->max, &d))
            return fail("--%s: '%s' is not %s", o->name, arg, o->what);
        *(double *)field = d;
        return -1;
    case OPT_TEXT:
        *(const char **)field = arg;
        return -1;
    case OPT_WORD:
        if (!dl_opt_word_value(o->words, arg, &w)) {
            dl_opt_words_str(o->words, words, sizeof(words));
            return fail("--%s: '%s' is not %s", o->name, arg, words);
        }
        store_int(o, c, w);
        return -1;
    case OPT_FLAG:
        store_int(o, c, o->value);
        return -1;
    case OPT_SET:
        return add_override(o, arg, c);
    case OPT_CALL:
        return o->call(o, arg, c);
    }
    return fail("unexpected option");
}

/* ---- handlers ---------------------------------------------------------------- */

static int call_mode(const cli_opt *o, const char *arg, cli *c)
{
    if (c->mode != CLI_SERVE)
        return fail("only one of --train, --eval, --predict, --generate, --bench, --export, "
                    "--import");
    c->mode = (cli_mode)o->value;
    c->run.model_dir = arg;
    return -1;
}

static int call_dist(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    dl_err err = {0};
    if (dl_dist_parse_mode(arg, &c->run.dist, &err) != DL_OK)
        return fail("%s", err.msg);
    c->run.dist_given = true;
    return -1;
}

static int call_stop(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    if (c->gen.nstop == DL_GEN_MAX_STOP)
        return fail("--stop: at most %d stop strings", DL_GEN_MAX_STOP);
    if (!*arg || strlen(arg) >= DL_GEN_STOP_MAX)
        return fail("--stop: a stop string has 1 to %d bytes", DL_GEN_STOP_MAX - 1);
    c->gen.stop[c->gen.nstop++] = arg;
    return -1;
}

static int call_check_config(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    c->config = arg;
    c->check_config = true;
    return -1;
}

static int call_config_reference(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    (void)arg;
    (void)c;
#ifdef DL_HAVE_SERVE
    dl_conf_print_markdown(dl_serve_opts, stdout);
    return 0;
#else
    return fail("this build has no daemon");
#endif
}

/* The values an option takes, for the reference: bounds or words. */
static void range_text(const cli_opt *o, char *buf, size_t len)
{
    buf[0] = '\0';
    if (o->kind == OPT_NUM && o->max == COUNT_MAX)
        snprintf(buf, len, "%.0f or more", o->min);
    else if (o->kind == OPT_NUM || o->kind == OPT_REAL)
        snprintf(buf, len, "%.15g..%.15g", o->min, o->max);
    else if (o->words)
        dl_opt_words_str(o->words, buf, len);
}

/* "--name ARG" (with "-x, " before it for a short alias). */
static void usage_text(const cli_opt *o, char *buf, size_t len)
{
    char alias[8] = "";
    if (o->shortopt)
        snprintf(alias, sizeof(alias), "-%c, ", o->shortopt);
    snprintf(buf, len, "%s--%s%s%s", alias, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
}

/* The options of training, evaluation, prediction and benchmarks as a
 * Markdown table: docs/training.md's, which tests/cli/test_cli.sh compares. */
static int call_options_reference(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    (void)arg;
    (void)c;
    fputs("| option | values | meaning |\n|---|---|---|\n", stdout);
    for (size_t i = 0; i < NOPTS; i++) {
        if ((opts[i].group != G_RUN && opts[i].group != G_DIST) || opts[i].hidden)
            continue;
        char usage[80], option[96], range[160];
        usage_text(&opts[i], usage, sizeof(usage));
        snprintf(option, sizeof(option), "`%s`", usage);
        range_text(&opts[i], range, sizeof(range));
        fputs("|", stdout);
        dl_md_cell(stdout, option);
        dl_md_cell(stdout, range);
        dl_md_cell(stdout, opts[i].doc);
        fputc('\n', stdout);
    }
    return 0;
}

/* Writes text from column `col` on, wrapped at spaces before column 79,
 * continuation lines indented to `indent`. */
static void write_wrapped(FILE *f, const char *text, int col, int indent)
{
    const int width = 79;
    const char *p = text;
    while (*p) {
        int room = width - col;
        int n = (int)strlen(p);
        if (n > room) {
            int cut = room;
            while (cut > 0 && p[cut] != ' ')
                cut--;
            n = cut > 0 ? cut : room;
        }
        fprintf(f, "%.*s\n", n, p);
        p += n;
        while (*p == ' ')
            p++;
        if (*p)
            fprintf(f, "%*s", indent, "");
        col = indent;
    }
}

static int call_help(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    (void)arg;
    (void)c;
    const int indent = 24;
    fputs(synopsis, stdout);
    for (opt_group g = G_RUN; g < G_COUNT; g++) {
        printf("\n%s%s", group_title[g], *group_title[g] ? "\n" : "");
        for (size_t i = 0; i < NOPTS; i++) {
            if (opts[i].group != g || opts[i].hidden)
                continue;
            char usage[80], doc[512], words[160];
            usage_text(&opts[i], usage, sizeof(usage));
            int col = printf("  %s", usage);
            if (col >= indent - 1) {
                printf("\n");
                col = 0;
            }
            printf("%*s", indent - col, "");
            snprintf(doc, sizeof(doc), "%s", opts[i].doc);
            if (opts[i].words) {
                dl_opt_words_str(opts[i].words, words, sizeof(words));
                snprintf(doc, sizeof(doc), "%s (%s)", opts[i].doc, words);
            }
            write_wrapped(stdout, doc, indent, indent);
        }
    }
    return 0;
}

/* ---- the manual page ---------------------------------------------------------- */

/* The sections of OPTIONS, by group. */
static const char *const man_group_title[G_COUNT] = {
    [G_MODE] = "Modes",
    [G_RUN] = "Training, evaluation, prediction and benchmarks",
    [G_GEN] = "Generation (--generate)",
    [G_DIST] = "Distributed training",
    [G_DAEMON] = "The daemon",
    [G_GENERAL] = "General",
};

/* Writes text for roff (man(7)) within a line: a backslash as \e, the
 * hyphens of a word that starts with one ("--check-config", "-V") as \-,
 * so that options copy and search as typed, and a leading '.' or '\''
 * guarded by \&. */
static void roff(FILE *f, const char *text)
{
    if (*text == '.' || *text == '\'')
        fputs("\\&", f);
    bool opt = false;   /* in a word that starts with '-' */
    for (const char *p = text; *p; p++) {
        if (p == text || strchr(" ([|,=/\"'", p[-1]))
            opt = *p == '-';
        if (*p == '\\')
            fputs("\\e", f);
        else if (*p == '-' && opt)
            fputs("\\-", f);
        else
            fputc(*p, f);
    }
}

/* One option as a tagged paragraph: "-x, --name ARG", then its
 * meaning, the values it takes and its default where the table has them. */
static void man_option(FILE *f, const cli_opt *o)
{
    fputs(".TP\n", f);
    if (o->shortopt)
        fprintf(f, "\\fB\\-%c\\fR, ", o->shortopt);
    char name[64];
    snprintf(name, sizeof(name), "--%s", o->name);
    fputs("\\fB", f);
    roff(f, name);
    fputs("\\fR", f);
    if (o->arg) {
        fputs(" \\fI", f);
        roff(f, o->arg);
        fputs("\\fR", f);
    }
    fputc('\n', f);
    char range[160], doc[512];
    range_text(o, range, sizeof(range));
    snprintf(doc, sizeof(doc), "%s%s%s%s", o->doc, *range ? " (values: " : "", range,
             *range ? ")" : "");
    roff(f, doc);
    fputc('\n', f);
}

/* The daemon's options ([section] key), from the configuration table. */
static void man_config(FILE *f)
{
#ifdef DL_HAVE_SERVE
    fputs(".SH CONFIGURATION\n"
          "The daemon reads an INI file (\\fB\\-\\-config\\fR \\fIFILE\\fR), then the "
          "environment, then \\fB\\-\\-set\\fR options; each later source overrides an "
          "earlier one. Sections \\fB[kafka.client]\\fR, \\fB[kafka.consumer]\\fR and "
          "\\fB[kafka.producer]\\fR take librdkafka's own properties. Any value may be "
          "\\fB${env:\\fR\\fINAME\\fR\\fB}\\fR or \\fB${file:\\fR\\fIPATH\\fR\\fB}\\fR. "
          "The options, with their defaults:\n", f);
    for (const dl_opt *o = dl_serve_opts; o->key; o++) {
        char head[160], range[160], doc[512];
        snprintf(head, sizeof(head), "[%s] %s = %s", o->section, o->key,
                 *o->def ? o->def : "(empty)");
        dl_conf_range_str(o, range, sizeof(range));
        snprintf(doc, sizeof(doc), "%s (values: %s)", o->doc, range);
        fputs(".TP\n\\fB", f);
        roff(f, head);
        fputs("\\fR\n", f);
        roff(f, doc);
        fputc('\n', f);
    }
#else
    (void)f;
#endif
}

/* dlserve.8: every option of the table (an old name in the meaning of
 * the option it stands for), the daemon's configuration, the environment,
 * exit statuses and files. No date: the same binary writes the same page. */
static int call_man(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    (void)arg;
    (void)c;
    FILE *f = stdout;
    fprintf(f, ".\\\" dlserve.8: written by `dlserve --man` from its option tables.\n"
            ".TH DLSERVE 8 \"\" \"dlserve %s\" \"dlserve\"\n"
            ".nh\n.ad l\n"   /* no hyphens in names and paths, a ragged right edge */
            ".SH NAME\n"
            "dlserve \\- train neural networks and serve them over HTTP, gRPC and Kafka\n"
            ".SH SYNOPSIS\n.nf\n", DL_VERSION_STRING);
    /* the synopsis of --help, less its "usage: " and the indentation */
    for (const char *line = synopsis; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char buf[160];
        snprintf(buf, sizeof(buf), "%.*s", (int)n, line);
        char *p = buf + strspn(buf, " ");
        if (strncmp(p, "usage: ", 7) == 0)
            p += 7;
        roff(f, p);
        fputc('\n', f);
        line += n + (end != NULL);
    }
    fputs(".fi\n.SH DESCRIPTION\n"
          "Without a mode option, \\fBdlserve\\fR runs the daemon: it serves the versions "
          "of the models of its model repository (\\fB[models] dir\\fR) over HTTP (the "
          "Open Inference Protocol), gRPC and Kafka, and loads new versions as they "
          "appear. A mode option trains a model, evaluates, predicts, generates, "
          "benchmarks, or translates to and from ONNX, and exits.\n"
          ".SH OPTIONS\n", f);
    for (opt_group g = G_MODE; g < G_COUNT; g++) {
        fputs(".SS ", f);
        roff(f, man_group_title[g]);
        fputc('\n', f);
        for (size_t i = 0; i < NOPTS; i++)
            if (opts[i].group == g && !opts[i].hidden)
                man_option(f, &opts[i]);
    }
    man_config(f);
    fputs(".SH ENVIRONMENT\n"
          ".TP\n\\fBDLSERVE_\\fR\\fISECTION\\fR\\fB_\\fR\\fIKEY\\fR\n"
          "A daemon option, upper case (\\fBDLSERVE_HTTP_PORT=9000\\fR): over the "
          "file, under \\fB\\-\\-set\\fR.\n"
          ".SH EXIT STATUS\n"
          "0 on success; 1 when the work fails (a model, data or weights file, a "
          "device); 2 for a bad option, argument or configuration.\n"
          ".SH FILES\n"
          ".TP\n\\fI/etc/dlserve/dlserve.conf\\fR\n"
          "The daemon's configuration, every option at its default (under the "
          "installation's sysconfdir).\n"
          ".TP\n\\fIMODEL_DIR\\fB/model.json\\fR, \\fIMODEL_DIR/N\\fB/model.safetensors\\fR\n"
          "A model's description and the weights of its version \\fIN\\fR.\n"
          ".SH SEE ALSO\n"
          "The manual in the sources' \\fIdocs/\\fR: training.md, configuration.md, "
          "serving.md, kafka.md, deploy.md.\n", f);
    return 0;
}

static int call_version(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    (void)arg;
    (void)c;
    printf("dlserve %s\n", DL_VERSION_STRING);
    return 0;
}

/* "--version V": --model-version V, warned about once the mode is known
 * (check_model_version). */
static int call_version_alias(const cli_opt *o, const char *arg, cli *c)
{
    (void)o;
    if (!parse_i64(arg, 1, COUNT_MAX, &c->run.version))
        return fail("--version: '%s' is not a valid model version (--version alone prints "
                    "dlserve's version)", arg);
    c->version_alias = true;
    return -1;
}

/* ---- parsing ----------------------------------------------------------------- */

/* "--version" alone (last, or before another option) prints the
 * program's version; "--version V" is the old --model-version V. */
static bool wants_program_version(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--version") == 0 &&
            (i + 1 == argc || strncmp(argv[i + 1], "--", 2) == 0))
            return true;
    return false;
}

/* A model version goes with the modes that load one (or, --train, start
 * from one); "--version V" there is warned about. */
static int check_model_version(const cli *c)
{
    bool takes = c->mode == CLI_TRAIN || c->mode == CLI_EVAL || c->mode == CLI_PREDICT ||
                 c->mode == CLI_GENERATE || c->mode == CLI_EXPORT;
    if (c->run.version > 0 && !takes)
        return fail("%s goes with --train, --eval, --predict, --generate and --export%s",
                    c->version_alias ? "--version V (a model version)" : "--model-version",
                    c->version_alias ? "; --version alone prints dlserve's version" : "");
    if (c->version_alias)
        fprintf(stderr, "dlserve: warning: --version V for a model version is deprecated: "
                "use --model-version %lld\n", (long long)c->run.version);
    return -1;
}

/* --generate takes one of --prompt and --prompts; its options go with it
 * only. */
static int check_generate(const cli *c)
{
    dl_gen_run_opts unset;
    dl_gen_run_opts_init(&unset);
    if (c->mode != CLI_GENERATE)
        return memcmp(&unset, &c->gen, sizeof(unset)) == 0
                   ? -1 : fail("--prompt, --prompts, --max-tokens, --temperature, --top-k, "
                               "--top-p, --stop, --beam-width, --length-penalty, --max-seqs, "
                               "--recompute and --ids go with --generate");
    if (!c->gen.prompt == !c->gen.prompts)
        return fail("--generate needs one of --prompt TEXT and --prompts FILE");
    return -1;
}

int cli_parse(int argc, char **argv, cli *c)
{
    memset(c, 0, sizeof(*c));
    dl_run_opts_init(&c->run);
    dl_gen_run_opts_init(&c->gen);
    c->mode = CLI_SERVE;
    if (wants_program_version(argc, argv))
        return call_version(NULL, NULL, c);

    /* getopt_long's array: option i answers 256 + i; short aliases answer
     * their letter. */
    static struct option longopts[NOPTS + 1];
    char shortopts[NOPTS + 1];
    size_t nlong = 0, nshort = 0;
    for (size_t i = 0; i < NOPTS; i++) {
        if (opts[i].shortopt)
            shortopts[nshort++] = opts[i].shortopt;
        if (!opts[i].short_only)
            longopts[nlong++] = (struct option){
                opts[i].name, opts[i].arg ? required_argument : no_argument, NULL,
                256 + (int)i};
    }
    shortopts[nshort] = '\0';
    longopts[nlong] = (struct option){NULL, 0, NULL, 0};

    int ch;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const cli_opt *o = NULL;
        if (ch >= 256 && ch < 256 + (int)NOPTS)
            o = &opts[ch - 256];
        for (size_t i = 0; !o && i < NOPTS; i++)
            if (opts[i].shortopt == ch)
                o = &opts[i];
        if (!o) {
            fputs("try 'dlserve --help'\n", stderr);
            return 2;
        }
        int rc = apply(o, optarg, c);
        if (rc >= 0)
            return rc;
    }
    if (optind < argc && c->mode == CLI_PREDICT)
        c->run.input = argv[optind++];
    if (optind < argc)
        return fail("unexpected argument '%s'", argv[optind]);
    if (c->publish && c->mode != CLI_TRAIN && c->mode != CLI_SERVE)
        return fail("--publish goes with --train");
    if ((c->mode == CLI_EXPORT) != (c->onnx != NULL))
        return fail(c->onnx ? "--onnx goes with --export" : "--export needs --onnx FILE");
    if (c->import_max_length && c->mode != CLI_IMPORT)
        return fail("--max-length goes with --import");
    int rc = check_generate(c);
    return rc >= 0 ? rc : check_model_version(c);
}
