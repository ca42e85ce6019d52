/* test_tracer.c: span sampling and Triton's trace settings (serve/tracer.c):
 * every 1/rate-th request traced, a model's settings over the global ones,
 * trace_count, refused settings that change nothing, the bounded queue
 * and the OTLP JSON of a traced request; and the routes of the trace
 * extension (serve/oip/oip_route.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/oip/oip.h"
#include "serve/tracer.h"

static dl_trace_conf conf = {.level = DL_TRACE_LEVEL_TIMESTAMPS, .rate = 1.0, .queue_size = 16,
                             .flush_ms = 1000};

static tracer *fresh(void)
{
    tracer *tr;
    cr_assert_eq(tracer_new(&conf, &tr, NULL), DL_OK);
    tracer_set_exporting(tr, true);
    return tr;
}

/* Records n requests of model; returns how many were queued. */
static size_t record(tracer *tr, const char *model, int n)
{
    size_t before = tracer_wait(tr, 0, 0);
    for (int i = 0; i < n; i++) {
        trace_done d = {.model = model, .version = 1, .http_status = 200, .ok = true};
        tracer_record(tr, &d);
    }
    return tracer_wait(tr, 0, 0) - before;
}

static dl_status post(tracer *tr, const char *model, const char *body)
{
    dl_err err = {0};
    return tracer_update(tr, model, body, strlen(body), &err);
}

/* A setting as text (the first of a list), in a buffer the next call reuses. */
static const char *setting_of(tracer *tr, const char *model, const char *key)
{
    static char buf[64];
    json_t *j = tracer_setting(tr, model);
    json_t *v = json_object_get(j, key);
    snprintf(buf, sizeof(buf), "%s",
             json_string_value(json_is_array(v) ? json_array_get(v, 0) : v));
    json_decref(j);
    return buf;
}

Test(tracer, rate_traces_every_nth_request)
{
    tracer *tr = fresh();
    cr_expect_eq(record(tr, "m", 3), 3);
    cr_expect_eq(post(tr, NULL, "{\"trace_rate\":\"4\"}"), DL_OK);
    cr_expect_eq(record(tr, "m", 8), 2);
    cr_expect_str_eq(setting_of(tr, NULL, "trace_rate"), "4");
    cr_expect_eq(post(tr, NULL, "{\"trace_rate\":\"0\"}"), DL_OK);
    cr_expect_eq(record(tr, "m", 5), 0);
    tracer_free(tr);
}

Test(tracer, nothing_without_an_exporter)
{
    tracer *tr = fresh();
    tracer_set_exporting(tr, false);
    cr_expect_eq(record(tr, "m", 3), 0);
    tracer_free(tr);
}

Test(tracer, model_settings_override_and_reset)
{
    tracer *tr = fresh();
    cr_expect_eq(post(tr, "a", "{\"trace_level\":[\"OFF\"]}"), DL_OK);
    cr_expect_eq(record(tr, "a", 2), 0);
    cr_expect_eq(record(tr, "b", 2), 2);
    cr_expect_str_eq(setting_of(tr, "a", "trace_level"), "OFF");
    cr_expect_str_eq(setting_of(tr, NULL, "trace_level"), "TIMESTAMPS");
    cr_expect_eq(post(tr, "a", "{\"trace_level\":null}"), DL_OK);
    cr_expect_eq(record(tr, "a", 2), 2);
    tracer_free(tr);
}

Test(tracer, count_runs_out)
{
    tracer *tr = fresh();
    cr_expect_eq(post(tr, NULL, "{\"trace_count\":\"2\"}"), DL_OK);
    cr_expect_eq(record(tr, "m", 5), 2);
    cr_expect_str_eq(setting_of(tr, NULL, "trace_count"), "0");
    tracer_free(tr);
}

Test(tracer, refused_settings_change_nothing)
{
    tracer *tr = fresh();
    const char *bad[] = {"{\"trace_level\":[\"TENSORS\"]}", "{\"trace_file\":\"x\"}",
                         "{\"trace_rate\":\"3\",\"nosuch\":1}", "{\"trace_rate\":\"1.5\"}",
                         "{\"trace_count\":\"-3\"}", "{\"trace_level\":null}", "[]", "{"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(post(tr, NULL, bad[i]), DL_ERR_INVALID, "%s", bad[i]);
    cr_expect_str_eq(setting_of(tr, NULL, "trace_rate"), "1");
    cr_expect_eq(post(tr, NULL, "{\"trace_rate\":\"0.5\",\"log_frequency\":\"7\"}"), DL_OK);
    cr_expect_str_eq(setting_of(tr, NULL, "trace_rate"), "2");
    cr_expect_str_eq(setting_of(tr, NULL, "log_frequency"), "7");
    tracer_free(tr);
}

Test(tracer, full_queue_drops_and_counts)
{
    tracer *tr = fresh();
    cr_expect_eq(record(tr, "m", 20), 16);
    json_t *st = tracer_status(tr);
    cr_expect_eq(json_integer_value(json_object_get(st, "dropped")), 4);
    json_decref(st);
    tracer_free(tr);
}

Test(tracer, otlp_json_of_a_traced_request)
{
    tracer *tr = fresh();
    trace_ctx t;
    cr_assert(trace_set(&t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        (size_t)-1, NULL, 0));
    double now = dl_time_now();
    infer_req q = {.t_arrival = now - 0.003, .t_start = now - 0.002, .t_end = now - 0.001};
    trace_done d = {.ctx = &t, .q = &q, .t_received = now - 0.004, .model = "m",
                    .version = 3, .http_status = 200, .ok = true};
    tracer_record(tr, &d);
    size_t n;
    char *body = tracer_take(tr, 10, &n);
    cr_assert_not_null(body);
    cr_expect_eq(n, 1);
    json_t *j = json_loads(body, 0, NULL);
    json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
    json_t *spans = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0),
                                    "spans");
    cr_assert_eq(json_array_size(spans), 4);
    json_t *root = json_array_get(spans, 0);
    cr_expect_str_eq(json_string_value(json_object_get(root, "traceId")),
                     "4bf92f3577b34da6a3ce929d0e0e4736");
    cr_expect_str_eq(json_string_value(json_object_get(root, "parentSpanId")),
                     "00f067aa0ba902b7");
    const char *id = json_string_value(json_object_get(root, "spanId"));
    const char *names[] = {"queue", "compute", "answer"};
    for (size_t i = 1; i < 4; i++) {
        json_t *s = json_array_get(spans, i);
        cr_expect_str_eq(json_string_value(json_object_get(s, "name")), names[i - 1]);
        cr_expect_str_eq(json_string_value(json_object_get(s, "parentSpanId")), id);
    }
    json_decref(j);
    free(body);
    tracer_free(tr);
}

