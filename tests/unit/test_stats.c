/* test_stats.c: the serving daemon's counters and histograms: totals over
 * threads, cumulative buckets, label escaping, JSON, and promtool's check. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "serve/serve.h"

#define PROMTOOL "/usr/bin/promtool"

static stats *st;

static void setup(void)
{
    dl_err err = {0};
    cr_assert_eq(stats_new(&st, &err), DL_OK, "%s", err.msg);
    cr_assert_not_null(st);
}

static void teardown(void)
{
    stats_free(st);
    st = NULL;
}

TestSuite(stats, .init = setup, .fini = teardown, .timeout = 60);

/* The value of the sample whose name and labels are exactly `series`
 * (e.g. "x{model=\"m\"}"); NAN when there is no such line. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return NAN;
}

static char *prom(void)
{
    char *text = stats_prometheus(st, NULL);
    cr_assert_not_null(text);
    return text;
}

/* ---- threads ------------------------------------------------------------ */

#define NTHREADS 4
#define NREQ     1000

static void *worker(void *arg)
{
    long id = (long)arg;
    const char *model = id % 2 ? "odd" : "even";
    for (int i = 0; i < NREQ; i++) {
        bool ok = i % 10 != 0;             /* 900 ok, 100 failed per thread */
        stats_request(st, model, 1 + i % 2, ok, 3, 10.0, 20.0, 50.0);
        if (i % 4 == 0)
            stats_batch(st, model, 1 + i % 2, 8);
        stats_http(st, "POST", "infer", ok ? 200 : 503);
    }
    return NULL;
}

Test(stats, counts_add_up_over_threads)
{
    pthread_t th[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);

    json_t *j = stats_json(st);
    cr_assert_not_null(j);
    cr_expect_eq(json_integer_value(json_object_get(j, "requests_success")), NTHREADS * 900);
    cr_expect_eq(json_integer_value(json_object_get(j, "requests_failure")), NTHREADS * 100);
    cr_expect_eq(json_integer_value(json_object_get(j, "inferences")), NTHREADS * 900 * 3);
    cr_expect_eq(json_integer_value(json_object_get(j, "executions")), NTHREADS * 250);
    json_t *http = json_object_get(j, "http");
    cr_expect_eq(json_integer_value(json_object_get(http, "200")), NTHREADS * 900);
    cr_expect_eq(json_integer_value(json_object_get(http, "503")), NTHREADS * 100);
    cr_expect_eq(json_object_size(http), 2);

    /* even: threads 0 and 2; version 1 got the even i (450 ok, 100 failed). */
    json_t *v1 = json_object_get(json_object_get(json_object_get(j, "models"), "even"), "1");
    cr_assert_not_null(v1, "models.even.1 missing");
    cr_expect_eq(json_integer_value(json_object_get(v1, "success")), 2 * 400);
    cr_expect_eq(json_integer_value(json_object_get(v1, "failure")), 2 * 100);
    cr_expect_eq(json_integer_value(json_object_get(v1, "inferences")), 2 * 400 * 3);
    cr_expect_eq(json_integer_value(json_object_get(v1, "executions")), 2 * 250);
    cr_expect_float_eq(json_real_value(json_object_get(v1, "request_duration_us")),
                       2 * 400 * 50.0, 1e-6);
    cr_expect_float_eq(json_real_value(json_object_get(v1, "queue_duration_us")),
                       2 * 400 * 10.0, 1e-6);
    cr_expect_float_eq(json_real_value(json_object_get(v1, "compute_infer_duration_us")),
                       2 * 400 * 20.0, 1e-6);
    json_decref(j);

    char *text = prom();
    cr_expect_eq(sample(text, "nv_inference_request_success{model=\"odd\",version=\"2\"}"), 2 * 500);
    cr_expect_eq(sample(text, "nv_inference_request_failure{model=\"odd\",version=\"2\"}"), 0);
    cr_expect_eq(sample(text, "nv_inference_count{model=\"odd\",version=\"2\"}"), 2 * 500 * 3);
    cr_expect_eq(sample(text, "nv_inference_exec_count{model=\"odd\",version=\"1\"}"), 2 * 250);
    cr_expect_eq(sample(text, "nv_inference_exec_count{model=\"odd\",version=\"2\"}"), 0);
    cr_expect_eq(sample(text, "nv_inference_request_duration_us{model=\"odd\",version=\"2\"}"),
                 2 * 500 * 50.0);
    cr_expect_eq(sample(text, "nv_inference_queue_duration_us{model=\"odd\",version=\"2\"}"),
                 2 * 500 * 10.0);
    cr_expect_eq(sample(text, "nv_inference_compute_infer_duration_us{model=\"odd\",version=\"2\"}"),
                 2 * 500 * 20.0);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_count{model=\"odd\"}"), 2 * 900);
    cr_expect_eq(sample(text, "dlserve_batch_size_count{model=\"even\"}"), 2 * 250);
    cr_expect_eq(sample(text, "dlserve_batch_size_sum{model=\"even\"}"), 2 * 250 * 8);
    cr_expect_eq(sample(text, "dlserve_http_responses_total{method=\"POST\",handler=\"infer\","
                              "code=\"200\"}"), NTHREADS * 900);
    cr_expect_eq(sample(text, "dlserve_http_responses_total{method=\"POST\",handler=\"infer\","
                              "code=\"503\"}"), NTHREADS * 100);
    free(text);
}

