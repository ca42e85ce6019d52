/* kafka_tool.c: a test and benchmark helper for dlserve's Kafka side, on librdkafka:
 * an in-process mock cluster, a Fashion-MNIST record feeder and a topic collector. */
#define _GNU_SOURCE     /* getopt_long, ppoll */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define PIXELS          784                 /* one 28x28 image */
#define OVERSIZE_BYTES  (2u * 1024 * 1024)  /* --bad oversize value length */
#define MAX_NAME        128                 /* --model, ids */
#define MAX_LINE        4096                /* mock: one command line */

static const char usage_text1[] =
"usage: kafka_tool mock [--brokers N] [--topic NAME[:PARTITIONS]]... [--debug CONTEXTS]\n"
"       kafka_tool feed -b BOOTSTRAP -t TOPIC [feed options]\n"
"       kafka_tool collect -b BOOTSTRAP -t TOPIC [collect options]\n"
"\n"
"mock: runs a librdkafka mock cluster of N brokers (default 1), creates each\n"
"  --topic (default 1 partition), prints one line 'bootstrap=<addr>' and then\n"
"  reads commands from stdin, one per line, answering 'ok' or 'error: ...':\n"
"    topic NAME PARTITIONS   create a topic\n"
"    err API COUNT CODE      fail the next COUNT requests of API with CODE\n"
"    clear API               drop the errors still queued for API\n"
"    down ID | all           take broker ID (1..N) or every broker down: its\n"
"                            connections close and new ones are refused\n"
"    up ID | all             bring broker ID or every broker back\n"
"    quit                    stop\n"
"  API: Produce Fetch ListOffsets Metadata OffsetCommit OffsetFetch\n"
"  FindCoordinator JoinGroup Heartbeat LeaveGroup SyncGroup InitProducerId\n"
"  AddPartitionsToTxn AddOffsetsToTxn EndTxn TxnOffsetCommit, or a number.\n"
"  CODE: a Kafka error code, as a number or a name (MSG_SIZE_TOO_LARGE,\n"
"  NOT_ENOUGH_REPLICAS, NOT_COORDINATOR, PRODUCER_FENCED, ...).\n"
"  Blank lines get no answer. At the end of stdin the cluster keeps running\n"
"  until SIGTERM or SIGINT; 'quit' and the signals exit 0. When stdin is a\n"
"  FIFO, writers may come and go ('echo CMD > fifo' per command): it holds\n"
"  a write end itself, so the FIFO does not end.\n"
"  --debug CONTEXTS: librdkafka's debug contexts for the cluster (\"mock\":\n"
"  its consumer groups' state changes and timers), logged to stderr.\n"
"\n";
/* In two parts: C99 compilers need not take string literals over 4095 bytes. */
static const char usage_text2[] =
"feed: produces Fashion-MNIST test images as records, image (START+k) mod\n"
"  10000 with id and key 'img-<START+k>', and prints\n"
"  {\"produced\": N, \"seconds\": S, \"rate\": R}; exit 1 if a delivery failed.\n"
"  --count N            records (default 1000)\n"
"  --start I            first index (default 0)\n"
"  --format F           json: an infer request {\"id\",\"model\",\"inputs\"} (UINT8)\n"
"                       data: {\"id\",\"data\":[784 values]}\n"
"                       binary: 784 float32 LE pixel values with headers\n"
"                       dlserve-model, content-type, dlserve-id (default json)\n"
"  --model NAME         model named in the records (default fashion-mlp)\n"
"  --data DIR           holds t10k-images-idx3-ubyte[.gz]\n"
"                       (default /usr/share/datasets/fashion-mnist)\n"
"  --bad KIND           malformed records instead, ids 'bad-<KIND>-<START+k>':\n"
"                       badjson (truncated; json, data), shape (783 values),\n"
"                       datatype (BOOL; json), model (\"nosuch\"), nan (FP32\n"
"                       1e999 in json and data, a NaN in binary), oversize\n"
"                       (a 2 MiB value), empty (a zero-length value)\n"
"  --no-id              no id in the value or headers (the key keeps it)\n"
"  --partition P        produce to partition P (default: the partitioner)\n"
"  --rate R             records per second, 0 = as fast as possible (default)\n"
"  --timeout SECONDS    delivery timeout of each record (default 60)\n"
"  --header NAME=VALUE  a header on every record (up to 8; after the others)\n"
"  --timestamp MS       the records' CreateTime, ms since the epoch (default now)\n"
"\n"
"collect: reads every partition of TOPIC from the beginning, without a\n"
"  consumer group, until --count distinct keys were seen, --idle seconds\n"
"  passed without a record once all partitions were at their end, or the\n"
"  timeout. Prints {\"records\": R, \"distinct\": D, \"duplicates\": R-D,\n"
"  \"seconds\": S}. Exit 0 when --count distinct keys were seen (without\n"
"  --count: when --idle ended it), else 1. Records without a key count as\n"
"  distinct.\n"
"  --count N            distinct keys to wait for\n"
"  --timeout SECONDS    give up after this long (default 60)\n"
"  --idle SECONDS       stop after this long at the end of all partitions\n"
"                       (default 0: off)\n"
"  --read-committed     isolation.level=read_committed\n"
"  --out FILE           one line per record: key, partition, offset,\n"
"                       timestamp (ms), headers k=v;k=v and the value,\n"
"                       tab-separated; in key, headers and value \\ tab CR LF\n"
"                       read \\\\ \\t \\r \\n, other bytes outside 0x20..0x7e\n"
"                       (and ; = in headers) \\xHH\n"
"  --received           a last field on each --out line: when the record was\n"
"                       polled, us since the epoch (wall clock), fetching\n"
"                       with fetch.wait.max.ms=1: run it while the topic\n"
"                       fills to time its records' arrival\n"
"  --no-values          an empty value field on each --out line (keeps a\n"
"                       reader of large records cheap)\n"
"\n"
"Exit status 2 for a usage error. Errors go to stderr, prefixed 'kafka_tool: '.\n";

static void usage(FILE *f)
{
    fputs(usage_text1, f);
    fputs(usage_text2, f);
}

/* ---- common ------------------------------------------------------------ */

