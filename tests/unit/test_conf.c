/* test_conf.c: option tables and dlserve.conf: defaults, files, every error
 * kind with file:line, environment and command-line overrides, passthrough
 * sections, the INI and Markdown printouts and the daemon's cross-checks. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/dl_serve.h"

static char path[64];
static dl_serve_conf conf;

static void setup(void)
{
    fx_tmpfile(path, sizeof(path), "conf");
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_load(&conf, NULL, &err), DL_OK, "%s", err.msg);
}

static void teardown(void) { unlink(path); }

TestSuite(conf, .init = setup, .fini = teardown, .timeout = 10);

/* ---- helpers ------------------------------------------------------------ */

static dl_status load(const char *text, dl_err *err)
{
    fx_write_text(path, text);
    return dl_serve_conf_load(&conf, path, err);
}

static void loads(const char *text)
{
    dl_err err = {0};
    cr_assert_eq(load(text, &err), DL_OK, "%s", err.msg);
}

/* Loading text fails with exactly "<path><rest>" and leaves conf alone. */
static void fails_with(const char *text, const char *rest)
{
    dl_serve_conf before = conf;
    dl_err err = {0};
    char want[512];
    snprintf(want, sizeof(want), "%s%s", path, rest);
    cr_assert_eq(load(text, &err), DL_ERR_INVALID, "text: %s", text);
    cr_expect_str_eq(err.msg, want);
    cr_expect_eq(memcmp(&before, &conf, sizeof(conf)), 0, "conf changed on error");
}

/* Cross-field failure: message contains `what`. */
static void refused(const char *text, const char *what)
{
    dl_err err = {0};
    cr_assert_eq(load(text, &err), DL_ERR_INVALID, "text: %s", text);
    cr_expect_not_null(strstr(err.msg, what), "message was: %s", err.msg);
}

/* Equal option by option (bytes of each field; strings are zero-padded). */
static void expect_same(const dl_serve_conf *a, const dl_serve_conf *b)
{
    for (const dl_opt *o = dl_serve_opts; o->key; o++) {
        size_t n = o->type == DL_OPT_STRING ? o->size
                   : o->type == DL_OPT_BOOL ? sizeof(bool) : 8;
        cr_expect_eq(memcmp((const char *)a + o->offset, (const char *)b + o->offset, n),
                     0, "[%s] %s differs", o->section, o->key);
    }
}

static void expect_defaults(const dl_serve_conf *c)
{
    cr_expect_str_eq(c->http.address, "127.0.0.1");
    cr_expect_eq(c->http.port, 8000);
    cr_expect_eq(c->http.max_body_bytes, 8388608);
    cr_expect_str_eq(c->http.token, "");
    cr_expect_str_eq(c->http.tls_cert, "");
    cr_expect_str_eq(c->http.tls_key, "");
    cr_expect_eq(c->http.threads, 0);
    cr_expect_eq(c->batching.max_batch_size, 64);
    cr_expect_eq(c->batching.max_queue_delay_us, 500);
    cr_expect_eq(c->batching.max_queue_size, 4096);
    cr_expect(c->batching.eager);
    cr_expect_eq(c->batching.direct_max_us, 1000);
    cr_expect_str_eq(c->models.dir, "models");
    cr_expect_str_eq(c->models.policy, "latest");
    cr_expect(c->models.watch);
    cr_expect_str_eq(c->models.device.name, "cpu");
    cr_expect_eq(c->models.threads, 0);
    cr_expect_eq(c->log.level, DL_LOG_INFO);
    cr_expect_str_eq(c->log.debug, "");
}

/* ---- defaults and good files -------------------------------------------- */

Test(conf, defaults) { expect_defaults(&conf); }