/* ---- histograms ----------------------------------------------------------- */

Test(stats, histogram_buckets_are_cumulative)
{
    /* total_us: 50 -> le 0.0001; 100 -> le 0.0001 (inclusive); 150 ->
     * le 0.00025; 1000 -> le 0.001; 20 s -> +Inf only. */
    const double totals[] = {50, 100, 150, 1000, 1000, 3e5, 2e7};
    const int n = (int)(sizeof(totals) / sizeof(totals[0]));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        stats_request(st, "h", 1, true, 1, 0, 0, totals[i]);
        sum += totals[i] * 1e-6;
    }
    stats_request(st, "h", 1, false, 1, 0, 0, 5);   /* failures stay out */
    const int64_t sizes[] = {1, 2, 3, 64, 65, 1024, 5000};
    for (int i = 0; i < 7; i++)
        stats_batch(st, "h", 1, sizes[i]);

    char *text = prom();
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_bucket{model=\"h\",le=\"0.0001\"}"), 2);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_bucket{model=\"h\",le=\"0.00025\"}"), 3);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_bucket{model=\"h\",le=\"0.001\"}"), 5);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_bucket{model=\"h\",le=\"0.5\"}"), 6);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_bucket{model=\"h\",le=\"10\"}"), 6);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_bucket{model=\"h\",le=\"+Inf\"}"), n);
    cr_expect_eq(sample(text, "dlserve_request_duration_seconds_count{model=\"h\"}"), n);
    cr_expect_float_eq(sample(text, "dlserve_request_duration_seconds_sum{model=\"h\"}"), sum, 1e-9);

    cr_expect_eq(sample(text, "dlserve_batch_size_bucket{model=\"h\",le=\"1\"}"), 1);
    cr_expect_eq(sample(text, "dlserve_batch_size_bucket{model=\"h\",le=\"4\"}"), 3);
    cr_expect_eq(sample(text, "dlserve_batch_size_bucket{model=\"h\",le=\"64\"}"), 4);
    cr_expect_eq(sample(text, "dlserve_batch_size_bucket{model=\"h\",le=\"128\"}"), 5);
    cr_expect_eq(sample(text, "dlserve_batch_size_bucket{model=\"h\",le=\"1024\"}"), 6);
    cr_expect_eq(sample(text, "dlserve_batch_size_bucket{model=\"h\",le=\"+Inf\"}"), 7);
    cr_expect_eq(sample(text, "dlserve_batch_size_count{model=\"h\"}"), 7);

    /* Every bucket line of each histogram: non-decreasing, ending in
     * +Inf == _count. */
    const char *names[] = {"dlserve_request_duration_seconds", "dlserve_batch_size"};
    for (int h = 0; h < 2; h++) {
        char prefix[96];
        snprintf(prefix, sizeof(prefix), "%s_bucket{model=\"h\",le=\"", names[h]);
        double prev = -1;
        int nb = 0;
        bool saw_inf = false;
        for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
            const char *v = strchr(p, ' ');
            double x = strtod(v + 1, NULL);
            cr_expect_geq(x, prev, "%s: bucket %d decreases", names[h], nb);
            prev = x;
            nb++;
            saw_inf = strncmp(p + strlen(prefix), "+Inf\"", 5) == 0;
        }
        cr_expect(saw_inf, "%s: last bucket is not +Inf", names[h]);
        cr_expect_geq(nb, 11, "%s: %d buckets", names[h], nb);
        char count[96];
        snprintf(count, sizeof(count), "%s_count{model=\"h\"}", names[h]);
        cr_expect_eq(prev, sample(text, count));
    }
    free(text);
}

