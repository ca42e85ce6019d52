/* test_history.c: the status page's history (serve/history.c): a snapshot
 * read from /status's JSON and /metrics's text, the ring's bound, and the
 * route GET /status/history (serve/oip/oip_route.c). */
#include <criterion/criterion.h>

#include "serve/history.h"
#include "serve/oip/oip.h"

static const char prom[] =
    "# TYPE process_cpu_seconds_total counter\n"
    "process_cpu_seconds_total 1.5\n"
    "process_resident_memory_bytes 4096\n"
    "dlserve_request_duration_seconds_bucket{model=\"m\",le=\"0.001\"} 2\n"
    "dlserve_request_duration_seconds_bucket{model=\"m\",le=\"+Inf\"} 5\n"
    "dlserve_request_duration_seconds_sum{model=\"m\"} 0.2\n"
    "dlserve_batch_size_bucket{model=\"m\",le=\"1\"} 9\n";

static json_t *status(void)
{
    return json_loads(
        "{\"models\": [{\"name\": \"m\"}, {\"name\": \"n\"}],"
        " \"batcher\": {\"queued_samples\": {\"m\": 3}},"
        " \"counters\": {\"http\": {\"200\": 7, \"404\": 2},"
        "   \"models\": {\"m\": {\"1\": {\"success\": 4, \"failure\": 1},"
        "                      \"2\": {\"success\": 2, \"failure\": 0}}}},"
        " \"kafka\": {\"consumed\": 10, \"outputs\": 8, \"dead_letters\": {\"json\": 1, \"model\": 1},"
        "   \"partitions\": [{\"topic\": \"in\", \"partition\": 0, \"lag\": 4},"
        "                    {\"topic\": \"in\", \"partition\": 1, \"lag\": -1}],"
        "   \"record_latency\": {\"create_time\": {\"count\": 0, \"p50_ms\": null},"
        "     \"log_append_time\": {\"count\": 3, \"p50_ms\": 5.0, \"p99_ms\": 50.0}}}}",
        0, NULL);
}

Test(history, snapshot_of_status_and_metrics)
{
    json_t *st = status();
    json_t *s = history_snapshot(12.5, st, prom);
    cr_assert_not_null(s);
    cr_expect_float_eq(json_real_value(json_object_get(s, "t")), 12.5, 1e-9);
    cr_expect_eq(json_array_size(json_object_get(s, "models")), 2);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(s, "counts"), "m")), 7);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(s, "queue"), "m")), 3);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(s, "codes"), "404")), 2);
    cr_expect_float_eq(json_real_value(json_object_get(s, "cpu")), 1.5, 1e-9);
    cr_expect_float_eq(json_real_value(json_object_get(s, "rss")), 4096, 1e-9);
    json_t *b = json_object_get(json_object_get(s, "buckets"), "m");
    cr_assert_eq(json_array_size(b), 2);
    cr_expect_float_eq(json_real_value(json_array_get(json_array_get(b, 0), 0)), 0.001, 1e-12);
    cr_expect(json_is_null(json_array_get(json_array_get(b, 1), 0)));
    cr_expect_float_eq(json_real_value(json_array_get(json_array_get(b, 1), 1)), 5, 1e-9);
    json_t *k = json_object_get(s, "kafka");
    cr_expect_eq(json_integer_value(json_object_get(k, "in")), 10);
    cr_expect_eq(json_integer_value(json_object_get(k, "out")), 8);
    cr_expect_eq(json_integer_value(json_object_get(k, "dead")), 2);
    cr_expect_float_eq(json_real_value(json_object_get(k, "p99_ms")), 50, 1e-9);
    json_t *lag = json_object_get(k, "lag");
    cr_expect_eq(json_integer_value(json_object_get(lag, "in/0")), 4);
    cr_expect(json_is_null(json_object_get(lag, "in/1")));
    json_decref(s);
    json_decref(st);
}

Test(history, ring_keeps_the_newest)
{
    history *hs;
    cr_assert_eq(history_new(&hs, NULL), DL_OK);
    for (int i = 0; i < HISTORY_SAMPLES + 10; i++)
        history_add(hs, json_pack("{s:i}", "t", i));
    json_t *j = history_json(hs);
    json_t *samples = json_object_get(j, "samples");
    cr_expect_eq(json_integer_value(json_object_get(j, "interval_s")), HISTORY_INTERVAL_S);
    cr_assert_eq(json_array_size(samples), HISTORY_SAMPLES);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(samples, 0), "t")), 10);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(samples, HISTORY_SAMPLES - 1),
                                                    "t")),
                 HISTORY_SAMPLES + 9);
    json_decref(j);
    history_free(hs);
}

Test(history, route)
{
    oip_route r;
    cr_expect_eq(oip_route_parse("/status/history", &r), OIP_ROUTE_HISTORY);
    cr_expect(oip_route_method_ok(OIP_ROUTE_HISTORY, "GET"));
    cr_expect_not(oip_route_method_ok(OIP_ROUTE_HISTORY, "POST"));
}