Test(conf, good_file)
{
    loads("; a comment\n"
          "# another\n"
          "[http]\n"
          "  port = 9000\n"
          "max_body_bytes = 8M\n"
          "token = s3cret ; inline comment\n"
          "address=0.0.0.0\n"
          "[models]\n"
          "watch = Off\n"
          "policy = versions:1,3\n"
          "device = cuda:1\n"
          "dir = /srv/models with space\n"
          "[batching]\n"
          "max_queue_delay_us = 0\n"
          "max_queue_size = 1k\n");
    cr_expect_eq(conf.http.port, 9000);
    cr_expect_eq(conf.http.max_body_bytes, 8 << 20);
    cr_expect_str_eq(conf.http.token, "s3cret");
    cr_expect_str_eq(conf.http.address, "0.0.0.0");
    cr_expect_not(conf.models.watch);
    cr_expect_str_eq(conf.models.policy, "versions:1,3");
    cr_expect_str_eq(conf.models.device.name, "cuda:1");
    cr_expect_str_eq(conf.models.dir, "/srv/models with space");
    cr_expect_eq(conf.batching.max_queue_delay_us, 0);
    cr_expect_eq(conf.batching.max_queue_size, 1024);
    /* untouched options keep their defaults */
    cr_expect_eq(conf.batching.max_batch_size, 64);
    cr_expect_eq(conf.log.level, DL_LOG_INFO);
}

Test(conf, empty_file_gives_defaults)
{
    loads("");
    expect_defaults(&conf);
}

/* ---- errors, each with file:line ---------------------------------------- */

Test(conf, unknown_section)
{
    fails_with("[http]\nport = 1\n[htp]\nport = 2\n", ":3: unknown section [htp]");
    fails_with("[bogus]\n", ":1: unknown section [bogus]");
}

Test(conf, unknown_key)
{
    fails_with("[http]\n\nprot = 80\n", ":3: [http] unknown key 'prot'");
    fails_with("port = 80\n", ":1: key 'port' is outside any section");
}

Test(conf, bad_int)
{
    fails_with("[http]\nport = 80x\n", ":2: [http] port: '80x' is not an integer");
    fails_with("[http]\nport =\n", ":2: [http] port: '' is not an integer");
    fails_with("[http]\nport = 8.5\n", ":2: [http] port: '8.5' is not an integer");
    fails_with("[http]\nport = 99999999999999999999\n",
               ":2: [http] port: '99999999999999999999' is not an integer");
}

Test(conf, out_of_range)
{
    fails_with("[http]\nport = 70000\n", ":2: [http] port: 70000 is out of range [0, 65535]");
    fails_with("[batching]\nmax_batch_size = 0\n",
               ":2: [batching] max_batch_size: 0 is out of range [1, 65536]");
    fails_with("[http]\nmax_body_bytes = 2G\n",
               ":2: [http] max_body_bytes: 2G is out of range [1024, 1073741824]");
}

Test(conf, bad_bool)
{
    fails_with("[models]\nwatch = maybe\n",
               ":2: [models] watch: 'maybe' is not a boolean "
               "(true/false, yes/no, on/off, 1/0)");
}

Test(conf, string_too_long)
{
    fails_with("[models]\ndevice = 0123456789012345678901234567890123456789\n",
               ":2: [models] device: value is too long (40 characters, at most 31)");
}

Test(conf, syntax_error_line)
{
    fails_with("[http]\nport = 1\n\nthis is not ini\n",
               ":4: syntax error (expected [section] or key = value)");
    /* the first error wins */
    fails_with("[http]\n[oops\nprot = 1\n",
               ":2: syntax error (expected [section] or key = value)");
}

Test(conf, line_too_long)
{
    char text[512];
    snprintf(text, sizeof(text), "[http]\ntoken = %0300d\n", 0);
    fails_with(text, ":2: line is too long (at most 198 characters)");
}

Test(conf, missing_file)
{
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_load(&conf, "/nonexistent/dlserve.conf", &err), DL_ERR_IO);
    cr_expect_not_null(strstr(err.msg, "/nonexistent/dlserve.conf"), "%s", err.msg);
}