Test(stats, compute_input_and_output_durations)
{
    req_times ok = {.queue_us = 10, .input_us = 2, .infer_us = 30, .output_us = 4,
                    .total_us = 50};
    req_times bad = {.input_us = 100, .output_us = 100, .total_us = 7};
    stats_request_times(st, "m", 1, true, 3, &ok);
    stats_request_times(st, "m", 1, true, 3, &ok);
    stats_request_times(st, "m", 1, false, 3, &bad);   /* failures add no compute time */
    char *text = prom();
    cr_expect_eq(sample(text, "nv_inference_compute_input_duration_us{model=\"m\",version=\"1\"}"), 4);
    cr_expect_eq(sample(text, "nv_inference_compute_output_duration_us{model=\"m\",version=\"1\"}"), 8);
    cr_expect_eq(sample(text, "nv_inference_compute_infer_duration_us{model=\"m\",version=\"1\"}"), 60);
    free(text);
}

Test(stats, http_responses_by_method_handler_and_code)
{
    stats_http(st, "GET", "health_ready", 503);
    stats_http(st, "GET", "health_ready", 503);
    stats_http(st, "POST", "infer", 200);
    stats_http(st, "GET", "infer", 405);
    stats_http(st, "GET", "metrics", 99);   /* not a status code: not counted */
    char *text = prom();
    cr_expect_eq(sample(text, "dlserve_http_responses_total{method=\"GET\",handler=\"health_ready\","
                              "code=\"503\"}"), 2);
    cr_expect_eq(sample(text, "dlserve_http_responses_total{method=\"POST\",handler=\"infer\","
                              "code=\"200\"}"), 1);
    cr_expect_eq(sample(text, "dlserve_http_responses_total{method=\"GET\",handler=\"infer\","
                              "code=\"405\"}"), 1);
    cr_expect_null(strstr(text, "code=\"99\""));
    free(text);
    json_t *j = stats_json(st);   /* /status still counts by code */
    json_t *http = json_object_get(j, "http");
    cr_expect_eq(json_integer_value(json_object_get(http, "503")), 2);
    cr_expect_eq(json_integer_value(json_object_get(http, "200")), 1);
    json_decref(j);
}

Test(stats, bad_durations_do_not_poison_sums)
{
    stats_request(st, "m", 1, true, 1, NAN, -5, INFINITY);
    stats_request(st, "m", 1, true, 1, 1, 2, 3);
    char *text = prom();
    cr_expect_eq(sample(text, "nv_inference_queue_duration_us{model=\"m\",version=\"1\"}"), 1);
    cr_expect_eq(sample(text, "nv_inference_compute_infer_duration_us{model=\"m\",version=\"1\"}"), 2);
    cr_expect_eq(sample(text, "nv_inference_request_duration_us{model=\"m\",version=\"1\"}"), 3);
    free(text);
}

Test(stats, cardinality_is_capped)
{
    /* More distinct names than the cap (4096 series): the rest are counted
     * under model="_other", and no request is lost. */
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "m%05d", i);
        stats_request(st, name, 1, true, 1, 1, 1, 1);
    }
    json_t *j = stats_json(st);
    cr_assert_not_null(j);
    cr_expect_eq(json_integer_value(json_object_get(j, "requests_success")), 5000);
    json_t *models = json_object_get(j, "models");
    cr_expect_leq(json_object_size(models), 4097);
    json_t *other = json_object_get(json_object_get(models, "_other"), "0");
    cr_assert_not_null(other, "no _other series");
    cr_expect_eq(json_integer_value(json_object_get(other, "success")), 5000 - 4096);
    json_decref(j);
}

/* ---- labels ----------------------------------------------------------------- */

Test(stats, label_values_are_escaped)
{
    stats_request(st, "a\"b\\c\nd", 7, true, 1, 1, 1, 1);
    stats_batch(st, "a\"b\\c\nd", 7, 1);
    char *text = prom();
    cr_expect_eq(sample(text, "nv_inference_request_success{model=\"a\\\"b\\\\c\\nd\",version=\"7\"}"), 1,
                 "text was:\n%s", text);
    cr_expect_eq(sample(text, "dlserve_batch_size_count{model=\"a\\\"b\\\\c\\nd\"}"), 1);
    /* No raw newline inside any label: every line starts with '#' or a name. */
    for (const char *p = text; *p; p = strchr(p, '\n') + 1) {
        cr_expect(*p == '#' || (*p >= 'a' && *p <= 'z'), "stray line: %.40s", p);
        if (!strchr(p, '\n'))
            break;
    }
    free(text);

    json_t *j = stats_json(st);
    cr_assert_not_null(j);
    cr_expect_not_null(json_object_get(json_object_get(json_object_get(j, "models"), "a\"b\\c\nd"), "7"));
    json_decref(j);
}