/* The value of attribute key in a span's attributes (NULL: none). */
static json_t *attr_value(json_t *span, const char *key)
{
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(span, "attributes"), i, a) {
        if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0)
            return json_object_get(a, "value");
    }
    return NULL;
}

Test(tracer, otlp_json_of_a_batch)
{
    tracer *tr = fresh();
    double now = dl_time_now();
    infer_req q = {.t_arrival = now - 0.003, .t_start = now - 0.002, .t_end = now - 0.001};
    trace_done kafka = {.q = &q, .t_received = now - 0.004, .model = "say \"hi\"\\\n",
                        .version = 2, .topic = "in", .partition = 1, .offset = 9007199254740993,
                        .ok = false};
    trace_done refused = {.t_received = now - 0.001, .model = "m", .version = 1,
                          .http_status = 503};
    tracer_record(tr, &kafka);
    tracer_record(tr, &refused);
    size_t n;
    char *body = tracer_take(tr, 10, &n);
    cr_assert_not_null(body);
    cr_expect_eq(n, 2);
    json_error_t je;
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, &je);
    cr_assert_not_null(j, "not JSON: %s: %s", je.text, body);
    json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
    json_t *res = json_array_get(json_object_get(json_object_get(rs, "resource"), "attributes"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(res, "key")), "service.name");
    json_t *spans = json_object_get(json_array_get(json_object_get(rs, "scopeSpans"), 0),
                                    "spans");
    cr_assert_eq(json_array_size(spans), 5);   /* the refused request: its own span only */
    json_t *k = json_array_get(spans, 0), *h = json_array_get(spans, 4);
    cr_expect_str_eq(json_string_value(json_object_get(k, "name")), "in process");
    cr_expect_eq(json_integer_value(json_object_get(k, "kind")), 5);
    cr_expect_null(json_object_get(k, "parentSpanId"));   /* no traceparent: a new trace */
    cr_expect_eq(strlen(json_string_value(json_object_get(k, "traceId"))), 32);
    cr_expect_str_eq(json_string_value(json_object_get(attr_value(k, "dlserve.model"),
                                                       "stringValue")), "say \"hi\"\\\n");
    cr_expect_str_eq(json_string_value(json_object_get(attr_value(k, "messaging.kafka.offset"),
                                                       "intValue")), "9007199254740993");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(k, "status"), "code")), 2);
    cr_expect_str_eq(json_string_value(json_object_get(h, "name")),
                     "POST /v2/models/{model}/infer");
    cr_expect_str_eq(json_string_value(json_object_get(
                         attr_value(h, "http.response.status_code"), "intValue")), "503");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(h, "status"), "code")), 2);
    long long t0 = atoll(json_string_value(json_object_get(h, "startTimeUnixNano")));
    long long t1 = atoll(json_string_value(json_object_get(h, "endTimeUnixNano")));
    cr_expect(t0 > 0 && t0 <= t1, "%lld %lld", t0, t1);
    json_decref(j);
    free(body);
    tracer_free(tr);
}

Test(tracer, routes)
{
    oip_route r;
    cr_expect_eq(oip_route_parse("/v2/trace/setting", &r), OIP_ROUTE_TRACE_SETTING);
    cr_expect_str_eq(r.model, "");
    cr_expect_eq(oip_route_parse("/v2/models/m/trace/setting", &r), OIP_ROUTE_TRACE_SETTING);
    cr_expect_str_eq(r.model, "m");
    cr_expect_eq(oip_route_parse("/v2/models/m/versions/2/trace/setting", &r), OIP_ROUTE_NONE);
    cr_expect_eq(oip_route_parse("/v2/trace", &r), OIP_ROUTE_NONE);
    cr_expect(oip_route_method_ok(OIP_ROUTE_TRACE_SETTING, "GET"));
    cr_expect(oip_route_method_ok(OIP_ROUTE_TRACE_SETTING, "POST"));
    cr_expect_not(oip_route_method_ok(OIP_ROUTE_TRACE_SETTING, "PUT"));
    cr_expect_str_eq(oip_route_allow(OIP_ROUTE_TRACE_SETTING), "GET, HEAD, POST");
}