/* Set by SIGTERM and SIGINT; each loop checks it. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* No SA_RESTART: a blocked call returns EINTR and the loop sees the flag. */
static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);   /* a closed stdout is a write error */
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kafka_tool: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max))
        return false;
    *out = v;
    return true;
}

/* Reports a bad option value and returns the usage exit status. */
static int bad_value(const char *cmd, const char *opt, const char *value, const char *want)
{
    fail("%s: %s '%s': %s", cmd, opt, value, want);
    return 2;
}

/* The option getopt_long rejected, for the message. */
static int bad_option(const char *cmd, char **argv)
{
    fail("%s: unknown option or missing value: '%s' (see kafka_tool --help)", cmd,
         argv[optind - 1]);
    return 2;
}

static bool conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fail("config %s=%s: %s", name, value, errstr);
        return false;
    }
    return true;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    fprintf(stderr, "kafka_tool: rdkafka <%d> %s: %s\n", level, fac, buf);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    (void)opaque;
    fail("rdkafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* A new configuration with the callbacks every handle here uses; NULL on
 * failure (reported). */
static rd_kafka_conf_t *conf_new(const char *bootstrap)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (bootstrap && !conf_set(conf, "bootstrap.servers", bootstrap)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    return conf;
}

/* rd_kafka_new, which takes conf on success only; NULL on failure (reported). */
static rd_kafka_t *handle_new(rd_kafka_type_t type, rd_kafka_conf_t **conf)
{
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(type, *conf, errstr, sizeof(errstr));
    if (!rk) {
        fail("rd_kafka_new: %s", errstr);
        rd_kafka_conf_destroy(*conf);
    }
    *conf = NULL;
    return rk;
}

/* ---- mock --------------------------------------------------------------- */

/* Kafka API keys (the protocol's numbers; rdkafka_protocol.h is private). */
static const struct api_key {
    const char *name;
    int16_t key;
} api_keys[] = {
    {"Produce", 0},         {"Fetch", 1},           {"ListOffsets", 2},
    {"Metadata", 3},        {"OffsetCommit", 8},    {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},     {"Heartbeat", 12},
    {"LeaveGroup", 13},     {"SyncGroup", 14},      {"InitProducerId", 22},
    {"AddPartitionsToTxn", 24}, {"AddOffsetsToTxn", 25}, {"EndTxn", 26},
    {"TxnOffsetCommit", 28},
};

static bool parse_api(const char *s, int16_t *key)
{
    for (size_t i = 0; i < sizeof(api_keys) / sizeof(api_keys[0]); i++) {
        if (strcasecmp(s, api_keys[i].name) == 0) {
            *key = api_keys[i].key;
            return true;
        }
    }
    long v;
    if (!parse_long(s, 0, INT16_MAX, &v))
        return false;
    *key = (int16_t)v;
    return true;
}

/* A Kafka error code: a number, or a name as rd_kafka_err2name spells it
 * (NOT_COORDINATOR), optionally prefixed ERR_ or RD_KAFKA_RESP_ERR_. */
static bool parse_error_code(const char *s, rd_kafka_resp_err_t *code)
{
    long v;
    if (parse_long(s, INT16_MIN, INT16_MAX, &v)) {
        *code = (rd_kafka_resp_err_t)v;
        return true;
    }
    if (strncasecmp(s, "RD_KAFKA_RESP_ERR_", 18) == 0)
        s += 18;
    else if (strncasecmp(s, "ERR_", 4) == 0)
        s += 4;
    const struct rd_kafka_err_desc *descs;
    size_t n;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++) {
        /* Broker errors only: the internal ones (negative) start with '_'. */
        if (descs[i].name && descs[i].code >= 0 && strcasecmp(s, descs[i].name) == 0) {
            *code = descs[i].code;
            return true;
        }
    }
    return false;
}

typedef struct mock {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mcluster;
    int brokers;
} mock;

static int replication_factor(const mock *mk)
{
    return mk->brokers < 3 ? mk->brokers : 3;
}

/* Creates a topic; fills errbuf and returns false on failure. */
static bool mock_topic(mock *mk, const char *name, int partitions, char *errbuf, size_t cap)
{
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mk->mcluster, name, partitions,
                                                         replication_factor(mk));
    if (err) {
        snprintf(errbuf, cap, "topic %.200s: %s", name, rd_kafka_err2str(err));
        return false;
    }
    return true;
}

/* Runs one command line; the answer goes to stdout. Returns false on quit. */
/* Takes broker `which` (1..N, or "all") down or brings it up. */
static void mock_broker_state(mock *mk, bool up, const char *which, char *errbuf, size_t cap)
{
    long id, lo = 1, hi = mk->brokers;
    if (strcmp(which, "all") != 0) {
        if (!parse_long(which, 1, mk->brokers, &id)) {
            snprintf(errbuf, cap, "broker '%.32s': want 1..%d or all", which, mk->brokers);
            return;
        }
        lo = hi = id;
    }
    for (long b = lo; b <= hi; b++) {
        rd_kafka_resp_err_t err = up ? rd_kafka_mock_broker_set_up(mk->mcluster, (int32_t)b)
                                     : rd_kafka_mock_broker_set_down(mk->mcluster, (int32_t)b);
        if (err) {
            snprintf(errbuf, cap, "broker %ld: %s", b, rd_kafka_err2str(err));
            return;
        }
    }
}