Test(stats, invalid_utf8_is_replaced)
{
    stats_request(st, "bad\xff" "name\xc3", 1, true, 1, 1, 1, 1);
    stats_request(st, "caf\xc3\xa9", 1, true, 1, 1, 1, 1);
    char *text = prom();
    cr_expect_eq(sample(text, "nv_inference_request_success{model=\"bad\xef\xbf\xbdname\xef\xbf\xbd\",version=\"1\"}"), 1,
                 "text was:\n%s", text);
    cr_expect_eq(sample(text, "nv_inference_request_success{model=\"caf\xc3\xa9\",version=\"1\"}"), 1);
    free(text);
    json_t *j = stats_json(st);
    cr_assert_not_null(j, "stats_json refused a non-UTF-8 model name");
    cr_expect_not_null(json_object_get(json_object_get(j, "models"), "bad\xef\xbf\xbdname\xef\xbf\xbd"));
    json_decref(j);
}

/* ---- families and process metrics ------------------------------------------ */

Test(stats, families_have_help_and_type)
{
    stats_request(st, "m", 1, true, 1, 1, 1, 1);
    char *text = prom();
    const char *fams[] = {
        "nv_inference_request_success", "nv_inference_request_failure",
        "nv_inference_count", "nv_inference_exec_count",
        "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us", "nv_inference_compute_input_duration_us",
        "nv_inference_compute_output_duration_us",
        "dlserve_request_duration_seconds", "dlserve_batch_size",
        "dlserve_http_responses_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_cpu_seconds_total",
        "process_start_time_seconds", "process_open_fds",
    };
    for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
        char help[128], type[128];
        snprintf(help, sizeof(help), "# HELP %s ", fams[i]);
        snprintf(type, sizeof(type), "# TYPE %s ", fams[i]);
        cr_expect_not_null(strstr(text, help), "no HELP for %s", fams[i]);
        cr_expect_not_null(strstr(text, type), "no TYPE for %s", fams[i]);
    }
    cr_expect_not_null(strstr(text, "# TYPE nv_inference_request_success counter\n"));
    cr_expect_not_null(strstr(text, "# TYPE nv_inference_queue_duration_us counter\n"));
    cr_expect_not_null(strstr(text, "# TYPE dlserve_batch_size histogram\n"));

    cr_expect_gt(sample(text, "process_resident_memory_bytes"), 0);
    cr_expect_geq(sample(text, "process_virtual_memory_bytes"),
                  sample(text, "process_resident_memory_bytes"));
    cr_expect_geq(sample(text, "process_open_fds"), 3);
    cr_expect_geq(sample(text, "process_cpu_seconds_total"), 0);
    double start = sample(text, "process_start_time_seconds");
    double now = (double)time(NULL);
    cr_expect(start > now - 3600 && start <= now + 1, "start %f, now %f", start, now);
    free(text);
}

Test(stats, extra_is_appended)
{
    char *text = stats_prometheus(st, "# HELP x_total y\n# TYPE x_total counter\nx_total 4\n");
    cr_assert_not_null(text);
    size_t n = strlen(text);
    cr_expect(n > 20 && strcmp(text + n - 10, "x_total 4\n") == 0);
    free(text);
    stats_free(NULL);
}

/* ---- promtool ------------------------------------------------------------------ */

/* Runs `promtool check metrics` on text; returns its exit status and
 * leaves what it printed in *out (new). */
static int promtool(const char *text, char **out)
{
    char in[64], res[64];
    fx_tmpfile(in, sizeof(in), "stats_in");
    fx_tmpfile(res, sizeof(res), "stats_out");
    fx_write_text(in, text);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), PROMTOOL " check metrics < %s > %s 2>&1", in, res);
    int rc = system(cmd);
    *out = fx_read(res, NULL);
    unlink(in);
    unlink(res);
    cr_assert(WIFEXITED(rc), "promtool did not exit");
    return WEXITSTATUS(rc);
}

