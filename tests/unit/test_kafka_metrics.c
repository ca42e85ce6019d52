/* test_kafka_metrics.c: the Kafka consumer-lag family of /metrics: topic
 * labels escaped, and the text accepted by `promtool check metrics`. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include "fixture.h"

#include "serve/kafka/kafka.h"

#define PROMTOOL "/usr/bin/promtool"

#define HEADER "# HELP dlserve_kafka_consumer_lag Records in the partition after the " \
               "committed position.\n# TYPE dlserve_kafka_consumer_lag gauge\n"

/* kafka_lag_metrics of parts (new text). */
static char *lag_text(json_t *parts)
{
    dl_sbuf b = {0};
    kafka_lag_metrics(&b, parts);
    cr_assert_not(b.oom);
    cr_assert_not_null(b.s);
    return b.s;
}

/* `promtool check metrics` on text: its exit status; what it said in msg. */
static int promtool(const char *text, char *msg, size_t n)
{
    char in[64];
    fx_tmpfile(in, sizeof(in), "kafka_metrics");
    fx_write_text(in, text);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), PROMTOOL " check metrics < %s 2>&1", in);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t len = fread(msg, 1, n - 1, p);
    msg[len] = '\0';
    int rc = pclose(p);
    unlink(in);
    cr_assert(WIFEXITED(rc), "promtool did not exit");
    return WEXITSTATUS(rc);
}

Test(kafka_metrics, topic_labels_escaped)
{
    json_t *parts = json_pack("[{s:s, s:i, s:i}, {s:s, s:i, s:i}]",
                              "topic", "in\"put\\x\ny", "partition", 0, "lag", 3,
                              "topic", "in", "partition", 1, "lag", 0);
    cr_assert_not_null(parts);
    char *text = lag_text(parts);
    cr_expect_str_eq(text, HEADER
                     "dlserve_kafka_consumer_lag{topic=\"in\\\"put\\\\x\\ny\",partition=\"0\"} 3\n"
                     "dlserve_kafka_consumer_lag{topic=\"in\",partition=\"1\"} 0\n");
    char msg[4096];
    cr_expect_eq(promtool(text, msg, sizeof(msg)), 0, "promtool said:\n%s\ntext:\n%s", msg, text);
    free(text);
    json_decref(parts);
}

Test(kafka_metrics, no_partitions_no_samples)
{
    char *text = lag_text(NULL);
    cr_expect_str_eq(text, HEADER);
    free(text);
}