static bool mock_command(mock *mk, char *line)
{
    char *save = NULL, *argv[8];
    int argc = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (argc == (int)(sizeof(argv) / sizeof(argv[0])))
            break;
        argv[argc++] = t;
    }
    if (argc == 0)
        return true;

    char errbuf[256] = "";
    bool quit = false;
    long v, count;
    int16_t api;
    rd_kafka_resp_err_t code;
    if (strcmp(argv[0], "quit") == 0 && argc == 1) {
        quit = true;
    } else if (strcmp(argv[0], "topic") == 0 && argc == 3) {
        if (!parse_long(argv[2], 1, 100000, &v))
            snprintf(errbuf, sizeof(errbuf), "partitions '%.32s': want 1..100000", argv[2]);
        else
            mock_topic(mk, argv[1], (int)v, errbuf, sizeof(errbuf));
    } else if (strcmp(argv[0], "err") == 0 && argc == 4) {
        if (!parse_api(argv[1], &api))
            snprintf(errbuf, sizeof(errbuf), "unknown API '%.64s'", argv[1]);
        else if (!parse_long(argv[2], 1, 100000, &count))
            snprintf(errbuf, sizeof(errbuf), "count '%.32s': want 1..100000", argv[2]);
        else if (!parse_error_code(argv[3], &code))
            snprintf(errbuf, sizeof(errbuf), "unknown error code '%.64s'", argv[3]);
        else {
            rd_kafka_resp_err_t *codes = malloc((size_t)count * sizeof(*codes));
            if (!codes) {
                snprintf(errbuf, sizeof(errbuf), "out of memory");
            } else {
                for (long i = 0; i < count; i++)
                    codes[i] = code;
                rd_kafka_mock_push_request_errors_array(mk->mcluster, api, (size_t)count, codes);
                free(codes);
            }
        }
    } else if (strcmp(argv[0], "clear") == 0 && argc == 2) {
        if (!parse_api(argv[1], &api))
            snprintf(errbuf, sizeof(errbuf), "unknown API '%.64s'", argv[1]);
        else
            rd_kafka_mock_clear_request_errors(mk->mcluster, api);
    } else if ((strcmp(argv[0], "down") == 0 || strcmp(argv[0], "up") == 0) && argc == 2) {
        mock_broker_state(mk, argv[0][0] == 'u', argv[1], errbuf, sizeof(errbuf));
    } else {
        snprintf(errbuf, sizeof(errbuf),
                 "unknown command or wrong arguments: want 'topic NAME PARTITIONS', "
                 "'err API COUNT CODE', 'clear API', 'down ID|all', 'up ID|all' or 'quit'");
    }
    if (errbuf[0])
        printf("error: %s\n", errbuf);
    else
        printf("ok\n");
    fflush(stdout);
    return !quit;
}

/* Reads stdin and runs each complete line until quit, a signal or the end
 * of stdin; then waits for a signal unless quit. SIGTERM and SIGINT are
 * blocked except inside ppoll/sigsuspend, so none is missed between the
 * check of the flag and the wait. */
static void mock_loop(mock *mk, const sigset_t *waitmask)
{
    char buf[MAX_LINE];
    size_t len = 0;
    bool eof = false, quit = false, skipping = false;

    while (!stop_signal && !quit) {
        if (eof) {
            sigsuspend(waitmask);
            continue;
        }
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        if (ppoll(&pfd, 1, NULL, waitmask) < 0) {
            if (errno != EINTR) {
                fail("mock: poll stdin: %s", strerror(errno));
                eof = true;
            }
            continue;
        }
        ssize_t n = read(STDIN_FILENO, buf + len, sizeof(buf) - 1 - len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            if (n < 0)
                fail("mock: read stdin: %s", strerror(errno));
            eof = true;
            if (len > 0 && !skipping) {     /* a last line without '\n' */
                buf[len] = '\0';
                quit = !mock_command(mk, buf);
            }
            len = 0;
            continue;
        }
        len += (size_t)n;
        char *start = buf, *nl;
        while (!quit && (nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
            *nl = '\0';
            if (!skipping)
                quit = !mock_command(mk, start);
            skipping = false;
            start = nl + 1;
        }
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
        if (len == sizeof(buf) - 1) {       /* no '\n' in a full buffer */
            printf("error: line longer than %d bytes\n", MAX_LINE - 1);
            fflush(stdout);
            skipping = true;
            len = 0;
        }
    }
}

static int cmd_mock(int argc, char **argv)
{
    static const struct option opts[] = {
        {"brokers", required_argument, NULL, 'n'},
        {"topic", required_argument, NULL, 't'},
        {"debug", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long brokers = 1;
    const char *debug = NULL;
    int c;
    /* Topics are created once the cluster runs: parse the count first. */
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == '?')
            return bad_option("mock", argv);
        if (c == 'n' && !parse_long(optarg, 1, 64, &brokers))
            return bad_value("mock", "--brokers", optarg, "want 1..64");
        if (c == 'd')
            debug = optarg;
    }
    if (optind < argc) {
        fail("mock: unexpected argument '%s'", argv[optind]);
        return 2;
    }

    /* Block the stop signals before librdkafka starts its threads, which
     * inherit the mask: the main thread alone takes them, in mock_loop. */
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &waitmask);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGINT);

    mock mk = {.brokers = (int)brokers};
    rd_kafka_conf_t *conf = conf_new(NULL);
    if (!conf)
        return 1;
    /* No brokers for this handle: its notice saying so is noise. */
    if (!conf_set(conf, "client.id", "kafka_tool-mock") ||
        !conf_set(conf, "log_level", debug ? "7" : "4") ||
        (debug && !conf_set(conf, "debug", debug))) {
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    mk.rk = handle_new(RD_KAFKA_PRODUCER, &conf);
    if (!mk.rk)
        return 1;
    mk.mcluster = rd_kafka_mock_cluster_new(mk.rk, mk.brokers);
    if (!mk.mcluster) {
        fail("mock: could not start a cluster of %d brokers", mk.brokers);
        rd_kafka_destroy(mk.rk);
        return 1;
    }

    /* Writers of a FIFO may come and go: holding a write end ourselves
     * keeps read() from seeing the end of file between two of them. */
    struct stat st;
    int hold = -1;
    if (fstat(STDIN_FILENO, &st) == 0 && S_ISFIFO(st.st_mode))
        hold = open("/proc/self/fd/0", O_WRONLY | O_NONBLOCK | O_CLOEXEC);

    int status = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 't')
            continue;
        /* NAME[:PARTITIONS] */
        char name[256], errbuf[256];
        long parts = 1;
        const char *colon = strrchr(optarg, ':');
        size_t n = colon ? (size_t)(colon - optarg) : strlen(optarg);
        if (n == 0 || n >= sizeof(name) ||
            (colon && !parse_long(colon + 1, 1, 100000, &parts))) {
            status = bad_value("mock", "--topic", optarg, "want NAME[:PARTITIONS]");
            break;
        }
        memcpy(name, optarg, n);
        name[n] = '\0';
        if (!mock_topic(&mk, name, (int)parts, errbuf, sizeof(errbuf))) {
            fail("mock: %s", errbuf);
            status = 1;
            break;
        }
    }

    if (status == 0) {
        printf("bootstrap=%s\n", rd_kafka_mock_cluster_bootstraps(mk.mcluster));
        if (fflush(stdout) != 0) {
            fail("mock: stdout: %s", strerror(errno));
            status = 1;
        } else {
            mock_loop(&mk, &waitmask);
        }
    }
    if (hold >= 0)
        close(hold);
    rd_kafka_mock_cluster_destroy(mk.mcluster);
    rd_kafka_destroy(mk.rk);
    return status;
}