/* A promtool finding that the Triton names are known to cause (see
 * stats.c): nothing else is tolerated. */
static bool triton_lint(const char *line)
{
    if (strncmp(line, "nv_inference_", 13) != 0)
        return false;
    return strstr(line, " counter metrics should have \"_total\" suffix")
        || strstr(line, "_duration_us metric names should not contain abbreviated units")
        || strstr(line, "_count non-histogram and non-summary metrics should not have \"_count\" suffix");
}

/* The text without the lines of nv_inference_* families (new). */
static char *without_triton(const char *text)
{
    char *out = malloc(strlen(text) + 1);
    cr_assert_not_null(out);
    char *w = out;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p + 1) : strlen(p);
        bool triton = strncmp(p, "nv_inference_", 13) == 0
                   || strncmp(p, "# HELP nv_inference_", 20) == 0
                   || strncmp(p, "# TYPE nv_inference_", 20) == 0;
        if (!triton) {
            memcpy(w, p, n);
            w += n;
        }
        p += n;
    }
    *w = '\0';
    return out;
}

static void check_with_promtool(void)
{
    char *text = prom();
    char *out = NULL;
    int rc = promtool(text, &out);
    /* 0: clean; 3: parsed, with lint findings; 1: does not parse. */
    cr_expect(rc == 0 || rc == 3, "promtool exit %d:\n%s\ntext:\n%s", rc, out, text);
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        cr_expect(triton_lint(l), "unexpected promtool finding: %s", l);
    free(out);

    char *rest = without_triton(text);
    rc = promtool(rest, &out);
    cr_expect_eq(rc, 0, "promtool exit %d on the non-Triton families:\n%s\ntext:\n%s",
                 rc, out, rest);
    free(out);
    free(rest);
    free(text);
}

Test(stats, passes_promtool)
{
    if (access(PROMTOOL, X_OK) != 0)
        cr_skip_test("promtool not installed (Debian: prometheus)");
    check_with_promtool();          /* empty: families without samples */

    stats_request(st, "m", 1, true, 4, 10, 20, 40);
    stats_request(st, "m", 2, false, 1, 0, 0, 0);
    stats_request(st, "q\"u\\o\nte", 1, true, 1, 1, 1, 1);
    stats_request(st, "bad\xff", 1, true, 1, 1, 1, 1);
    stats_batch(st, "m", 1, 4);
    stats_http(st, "GET", "metrics", 200);
    stats_http(st, "POST", "unknown", 404);
    check_with_promtool();
}

/* ---- Triton's statistics extension ---------------------------------------- */

static json_int_t dur(json_t *o, const char *key, const char *field)
{
    return json_integer_value(json_object_get(json_object_get(o, key), field));
}