/* ---- overrides ----------------------------------------------------------- */

Test(conf, env_beats_file)
{
    setenv("DLSERVE_HTTP_PORT", "9100", 1);
    setenv("DLSERVE_MODELS_WATCH", "no", 1);
    loads("[http]\nport = 9000\n[models]\nwatch = yes\n");
    cr_expect_eq(conf.http.port, 9100);
    cr_expect_not(conf.models.watch);
}

Test(conf, env_error_names_variable)
{
    setenv("DLSERVE_BATCHING_MAX_QUEUE_DELAY_US", "soon", 1);
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_load(&conf, NULL, &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "DLSERVE_BATCHING_MAX_QUEUE_DELAY_US: [batching] "
                              "max_queue_delay_us: 'soon' is not an integer");
}

Test(conf, set_from_command_line)
{
    dl_err err = {0};
    cr_assert_eq(dl_conf_set(dl_serve_opts, &conf, "http", "port", "8080", "--http-port",
                             &err), DL_OK, "%s", err.msg);
    cr_expect_eq(conf.http.port, 8080);
    cr_assert_eq(dl_conf_set(dl_serve_opts, &conf, "http", "port", "99999", "--http-port",
                             &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "--http-port: [http] port: 99999 is out of range [0, 65535]");
    cr_expect_eq(conf.http.port, 8080);
    cr_assert_eq(dl_conf_set(dl_serve_opts, &conf, "http", "prot", "1", "--http-prot",
                             &err), DL_ERR_INVALID);
    cr_expect_str_eq(err.msg, "--http-prot: [http] unknown key 'prot'");
}

/* ---- passthrough sections ----------------------------------------------- */

Test(conf, passthrough_sections_accepted)
{
    loads("[http]\nport = 1234\n"
          "[kafka]\nbrokers = localhost:9092\n"
          "[kafka.consumer]\ngroup.id = dlserve\nauto.offset.reset = earliest\n"
          "[kafka.producer]\nlinger.ms = 5\n"
          "[redis]\nhost = 127.0.0.1\n");
    cr_expect_eq(conf.http.port, 1234);
    /* the raw properties are kept, in order, for the consumer or producer */
    cr_assert_eq(conf.kafka.nprops, 3);
    cr_expect_str_eq(conf.kafka.props[1].key, "auto.offset.reset");
    cr_expect_str_eq(conf.kafka.props[1].value, "earliest");
    cr_expect_eq(conf.kafka.props[1].client, DL_KAFKA_CLIENT_CONSUMER);
    cr_expect_eq(conf.kafka.props[2].client, DL_KAFKA_CLIENT_PRODUCER);
    char origin[1100];
    snprintf(origin, sizeof(origin), "%s:9", path);
    cr_expect_str_eq(conf.kafka.props[2].origin, origin);
    cr_expect_str_eq(conf.kafka.brokers, "localhost:9092");
    cr_expect_str_eq(conf.redis.host, "127.0.0.1");
    /* and from the command line */
    const char *ov[] = {"kafka.producer.compression.type=lz4", "kafka.group_id=g9"};
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_apply(&conf, ov, 2, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(conf.kafka.nprops, 4);
    cr_expect_str_eq(conf.kafka.props[3].key, "compression.type");
    cr_expect_eq(conf.kafka.props[3].client, DL_KAFKA_CLIENT_PRODUCER);
    cr_expect_str_eq(conf.kafka.group_id, "g9");
}

Test(conf, kafka_client_section_for_every_client)
{
    loads("[kafka.client]\nsecurity.protocol = sasl_ssl\nsasl.mechanisms = PLAIN\n"
          "[kafka.consumer]\nfetch.min.bytes = 10\n");
    cr_assert_eq(conf.kafka.nprops, 3);
    cr_expect_eq(conf.kafka.props[0].client, DL_KAFKA_CLIENT_ALL);
    cr_expect_str_eq(conf.kafka.props[1].key, "sasl.mechanisms");
    cr_expect_eq(conf.kafka.props[2].client, DL_KAFKA_CLIENT_CONSUMER);
    setenv("DL_TEST_USER", "alice", 1);
    const char *ov[] = {"kafka.client.sasl.username=${env:DL_TEST_USER}"};
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_apply(&conf, ov, 1, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(conf.kafka.nprops, 4);
    cr_expect_eq(conf.kafka.props[3].client, DL_KAFKA_CLIENT_ALL);
    cr_expect_str_eq(conf.kafka.props[3].key, "sasl.username");
    cr_expect_str_eq(conf.kafka.props[3].value, "alice");
}

Test(conf, security_only_in_kafka_client)
{
    char want[512];
    static const char *const cases[][2] = {
        {"[kafka.consumer]\nsasl.username = u\n", "kafka.consumer] sasl.username"},
        {"[kafka.producer]\nssl.ca.location = /ca\n", "kafka.producer] ssl.ca.location"},
        /* the same value in both sections: refused too */
        {"[kafka.consumer]\nsecurity.protocol = ssl\n[kafka.producer]\n"
         "security.protocol = ssl\n", "kafka.consumer] security.protocol"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        dl_err err = {0};
        cr_assert_eq(load(cases[i][0], &err), DL_ERR_INVALID, "%s", cases[i][0]);
        snprintf(want, sizeof(want), "%s:2: [%s: security properties (security.protocol, "
                 "sasl.*, ssl.*) apply to every Kafka client: set them in [kafka.client]",
                 path, cases[i][1]);
        cr_expect_str_eq(err.msg, want);
    }
    loads("[kafka.client]\nsecurity.protocol = ssl\nssl.ca.location = /ca\n"
          "[kafka.consumer]\nsession.timeout.ms = 6000\n");
}

Test(conf, input_topics_with_models)
{
    dl_kafka_topic t[4];
    int n = 0;
    dl_err err = {0};
    cr_assert_eq(dl_kafka_topics_parse(" images:fashion-cnn, tabular:recs ,plain", t, 4, &n,
                                       &err), DL_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(t[0].topic, "images");
    cr_expect_str_eq(t[0].model, "fashion-cnn");
    cr_expect_str_eq(t[1].topic, "tabular");
    cr_expect_str_eq(t[1].model, "recs");
    cr_expect_str_eq(t[2].topic, "plain");
    cr_expect_str_eq(t[2].model, "");
    static const char *const bad[][2] = {
        {"a,,b", "has an empty entry"}, {"", "input_topics is empty"},
        {"a:", "'' is not a valid model name"}, {"a:.x", "'.x' is not a valid model name"},
        {"a b", "a topic name is made of"}, {":m", "the topic name is empty"},
        {"a:m, a:n", "topic 'a' is listed twice"}, {"a,b,c,d,e", "more than 4 topics"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        cr_expect_eq(dl_kafka_topics_parse(bad[i][0], t, 4, &n, &err), DL_ERR_INVALID, "%s",
                     bad[i][0]);
        cr_expect_not_null(strstr(err.msg, bad[i][1]), "'%s': %s", bad[i][0], err.msg);
    }
    refused("[kafka]\nembedded = true\ninput_topics = in:bad/name\n",
            "[kafka] input_topics: 'in:bad/name': 'bad/name' is not a valid model name");
    refused("[kafka]\ndefault_model = a b\n", "[kafka] default_model 'a b' is not a valid");
}

typedef struct raw_seen {
    int  n;
    char last[256];
} raw_seen;

static dl_status raw_fn(void *ctx, const char *section, const char *key, const char *value,
                        const char *origin, dl_err *err)
{
    raw_seen *seen = ctx;
    if (!strcmp(value, "bad"))
        return dl_err_set(err, DL_ERR_INVALID, "refused");
    seen->n++;
    snprintf(seen->last, sizeof(seen->last), "%s|%s|%s|%s", section, key, value, origin);
    return DL_OK;
}

Test(conf, passthrough_raw_callback)
{
    static const char *const pass[] = {"kafka.consumer", NULL};
    raw_seen seen = {0};
    dl_err err = {0};
    fx_write_text(path, "[kafka.consumer]\n; comment\ngroup.id = g1\n[http]\nport = 1\n");
    cr_assert_eq(dl_conf_load_file(dl_serve_opts, &conf, path, pass, raw_fn, &seen, &err),
                 DL_OK, "%s", err.msg);
    cr_expect_eq(seen.n, 1);
    char want[256];
    snprintf(want, sizeof(want), "kafka.consumer|group.id|g1|%s:3", path);
    cr_expect_str_eq(seen.last, want);
    cr_expect_eq(conf.http.port, 1);

    fx_write_text(path, "[kafka.consumer]\ngroup.id = bad\n");
    cr_assert_eq(dl_conf_load_file(dl_serve_opts, &conf, path, pass, raw_fn, &seen, &err),
                 DL_ERR_INVALID);
    snprintf(want, sizeof(want), "%s:2: [kafka.consumer] group.id: refused", path);
    cr_expect_str_eq(err.msg, want);
}

/* ---- secrets outside the file ------------------------------------------- */

Test(conf, values_from_env_and_file)
{
    char secret[80];
    fx_tmpfile(secret, sizeof(secret), "secret");
    fx_write_text(secret, "s3cr3t-from-file\n");
    setenv("DL_TEST_TOKEN", "s3cr3t-from-env", 1);
    setenv("DL_TEST_HOST", "redis.example", 1);
    char text[512];
    snprintf(text, sizeof(text), "[http]\ntoken = ${env:DL_TEST_TOKEN}\n"
             "[redis]\nhost = ${env:DL_TEST_HOST}\npassword = ${file:%s}\n"
             "[kafka.consumer]\nclient.id = a-${env:DL_TEST_HOST}-b\n", secret);
    loads(text);
    cr_expect_str_eq(conf.http.token, "s3cr3t-from-env");
    cr_expect_str_eq(conf.redis.host, "redis.example");
    cr_expect_str_eq(conf.redis.password, "s3cr3t-from-file");
    cr_assert_eq(conf.kafka.nprops, 1);
    cr_expect_str_eq(conf.kafka.props[0].value, "a-redis.example-b");
    /* DLSERVE_* variables expand too */
    setenv("DLSERVE_HTTP_TOKEN", "${env:DL_TEST_HOST}", 1);
    loads("");
    cr_expect_str_eq(conf.http.token, "redis.example");
    unsetenv("DLSERVE_HTTP_TOKEN");
    unlink(secret);
}

Test(conf, unset_variable_refused_with_file_line)
{
    unsetenv("DL_TEST_UNSET");
    fails_with("[http]\nport = 1\ntoken = ${env:DL_TEST_UNSET}\n",
               ":3: [http] token: environment variable DL_TEST_UNSET is not set "
               "(${env:DL_TEST_UNSET})");
    fails_with("[kafka.consumer]\nsasl.password = x${env:DL_TEST_UNSET}\n",
               ":2: [kafka.consumer] sasl.password: environment variable DL_TEST_UNSET is "
               "not set (${env:DL_TEST_UNSET})");
    fails_with("[http]\ntoken = ${env:DL_TEST_UNSET\n",
               ":2: [http] token: '${env:DL...' has no closing '}'");
}

Test(conf, unreadable_file_refused_with_path_and_errno)
{
    dl_err err = {0};
    char want[256];
    snprintf(want, sizeof(want), "%s:2: [redis] password: ${file:/nonexistent/pw}: No such "
             "file or directory", path);
    cr_assert_eq(load("[redis]\npassword = ${file:/nonexistent/pw}\n", &err), DL_ERR_IO);
    cr_expect_str_eq(err.msg, want);
    fails_with("[redis]\npassword = ${file:/}\n",
               ":2: [redis] password: ${file:/}: not a regular file");
    fails_with("[redis]\npassword = ${file:/dev/null}\n",
               ":2: [redis] password: ${file:/dev/null}: not a regular file");
    char two[80];
    fx_tmpfile(two, sizeof(two), "two");
    fx_write_text(two, "line1\nline2\n");
    char text[256];
    snprintf(text, sizeof(text), "[redis]\npassword = ${file:%s}\n", two);
    snprintf(want, sizeof(want), ":2: [redis] password: ${file:%s}: the file holds more "
             "than one line (or a NUL byte)", two);
    fails_with(text, want);
    unlink(two);
    setenv("DL_TEST_LINES", "a\nb", 1);
    fails_with("[http]\ntoken = ${env:DL_TEST_LINES}\n",
               ":2: [http] token: ${env:DL_TEST_LINES}: the value holds a line break");
}

Test(conf, secret_keys)
{
    static const char *const secret[] = {"token", "password", "sasl.password",
                                         "ssl.key.password", "ssl.key.pem",
                                         "ssl.keystore.password", "sasl.jaas.config",
                                         "sasl.oauthbearer.client.secret", "Client_Secret",
                                         "sasl.oauthbearer.token.endpoint.url", NULL};
    static const char *const plain[] = {"sasl.username", "security.protocol",
                                        "ssl.ca.location", "ssl.certificate.location",
                                        "sasl.mechanisms", "host", "tls_key", NULL};
    for (int i = 0; secret[i]; i++)
        cr_expect(dl_conf_secret_key(secret[i]), "%s", secret[i]);
    for (int i = 0; plain[i]; i++)
        cr_expect_not(dl_conf_secret_key(plain[i]), "%s", plain[i]);
}

/* ---- printouts ------------------------------------------------------------ */

Test(conf, printout_redacts_secrets)
{
    loads("[http]\ntoken = tok-SECRET\n[redis]\nhost = h\npassword = pw-SECRET\n"
          "[kafka.client]\nsecurity.protocol = sasl_ssl\nsasl.username = alice\n"
          "sasl.password = sasl-SECRET\n[kafka.producer]\nlinger.ms = 7\n");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    dl_serve_conf_print(&conf, f);
    fclose(f);
    cr_expect_null(strstr(text, "SECRET"), "%s", text);
    cr_expect_not_null(strstr(text, "\ntoken = ***\n"), "%s", text);
    cr_expect_not_null(strstr(text, "\npassword = ***\n"), "%s", text);
    cr_expect_not_null(strstr(text, "\n[kafka.client]\nsecurity.protocol = sasl_ssl\n"
                                    "sasl.username = alice\nsasl.password = ***\n"), "%s", text);
    cr_expect_not_null(strstr(text, "\n[kafka.producer]\nlinger.ms = 7\n"), "%s", text);
    free(text);
}


Test(conf, print_round_trip)
{
    dl_err err = {0};
    static const char *const sets[][3] = {
        {"http", "address", "0.0.0.0"}, {"http", "port", "0"},
        {"http", "tls_cert", "/etc/c.pem"},
        {"http", "tls_key", "/etc/k.pem"}, {"batching", "max_batch_size", "65536"},
        {"models", "watch", "false"}, {"models", "policy", "latest:2"},
        {"models", "threads", "3"}, {"log", "debug", "http,batch"},
    };
    for (size_t i = 0; i < sizeof(sets) / sizeof(*sets); i++)
        cr_assert_eq(dl_conf_set(dl_serve_opts, &conf, sets[i][0], sets[i][1], sets[i][2],
                                 "test", &err), DL_OK, "%s", err.msg);
    dl_serve_conf want = conf;

    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    dl_conf_print(dl_serve_opts, &want, f);
    fclose(f);
    dl_serve_conf got;
    cr_assert_eq(dl_serve_conf_load(&got, path, &err), DL_OK, "%s", err.msg);
    expect_same(&want, &got);
}

Test(conf, print_round_trip_of_the_longest_lines)
{
    /* "brokers=" and 190 characters: 198, the most a line holds. */
    char text[512];
    snprintf(text, sizeof(text), "[kafka]\nbrokers=%0190d\n", 7);
    loads(text);
    dl_serve_conf want = conf;
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    dl_conf_print(dl_serve_opts, &want, f);
    fclose(f);
    dl_serve_conf got;
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_load(&got, path, &err), DL_OK, "%s", err.msg);
    cr_expect_str_eq(got.kafka.brokers, want.kafka.brokers);
    expect_same(&want, &got);
}

Test(conf, markdown_has_every_key)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    dl_conf_print_markdown(dl_serve_opts, f);
    fclose(f);
    cr_expect_eq(strncmp(text, "| section | key | default | range | meaning |\n", 46), 0);
    for (const dl_opt *o = dl_serve_opts; o->key; o++) {
        char row[128];
        snprintf(row, sizeof(row), "\n| %s | %s | ", o->section, o->key);
        cr_expect_not_null(strstr(text, row), "no row for [%s] %s", o->section, o->key);
    }
    cr_expect_not_null(strstr(text, "| 0..65535 |"));
    free(text);
}

Test(conf, shipped_file_is_the_defaults)
{
    const char *file = fx_source_path("conf/dlserve.conf");
    dl_err err = {0};
    cr_assert_eq(dl_serve_conf_load(&conf, file, &err), DL_OK, "%s", err.msg);
    expect_defaults(&conf);

    /* and it lists every option */
    char *text = fx_read(file, NULL);
    for (const dl_opt *o = dl_serve_opts; o->key; o++) {
        char line[128];
        snprintf(line, sizeof(line), "\n%s =", o->key);
        cr_expect_not_null(strstr(text, line), "%s is missing", o->key);
    }
    free(text);
}

/* ---- cross-field checks --------------------------------------------------- */

Test(conf, tls_both_or_neither)
{
    refused("[http]\ntls_cert = /etc/c.pem\n", "tls_key is empty");
    refused("[http]\ntls_key = /etc/k.pem\n", "tls_cert is empty");
    loads("[http]\ntls_cert = /etc/c.pem\ntls_key = /etc/k.pem\n");
    cr_expect_str_eq(conf.http.tls_key, "/etc/k.pem");
}

Test(conf, policy_syntax)
{
    static const char *const good[] = {"latest", "latest:1", "latest:12", "versions:1",
                                       "versions:1,3,10"};
    static const char *const bad[] = {"", "newest", "latest:", "latest:0", "latest:x",
                                      "latest:1,2", "versions:", "versions:0",
                                      "versions:1,", "versions:1,,2", "versions:1 ,2"};
    char text[256];
    for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
        snprintf(text, sizeof(text), "[models]\npolicy = %s\n", good[i]);
        loads(text);
        cr_expect_str_eq(conf.models.policy, good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        snprintf(text, sizeof(text), "[models]\npolicy = %s\n", bad[i]);
        refused(text, "[models] policy");
    }
}

Test(conf, level_and_device)
{
    refused("[log]\nlevel = loud\n", "[log] level 'loud'");
    refused("[models]\ndevice = gpu\n", "[models] device 'gpu'");
    refused("[models]\ndevice = cuda:\n", "[models] device");
    loads("[log]\nlevel = debug\n[models]\ndevice = cuda\n");
    cr_expect_eq(conf.log.level, DL_LOG_DEBUG);
}

/* ---- enumerations: parsed once by the table, errors list the words ---------- */

Test(conf, enums_refused_with_file_line_and_words)
{
    fails_with("[log]\nlevel = loud\n",
               ":2: [log] level 'loud' is invalid: expected err, warning, notice, info or debug");
    fails_with("[kafka]\n\ndelivery = twice\n",
               ":3: [kafka] delivery 'twice' is invalid: expected at-least-once, "
               "exactly-once or redis");
    fails_with("[models]\ndevice = cuda:x\n",
               ":2: [models] device 'cuda:x' is invalid: expected cpu, cuda or cuda:N");
}

Test(conf, delivery_is_an_enum)
{
    cr_expect_eq(conf.kafka.delivery, DL_DELIVERY_AT_LEAST_ONCE);
    loads("[kafka]\ndelivery = exactly-once\n");
    cr_expect_eq(conf.kafka.delivery, DL_DELIVERY_EXACTLY_ONCE);
    cr_expect_str_eq(dl_delivery_name(conf.kafka.delivery), "exactly-once");
    loads("[kafka]\ndelivery = redis\n[redis]\nhost = localhost\n");
    cr_expect_eq(conf.kafka.delivery, DL_DELIVERY_REDIS);
    refused("[kafka]\ndelivery = redis\n", "delivery = redis needs [redis] host");
}

Test(conf, output_format_is_an_enum)
{
    cr_expect_eq(conf.kafka.output_format, DL_OUTPUT_DLSERVE);
    loads("[kafka]\noutput_format = oip-binary\n");
    cr_expect_eq(conf.kafka.output_format, DL_OUTPUT_OIP_BINARY);
    loads("[kafka]\noutput_format = oip-json\n");
    cr_expect_eq(conf.kafka.output_format, DL_OUTPUT_OIP_JSON);
    fails_with("[kafka]\noutput_format = oip\n",
               ":2: [kafka] output_format 'oip' is invalid: expected dlserve, oip-json or "
               "oip-binary");
}

Test(conf, device_kind_and_index)
{
    cr_expect_eq(conf.models.device.kind, DL_DEVICE_CPU);
    cr_expect_eq(conf.models.device.index, -1);
    loads("[models]\ndevice = cuda\n");
    cr_expect_eq(conf.models.device.kind, DL_DEVICE_CUDA);
    cr_expect_eq(conf.models.device.index, -1);
    loads("[models]\ndevice = cuda:3\n");
    cr_expect_eq(conf.models.device.kind, DL_DEVICE_CUDA);
    cr_expect_eq(conf.models.device.index, 3);
    cr_expect_str_eq(conf.models.device.name, "cuda:3");
    static const char *const bad[] = {"cpu:0", "cuda:1024", "cuda:-1", "Cuda", "cuda0", ""};
    char text[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        snprintf(text, sizeof(text), "[models]\ndevice = %s\n", bad[i]);
        refused(text, "expected cpu, cuda or cuda:N");
    }
}

Test(conf, debug_list_checked)
{
    loads("[log]\ndebug = kafka, http\n");
    cr_expect_str_eq(conf.log.debug, "kafka, http");
    refused("[log]\ndebug = kafka,,http\n", "[log] debug 'kafka,,http' is invalid");
    refused("[log]\ndebug = Kafka\n", "[log] debug 'Kafka' is invalid");
}

Test(conf, printout_names_the_words)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    dl_conf_print(dl_serve_opts, &conf, f);
    fclose(f);
    cr_expect_not_null(strstr(text, "(err, warning, notice, info or debug)\nlevel = info\n"),
                       "%s", text);
    cr_expect_not_null(strstr(text, "(at-least-once, exactly-once or redis)\n"
                                    "delivery = at-least-once\n"), "%s", text);
    cr_expect_not_null(strstr(text, "(cpu, cuda or cuda:N)\ndevice = cpu\n"), "%s", text);
    free(text);
}