/* ---- feed --------------------------------------------------------------- */

typedef enum feed_format { FORMAT_JSON, FORMAT_DATA, FORMAT_BINARY } feed_format;

typedef enum bad_kind {
    BAD_NONE, BAD_JSON, BAD_SHAPE, BAD_DATATYPE, BAD_MODEL, BAD_NAN, BAD_OVERSIZE, BAD_EMPTY,
} bad_kind;

static const char *const bad_names[] = {
    [BAD_NONE] = "", [BAD_JSON] = "badjson", [BAD_SHAPE] = "shape",
    [BAD_DATATYPE] = "datatype", [BAD_MODEL] = "model", [BAD_NAN] = "nan",
    [BAD_OVERSIZE] = "oversize", [BAD_EMPTY] = "empty",
};

typedef struct feed_opts {
    const char *bootstrap, *topic, *model, *data_dir;
    long count, start, partition;
    double rate, timeout;
    feed_format format;
    bad_kind bad;
    bool no_id;
    int nheaders;
    const char *header[8];   /* NAME=VALUE */
    long long timestamp;     /* ms; 0: now */
} feed_opts;

/* A byte buffer with room for the largest record (checked by the builders'
 * sizes, not per append). */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* Decimal text of 0..255 and the float32 LE bytes of the same values. */
static char u8_text[256][4];
static uint8_t u8_f32le[256][4];

static void init_tables(void)
{
    for (unsigned v = 0; v < 256; v++) {
        snprintf(u8_text[v], sizeof(u8_text[v]), "%u", v);
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        for (int i = 0; i < 4; i++)
            u8_f32le[v][i] = (uint8_t)(u >> (8 * i));
    }
}

/* Reads the test images: n images of PIXELS bytes each; NULL on failure
 * (reported). The result is new. */
static uint8_t *load_images(const char *dir, long *n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/t10k-images-idx3-ubyte.gz", dir);
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof(path), "%s/t10k-images-idx3-ubyte", dir);
    gzFile gz = gzopen(path, "rb");     /* reads plain files too */
    if (!gz) {
        fail("feed: %s: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t h[16];
    uint8_t *img = NULL;
    if (gzread(gz, h, sizeof(h)) != (int)sizeof(h)) {
        fail("feed: %s: short IDX header", path);
        goto out;
    }
    uint32_t magic = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    uint32_t count = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
    uint32_t rows = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
    uint32_t cols = (uint32_t)h[12] << 24 | (uint32_t)h[13] << 16 | (uint32_t)h[14] << 8 | h[15];
    if (magic != 0x803 || rows != 28 || cols != 28 || count == 0 || count > 1000000) {
        fail("feed: %s: not an IDX file of 28x28 images (magic 0x%x, %ux%ux%u)", path,
             magic, count, rows, cols);
        goto out;
    }
    size_t bytes = (size_t)count * PIXELS;
    img = malloc(bytes);
    if (!img) {
        fail("feed: out of memory for %u images", count);
        goto out;
    }
    if (gzread(gz, img, (unsigned)bytes) != (int)bytes) {
        int zerr;
        const char *msg = gzerror(gz, &zerr);
        fail("feed: %s: truncated (%s)", path, zerr ? msg : "end of file");
        free(img);
        img = NULL;
        goto out;
    }
    *n = (long)count;
out:
    gzclose(gz);
    return img;
}

/* The value of a json or data record for image `img` into b. */
static void build_text(sbuf *b, const feed_opts *o, const char *id, const uint8_t *img)
{
    bad_kind bad = o->bad;
    b->len = 0;
    if (bad == BAD_EMPTY)
        return;
    const char *model = bad == BAD_MODEL ? "nosuch" : o->model;
    int nvals = bad == BAD_SHAPE ? PIXELS - 1 : PIXELS;

    put(b, "{");
    if (!o->no_id) {
        put(b, "\"id\":\"");
        put(b, id);
        put(b, "\",");
    }
    if (o->format == FORMAT_JSON) {
        put(b, "\"model\":\"");
        put(b, model);
        put(b, "\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,1,28,28],\"datatype\":\"");
        put(b, bad == BAD_DATATYPE ? "BOOL" : bad == BAD_NAN ? "FP32" : "UINT8");
        put(b, "\",\"data\":[");
    } else {
        if (bad == BAD_MODEL)
            put(b, "\"model\":\"nosuch\",");
        put(b, "\"data\":[");
    }
    for (int i = 0; i < nvals; i++) {
        if (i)
            b->p[b->len++] = ',';
        /* 1e999 overflows to infinity in a strtod-based parser. */
        put(b, bad == BAD_NAN && i == 0 ? "1e999" : u8_text[img[i]]);
    }
    put(b, o->format == FORMAT_JSON ? "]}]" : "]");
    if (bad == BAD_OVERSIZE) {  /* still valid JSON: blanks before the '}' */
        memset(b->p + b->len, ' ', OVERSIZE_BYTES - 1 - b->len);
        b->len = OVERSIZE_BYTES - 1;
    }
    put(b, "}");
    if (bad == BAD_JSON)
        b->len /= 2;
}

/* The value of a binary record: (1, 28, 28) float32 little-endian. */
static void build_binary(sbuf *b, const feed_opts *o, const uint8_t *img)
{
    bad_kind bad = o->bad;
    b->len = 0;
    if (bad == BAD_EMPTY)
        return;
    int nvals = bad == BAD_SHAPE ? PIXELS - 1 : PIXELS;
    for (int i = 0; i < nvals; i++) {
        memcpy(b->p + b->len, u8_f32le[img[i]], 4);
        b->len += 4;
    }
    if (bad == BAD_NAN)     /* a quiet NaN, 0x7fc00000, as the first value */
        memcpy(b->p, (const uint8_t[4]){0x00, 0x00, 0xc0, 0x7f}, 4);
    if (bad == BAD_OVERSIZE) {
        memset(b->p + b->len, 0, OVERSIZE_BYTES - b->len);
        b->len = OVERSIZE_BYTES;
    }
}

typedef struct feed_state {
    long delivered, failed;
} feed_state;

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    (void)rk;
    feed_state *fs = opaque;
    if (!rkm->err) {
        fs->delivered++;
        return;
    }
    if (fs->failed++ < 10)
        fail("feed: delivery of '%.*s' failed: %s", (int)rkm->key_len,
             rkm->key ? (const char *)rkm->key : "", rd_kafka_err2str(rkm->err));
}