Test(stats, model_stats_in_tritons_form)
{
    req_times ok = {.queue_us = 10, .input_us = 2, .infer_us = 30, .output_us = 4,
                    .total_us = 50};
    req_times bad = {.total_us = 7};
    stats_request_times(st, "m", 1, true, 3, &ok);
    stats_request_times(st, "m", 1, true, 2, &ok);
    stats_request_times(st, "m", 1, false, 1, &bad);
    stats_batch_times(st, "m", 1, 5, 2, 30, 1);
    stats_batch_times(st, "m", 1, 1, 1, 10, 1);
    stats_batch_times(st, "m", 1, 5, 2, 30, 1);
    stats_request_times(st, "m", 2, true, 1, &ok);
    stats_request_times(st, "other", 1, true, 1, &ok);
    stats_timeout(st, "m", 1);

    json_t *all = stats_model_stats(st, "m", 0);
    cr_assert_eq(json_array_size(all), 2);
    json_t *v1 = json_array_get(all, 0);
    cr_expect_str_eq(json_string_value(json_object_get(v1, "name")), "m");
    cr_expect_str_eq(json_string_value(json_object_get(v1, "version")), "1");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(all, 1), "version")), "2");
    cr_expect_eq(json_integer_value(json_object_get(v1, "inference_count")), 5);
    cr_expect_eq(json_integer_value(json_object_get(v1, "execution_count")), 3);
    cr_expect_gt(json_integer_value(json_object_get(v1, "last_inference")), 1700000000000LL);
    json_t *is = json_object_get(v1, "inference_stats");
    cr_expect_eq(dur(is, "success", "count"), 2);
    cr_expect_eq(dur(is, "success", "ns"), 100000);
    cr_expect_eq(dur(is, "fail", "count"), 1);
    cr_expect_eq(dur(is, "fail", "ns"), 7000);
    cr_expect_eq(dur(is, "queue", "ns"), 20000);
    cr_expect_eq(dur(is, "compute_input", "ns"), 4000);
    cr_expect_eq(dur(is, "compute_infer", "ns"), 60000);
    cr_expect_eq(dur(is, "compute_output", "ns"), 8000);
    json_t *bs = json_object_get(v1, "batch_stats");
    cr_assert_eq(json_array_size(bs), 2);   /* sizes 1 and 5, ascending */
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(bs, 0), "batch_size")), 1);
    json_t *b5 = json_array_get(bs, 1);
    cr_expect_eq(json_integer_value(json_object_get(b5, "batch_size")), 5);
    cr_expect_eq(dur(b5, "compute_infer", "count"), 2);
    cr_expect_eq(dur(b5, "compute_infer", "ns"), 60000);
    json_decref(all);

    json_t *one = stats_model_stats(st, "m", 2);
    cr_expect_eq(json_array_size(one), 1);
    json_decref(one);
    json_t *none = stats_model_stats(st, "m", 3);
    cr_expect_eq(json_array_size(none), 0);
    json_decref(none);
    none = stats_model_stats(st, "nosuch", 0);
    cr_expect_eq(json_array_size(none), 0);
    json_decref(none);

    char *text = stats_prometheus(st, NULL);
    cr_assert_not_null(text);
    cr_expect_eq(sample(text, "dlserve_request_timeouts_total{model=\"m\",version=\"1\"}"), 1);
    cr_expect_eq(sample(text, "dlserve_request_timeouts_total{model=\"m\",version=\"2\"}"), 0);
    free(text);
}

/* Triton's cache statistics: a hit is a success (its total) and a
 * cache_hit (its lookup), not an inference nor queue or compute time; a
 * miss adds its lookup and insertion to cache_miss. */
Test(stats, cache_hits_and_misses)
{
    req_times miss = {.queue_us = 10, .input_us = 2, .infer_us = 30, .output_us = 4,
                      .total_us = 50, .cache_miss = true, .cache_us = 3};
    req_times hit = {.output_us = 1, .total_us = 5, .cache_hit = true, .cache_us = 2};
    stats_request_times(st, "m", 1, true, 4, &miss);
    stats_request_times(st, "m", 1, true, 4, &hit);
    stats_request_times(st, "m", 1, true, 4, &hit);
    stats_request_times(st, "plain", 1, true, 4, &(req_times){.total_us = 9});

    json_t *all = stats_model_stats(st, "m", 0);
    cr_assert_eq(json_array_size(all), 1);
    json_t *v1 = json_array_get(all, 0);
    cr_expect_eq(json_integer_value(json_object_get(v1, "inference_count")), 4);
    json_t *is = json_object_get(v1, "inference_stats");
    cr_expect_eq(dur(is, "success", "count"), 3);
    cr_expect_eq(dur(is, "success", "ns"), 60000);
    cr_expect_eq(dur(is, "cache_hit", "count"), 2);
    cr_expect_eq(dur(is, "cache_hit", "ns"), 4000);
    cr_expect_eq(dur(is, "cache_miss", "count"), 1);
    cr_expect_eq(dur(is, "cache_miss", "ns"), 3000);
    cr_expect_eq(dur(is, "queue", "count"), 1);
    cr_expect_eq(dur(is, "queue", "ns"), 10000);
    cr_expect_eq(dur(is, "compute_infer", "count"), 1);
    cr_expect_eq(dur(is, "compute_output", "ns"), 4000);
    json_decref(all);

    char *text = stats_prometheus(st, NULL);
    cr_assert_not_null(text);
    cr_expect_eq(sample(text, "dlserve_cache_hits_total{model=\"m\",version=\"1\"}"), 2);
    cr_expect_eq(sample(text, "dlserve_cache_misses_total{model=\"m\",version=\"1\"}"), 1);
    cr_expect_eq(sample(text, "nv_inference_request_success{model=\"m\",version=\"1\"}"), 3);
    cr_expect_eq(sample(text, "nv_inference_count{model=\"m\",version=\"1\"}"), 4);
    cr_expect_null(strstr(text, "dlserve_cache_hits_total{model=\"plain\""),
                   "a model that never looked the cache up has no cache series");
    free(text);
}