static rd_kafka_t *feed_producer(const feed_opts *o, feed_state *fs)
{
    char timeout_ms[32];
    snprintf(timeout_ms, sizeof(timeout_ms), "%.0f", o->timeout * 1000);
    rd_kafka_conf_t *conf = conf_new(o->bootstrap);
    if (!conf)
        return NULL;
    if (!conf_set(conf, "client.id", "kafka_tool-feed") ||
        !conf_set(conf, "linger.ms", "5") ||
        !conf_set(conf, "batch.num.messages", "10000") ||
        !conf_set(conf, "acks", "all") ||
        !conf_set(conf, "enable.idempotence", "true") ||
        !conf_set(conf, "message.timeout.ms", timeout_ms) ||
        /* room for --bad oversize; the default limit is 1000000 */
        (o->bad == BAD_OVERSIZE && !conf_set(conf, "message.max.bytes", "4194304"))) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_opaque(conf, fs);
    return handle_new(RD_KAFKA_PRODUCER, &conf);
}

/* Produces one record, waiting while the local queue is full; returns the
 * error of a record that could not be queued. */
static rd_kafka_resp_err_t feed_one(rd_kafka_t *rk, const feed_opts *o, const char *id,
                                    const sbuf *value)
{
    const char *model = o->bad == BAD_MODEL ? "nosuch" : o->model;
    for (;;) {
        /* A zero-length value, not a null one (a tombstone): value->p is
         * never NULL. */
        rd_kafka_vu_t vu[7] = {
            {.vtype = RD_KAFKA_VTYPE_TOPIC, .u.cstr = o->topic},
            {.vtype = RD_KAFKA_VTYPE_MSGFLAGS, .u.i = RD_KAFKA_MSG_F_COPY},
            {.vtype = RD_KAFKA_VTYPE_KEY, .u.mem = {(void *)id, strlen(id)}},
            {.vtype = RD_KAFKA_VTYPE_VALUE, .u.mem = {value->p, value->len}},
        };
        size_t n = 4;
        if (o->partition >= 0)
            vu[n++] = (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_PARTITION,
                                      .u.i32 = (int32_t)o->partition};
        if (o->timestamp > 0)
            vu[n++] = (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_TIMESTAMP, .u.i64 = o->timestamp};
        rd_kafka_headers_t *hdrs = NULL;
        if (o->format == FORMAT_BINARY || o->nheaders > 0)
            hdrs = rd_kafka_headers_new(3 + (size_t)o->nheaders);
        if (o->format == FORMAT_BINARY) {
            rd_kafka_header_add(hdrs, "dlserve-model", -1, model, -1);
            rd_kafka_header_add(hdrs, "content-type", -1, "application/octet-stream", -1);
            if (!o->no_id)
                rd_kafka_header_add(hdrs, "dlserve-id", -1, id, -1);
        }
        for (int i = 0; i < o->nheaders; i++) {
            const char *eq = strchr(o->header[i], '=');
            rd_kafka_header_add(hdrs, o->header[i], eq - o->header[i], eq + 1, -1);
        }
        if (hdrs)
            vu[n++] = (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_HEADERS, .u.headers = hdrs};
        rd_kafka_error_t *error = rd_kafka_produceva(rk, vu, n);
        if (!error)
            return RD_KAFKA_RESP_ERR_NO_ERROR;  /* the record owns the headers */
        rd_kafka_resp_err_t err = rd_kafka_error_code(error);
        rd_kafka_error_destroy(error);
        if (hdrs)
            rd_kafka_headers_destroy(hdrs);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || stop_signal)
            return err;
        rd_kafka_poll(rk, 50);      /* serve delivery reports to make room */
    }
}

/* Waits for every delivery report, up to the delivery timeout and a margin;
 * whatever is left then is purged and counted as failed. */
static void feed_drain(rd_kafka_t *rk, const feed_opts *o)
{
    double deadline = now_s() + o->timeout + 10;
    while (rd_kafka_outq_len(rk) > 0 && now_s() < deadline)
        rd_kafka_flush(rk, 200);
    if (rd_kafka_outq_len(rk) > 0) {
        fail("feed: %d records still queued after %.0f s: purging", rd_kafka_outq_len(rk),
             o->timeout + 10);
        rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(rk, 5000);   /* the purged records' reports */
    }
}

/* 1..MAX_NAME-1 printable bytes without blanks, quotes or backslashes:
 * safe in JSON and headers as is. */
static bool plain_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\')
            return false;
    return true;
}

static int parse_feed(int argc, char **argv, feed_opts *o)
{
    static const struct option opts[] = {
        {"bootstrap", required_argument, NULL, 'b'},
        {"topic", required_argument, NULL, 't'},
        {"count", required_argument, NULL, 'n'},
        {"start", required_argument, NULL, 's'},
        {"format", required_argument, NULL, 'f'},
        {"model", required_argument, NULL, 'm'},
        {"data", required_argument, NULL, 'd'},
        {"bad", required_argument, NULL, 'B'},
        {"no-id", no_argument, NULL, 'I'},
        {"partition", required_argument, NULL, 'p'},
        {"rate", required_argument, NULL, 'r'},
        {"timeout", required_argument, NULL, 'T'},
        {"header", required_argument, NULL, 'H'},
        {"timestamp", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (feed_opts){
        .model = "fashion-mlp", .data_dir = "/usr/share/datasets/fashion-mnist",
        .count = 1000, .partition = -1, .timeout = 60,
    };
    int c;
    while ((c = getopt_long(argc, argv, "b:t:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': o->bootstrap = optarg; break;
        case 't': o->topic = optarg; break;
        case 'm': o->model = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 'I': o->no_id = true; break;
        case 'H':
            if (o->nheaders == 8 || !strchr(optarg, '=') || optarg[0] == '=')
                return bad_value("feed", "--header", optarg, "want NAME=VALUE, at most 8");
            o->header[o->nheaders++] = optarg;
            break;
        case 'S': {
            long ts;
            if (!parse_long(optarg, 1, LONG_MAX, &ts))
                return bad_value("feed", "--timestamp", optarg, "want ms since the epoch");
            o->timestamp = ts;
            break;
        }
        case 'n':
            if (!parse_long(optarg, 0, 1000000000L, &o->count))
                return bad_value("feed", "--count", optarg, "want 0..1000000000");
            break;
        case 's':
            if (!parse_long(optarg, 0, 1000000000L, &o->start))
                return bad_value("feed", "--start", optarg, "want 0..1000000000");
            break;
        case 'p':
            if (!parse_long(optarg, 0, INT32_MAX, &o->partition))
                return bad_value("feed", "--partition", optarg, "want a partition >= 0");
            break;
        case 'r':
            if (!parse_double(optarg, 0, 1e9, &o->rate))
                return bad_value("feed", "--rate", optarg, "want records/s >= 0");
            break;
        case 'T':
            if (!parse_double(optarg, 1, 86400, &o->timeout))
                return bad_value("feed", "--timeout", optarg, "want 1..86400 seconds");
            break;
        case 'f':
            if (strcmp(optarg, "json") == 0)
                o->format = FORMAT_JSON;
            else if (strcmp(optarg, "data") == 0)
                o->format = FORMAT_DATA;
            else if (strcmp(optarg, "binary") == 0)
                o->format = FORMAT_BINARY;
            else
                return bad_value("feed", "--format", optarg, "want json, data or binary");
            break;
        case 'B':
            o->bad = BAD_NONE;
            for (int k = BAD_JSON; k <= BAD_EMPTY; k++)
                if (strcmp(optarg, bad_names[k]) == 0)
                    o->bad = (bad_kind)k;
            if (o->bad == BAD_NONE)
                return bad_value("feed", "--bad", optarg,
                                 "want badjson, shape, datatype, model, nan, oversize or empty");
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return bad_option("feed", argv);
        }
    }
    if (optind < argc) {
        fail("feed: unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!o->bootstrap || !o->topic) {
        fail("feed: -b BOOTSTRAP and -t TOPIC are required");
        return 2;
    }
    /* The model name goes into JSON and headers as is. */
    if (!plain_name(o->model))
        return bad_value("feed", "--model", o->model, "want a plain name under 128 bytes");
    if ((o->bad == BAD_JSON && o->format == FORMAT_BINARY) ||
        (o->bad == BAD_DATATYPE && o->format != FORMAT_JSON)) {
        fail("feed: --bad %s does not apply to --format %s", bad_names[o->bad],
             o->format == FORMAT_BINARY ? "binary" : "data");
        return 2;
    }
    return -1;
}

static int cmd_feed(int argc, char **argv)
{
    feed_opts o;
    int st = parse_feed(argc, argv, &o);
    if (st >= 0)
        return st;

    init_tables();
    long nimages = 0;
    uint8_t *images = load_images(o.data_dir, &nimages);
    if (!images)
        return 1;
    sbuf value = {.cap = OVERSIZE_BYTES + 65536};
    value.p = malloc(value.cap);
    feed_state fs = {0};
    rd_kafka_t *rk = value.p ? feed_producer(&o, &fs) : NULL;
    if (!rk) {
        if (!value.p)
            fail("feed: out of memory");
        free(value.p);
        free(images);
        return 1;
    }

    long queued = 0;
    int status = 0;
    double t0 = now_s();
    for (long k = 0; k < o.count && !stop_signal; k++) {
        if (o.rate > 0) {   /* record k is due at t0 + k / rate */
            double wait;
            while ((wait = t0 + (double)k / o.rate - now_s()) > 0 && !stop_signal)
                rd_kafka_poll(rk, wait > 0.1 ? 100 : (int)(wait * 1000) + 1);
        }
        char id[MAX_NAME];
        long idx = o.start + k;
        if (o.bad)
            snprintf(id, sizeof(id), "bad-%s-%ld", bad_names[o.bad], idx);
        else
            snprintf(id, sizeof(id), "img-%ld", idx);
        const uint8_t *img = images + (size_t)(idx % nimages) * PIXELS;
        if (o.format == FORMAT_BINARY)
            build_binary(&value, &o, img);
        else
            build_text(&value, &o, id, img);

        rd_kafka_resp_err_t err = feed_one(rk, &o, id, &value);
        if (err) {
            if (!stop_signal)
                fail("feed: produce '%s': %s", id, rd_kafka_err2str(err));
            status = 1;
            break;
        }
        queued++;
        rd_kafka_poll(rk, 0);
    }
    feed_drain(rk, &o);
    double seconds = now_s() - t0;

    char errstr[512];
    rd_kafka_resp_err_t fatal = rd_kafka_fatal_error(rk, errstr, sizeof(errstr));
    if (fatal) {
        fail("feed: fatal producer error %s: %s", rd_kafka_err2name(fatal), errstr);
        status = 1;
    }
    if (fs.failed > 0) {
        fail("feed: %ld of %ld records failed", fs.failed, queued);
        status = 1;
    }
    if (stop_signal) {
        fail("feed: stopped by signal %d after %ld records", (int)stop_signal, queued);
        status = 1;
    }
    printf("{\"produced\": %ld, \"seconds\": %.3f, \"rate\": %.1f}\n", fs.delivered, seconds,
           seconds > 0 ? (double)fs.delivered / seconds : 0.0);
    if (fflush(stdout) != 0)
        status = 1;

    rd_kafka_destroy(rk);
    free(value.p);
    free(images);
    return status;
}

/* ---- collect ------------------------------------------------------------ */

typedef struct collect_opts {
    const char *bootstrap, *topic, *out;
    long count;
    double timeout, idle;
    bool read_committed, received, no_values;
} collect_opts;

/* The distinct keys seen: open addressing, linear probing, FNV-1a. */
typedef struct key_slot {
    char *key;      /* NULL: empty */
    size_t len;
    uint64_t hash;
} key_slot;

typedef struct key_set {
    key_slot *slots;
    size_t cap, n;  /* cap a power of two, n <= cap / 2 */
} key_set;

static uint64_t fnv1a(const void *p, size_t len)
{
    const uint8_t *s = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static key_slot *key_find(key_slot *slots, size_t cap, const void *key, size_t len, uint64_t h)
{
    for (size_t i = (size_t)h & (cap - 1);; i = (i + 1) & (cap - 1)) {
        key_slot *s = &slots[i];
        if (!s->key || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0))
            return s;
    }
}

/* 1 if the key is new, 0 if seen, -1 when out of memory. */
static int key_add(key_set *ks, const void *key, size_t len)
{
    if (2 * (ks->n + 1) > ks->cap) {
        size_t cap = ks->cap ? 2 * ks->cap : 1024;
        key_slot *slots = calloc(cap, sizeof(*slots));
        if (!slots)
            return -1;
        for (size_t i = 0; i < ks->cap; i++)
            if (ks->slots[i].key)
                *key_find(slots, cap, ks->slots[i].key, ks->slots[i].len,
                          ks->slots[i].hash) = ks->slots[i];
        free(ks->slots);
        ks->slots = slots;
        ks->cap = cap;
    }
    uint64_t h = fnv1a(key, len);
    key_slot *s = key_find(ks->slots, ks->cap, key, len, h);
    if (s->key)
        return 0;
    s->key = malloc(len + 1);   /* +1: a zero-length key is not NULL */
    if (!s->key)
        return -1;
    memcpy(s->key, key, len);
    s->len = len;
    s->hash = h;
    ks->n++;
    return 1;
}

static void key_set_fini(key_set *ks)
{
    for (size_t i = 0; i < ks->cap; i++)
        free(ks->slots[i].key);
    free(ks->slots);
}

/* Bytes as text: \\ \t \r \n, and \xHH for the rest outside 0x20..0x7e
 * and for the bytes in `also`. */
static void put_escaped(FILE *f, const void *p, size_t len, const char *also)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = s[i];
        if (c == '\\')
            fputs("\\\\", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20 || c > 0x7e || (also && c && strchr(also, c)))
            fprintf(f, "\\x%02x", c);
        else
            putc(c, f);
    }
}

/* Wall-clock microseconds since the epoch (Kafka timestamps' clock). */
static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One --out line, without the value when no_value; received_us >= 0
 * adds it as a last field. */
static void write_record(FILE *f, const rd_kafka_message_t *rkm, bool no_value,
                         int64_t received_us)
{
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(rkm, &tstype);
    put_escaped(f, rkm->key, rkm->key ? rkm->key_len : 0, NULL);
    fprintf(f, "\t%" PRId32 "\t%" PRId64 "\t%" PRId64 "\t", rkm->partition, rkm->offset, ts);
    rd_kafka_headers_t *hdrs;
    if (rd_kafka_message_headers(rkm, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *val;
        size_t size;
        for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == 0; i++) {
            if (i)
                putc(';', f);
            put_escaped(f, name, strlen(name), ";=");
            if (val) {
                putc('=', f);
                put_escaped(f, val, size, ";=");
            }
        }
    }
    putc('\t', f);
    if (!no_value)
        put_escaped(f, rkm->payload, rkm->payload ? rkm->len : 0, NULL);
    if (received_us >= 0)
        fprintf(f, "\t%" PRId64, received_us);
    putc('\n', f);
}

static int parse_collect(int argc, char **argv, collect_opts *o)
{
    static const struct option opts[] = {
        {"bootstrap", required_argument, NULL, 'b'},
        {"topic", required_argument, NULL, 't'},
        {"count", required_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, 'T'},
        {"idle", required_argument, NULL, 'i'},
        {"read-committed", no_argument, NULL, 'R'},
        {"received", no_argument, NULL, 'r'},
        {"no-values", no_argument, NULL, 'V'},
        {"out", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (collect_opts){.timeout = 60};
    int c;
    while ((c = getopt_long(argc, argv, "b:t:", opts, NULL)) != -1) {
        switch (c) {
        case 'b': o->bootstrap = optarg; break;
        case 't': o->topic = optarg; break;
        case 'o': o->out = optarg; break;
        case 'R': o->read_committed = true; break;
        case 'r': o->received = true; break;
        case 'V': o->no_values = true; break;
        case 'n':
            if (!parse_long(optarg, 1, 1000000000L, &o->count))
                return bad_value("collect", "--count", optarg, "want 1..1000000000");
            break;
        case 'T':
            if (!parse_double(optarg, 0.1, 86400, &o->timeout))
                return bad_value("collect", "--timeout", optarg, "want 0.1..86400 seconds");
            break;
        case 'i':
            if (!parse_double(optarg, 0, 86400, &o->idle))
                return bad_value("collect", "--idle", optarg, "want 0..86400 seconds");
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return bad_option("collect", argv);
        }
    }
    if (optind < argc) {
        fail("collect: unexpected argument '%s'", argv[optind]);
        return 2;
    }
    if (!o->bootstrap || !o->topic) {
        fail("collect: -b BOOTSTRAP and -t TOPIC are required");
        return 2;
    }
    return -1;
}

static rd_kafka_t *collect_consumer(const collect_opts *o)
{
    rd_kafka_conf_t *conf = conf_new(o->bootstrap);
    if (!conf)
        return NULL;
    /* rd_kafka_assign needs a group id, but the group is never joined and
     * nothing is committed. */
    if (!conf_set(conf, "client.id", "kafka_tool-collect") ||
        !conf_set(conf, "group.id", "kafka_tool-collect") ||
        !conf_set(conf, "enable.auto.commit", "false") ||
        !conf_set(conf, "enable.auto.offset.store", "false") ||
        !conf_set(conf, "enable.partition.eof", "true") ||
        !conf_set(conf, "auto.offset.reset", "earliest") ||
        !conf_set(conf, "isolation.level",
                  o->read_committed ? "read_committed" : "read_uncommitted") ||
        (o->received && !conf_set(conf, "fetch.wait.max.ms", "1"))) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_t *rk = handle_new(RD_KAFKA_CONSUMER, &conf);
    if (rk)
        rd_kafka_poll_set_consumer(rk);
    return rk;
}

/* The topic's partition count, retried until it has partitions or the
 * deadline; 0 when it has none by then (reported). */
static int topic_partitions(rd_kafka_t *rk, const char *topic, double deadline)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt) {
        fail("collect: topic %s: %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
        return 0;
    }
    int n = 0;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__TIMED_OUT;
    while (!stop_signal) {
        double left = deadline - now_s();
        if (left <= 0)
            break;
        const struct rd_kafka_metadata *md = NULL;
        err = rd_kafka_metadata(rk, 0, rkt, &md, left > 2 ? 2000 : (int)(left * 1000) + 1);
        if (!err) {
            if (md->topic_cnt == 1 && !md->topics[0].err)
                n = md->topics[0].partition_cnt;
            else if (md->topic_cnt == 1)
                err = md->topics[0].err;
            rd_kafka_metadata_destroy(md);
        }
        if (n > 0)
            break;
        rd_kafka_poll(rk, 200);     /* not there yet: ask again shortly */
    }
    if (n == 0 && !stop_signal)
        fail("collect: topic %s: no partitions: %s", topic, rd_kafka_err2str(err));
    rd_kafka_topic_destroy(rkt);
    return n;
}

static int cmd_collect(int argc, char **argv)
{
    collect_opts o;
    int st = parse_collect(argc, argv, &o);
    if (st >= 0)
        return st;

    double t0 = now_s(), deadline = t0 + o.timeout;
    FILE *out = NULL;
    if (o.out && !(out = fopen(o.out, "w"))) {
        fail("collect: %s: %s", o.out, strerror(errno));
        return 1;
    }
    rd_kafka_t *rk = collect_consumer(&o);
    if (!rk) {
        if (out)
            fclose(out);
        return 1;
    }

    long records = 0, keyless = 0;
    key_set keys = {0};
    bool *at_eof = NULL, idled = false, failed = false;
    int neof = 0;
    double idle_since = 0;
    int nparts = topic_partitions(rk, o.topic, deadline);
    rd_kafka_topic_partition_list_t *parts = NULL;
    if (nparts > 0) {
        at_eof = calloc((size_t)nparts, sizeof(*at_eof));
        parts = rd_kafka_topic_partition_list_new(nparts);
        for (int p = 0; p < nparts; p++)
            rd_kafka_topic_partition_list_add(parts, o.topic, p)->offset =
                RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_resp_err_t err = rd_kafka_assign(rk, parts);
        rd_kafka_topic_partition_list_destroy(parts);
        if (err) {
            fail("collect: assign: %s", rd_kafka_err2str(err));
            failed = true;
        }
        if (!at_eof) {
            fail("collect: out of memory");
            failed = true;
        }
    }

    while (nparts > 0 && !failed && !stop_signal) {
        double now = now_s();
        if (now >= deadline)
            break;
        if (o.count > 0 && (long)keys.n + keyless >= o.count)
            break;
        if (o.idle > 0 && neof == nparts && now - idle_since >= o.idle) {
            idled = true;
            break;
        }
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 100);
        if (!rkm)
            continue;
        int32_t p = rkm->partition;
        bool known = p >= 0 && p < nparts;
        if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (known && !at_eof[p]) {
                at_eof[p] = true;
                if (++neof == nparts)
                    idle_since = now_s();
            }
        } else if (rkm->err) {
            fail("collect: %s [%" PRId32 "]: %s", o.topic, p, rd_kafka_message_errstr(rkm));
        } else {
            records++;
            if (known && at_eof[p]) {
                at_eof[p] = false;
                neof--;
            }
            /* A record without a key cannot be a duplicate. */
            int added = 1;
            if (rkm->key)
                added = key_add(&keys, rkm->key, rkm->key_len);
            else
                keyless++;
            if (added < 0) {
                fail("collect: out of memory for keys");
                failed = true;
            }
            if (out)
                write_record(out, rkm, o.no_values, o.received ? wall_us() : -1);
        }
        rd_kafka_message_destroy(rkm);
    }

    long distinct = (long)keys.n + keyless;
    double seconds = now_s() - t0;
    int status = 0;
    if (failed || nparts == 0)
        status = 1;
    else if (o.count > 0 ? distinct < o.count : !idled)
        status = 1;
    if (status && !failed && nparts > 0)
        fail("collect: %s after %.1f s with %ld distinct keys%s", stop_signal ? "stopped" :
             idled ? "idle" : "timed out", seconds, distinct,
             o.count > 0 ? " (fewer than --count)" : "");
    if (out && (ferror(out) | fclose(out))) {
        fail("collect: writing %s failed", o.out);
        status = 1;
    }
    printf("{\"records\": %ld, \"distinct\": %ld, \"duplicates\": %ld, \"seconds\": %.3f}\n",
           records, distinct, records - distinct, seconds);
    if (fflush(stdout) != 0)
        status = 1;

    rd_kafka_resp_err_t err = rd_kafka_consumer_close(rk);
    if (err)
        fail("collect: close: %s", rd_kafka_err2str(err));
    rd_kafka_destroy(rk);
    key_set_fini(&keys);
    free(at_eof);
    return status;
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    install_signals();
    opterr = 0;     /* bad_option words the message */
    if (strcmp(cmd, "mock") == 0)
        return cmd_mock(argc - 1, argv + 1);
    if (strcmp(cmd, "feed") == 0)
        return cmd_feed(argc - 1, argv + 1);
    if (strcmp(cmd, "collect") == 0)
        return cmd_collect(argc - 1, argv + 1);
    fail("unknown command '%s': want mock, feed or collect (see --help)", cmd);
    return 2;
}
