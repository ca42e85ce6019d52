/* test_report.c: metrics.csv and curves.svg written for 1 and 5 epochs,
 * with and without a test set, and with each output's figures of a model
 * of several; the SVG is checked to be well-formed XML. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "train/report.h"

static char dir[64];

static void setup(void) { fx_tmpdir(dir, sizeof(dir), "report"); }

static void teardown(void) { fx_rmtree(dir); }

TestSuite(report, .init = setup, .fini = teardown, .timeout = 30);

static void fill(dl_epoch_stats *e, int n, bool with_test)
{
    for (int i = 0; i < n; i++) {
        e[i].epoch = i + 1;
        e[i].lr = 0.001 * cos(0.3 * i);
        e[i].train_loss = 0.9 / (i + 1) + 0.125;
        e[i].train_accuracy = 0.70 + 0.04 * i;
        e[i].test_loss = with_test ? 0.8 / (i + 1) + 0.25 : -1.0;
        e[i].test_accuracy = with_test ? 0.68 + 0.035 * i : -1.0;
        e[i].samples_per_sec = 81234.5 + 100 * i;
        e[i].seconds = 7.25 + i;
    }
}

static char *slurp(const char *path)
{
    size_t len = 0;
    char *s = fx_read(path, &len);
    cr_assert_eq(strlen(s), len, "%s holds a NUL byte", path);
    return s;
}

static bool close_to(double a, double b)
{
    return fabs(a - b) <= 1e-7 * fmax(1.0, fabs(b));
}

/* Parses one field; an empty field reads as -1 (no test set). */
static double field(char **p)
{
    if (**p == ',' || **p == '\n' || **p == '\0')
        return -1.0;
    char *end;
    double v = strtod(*p, &end);
    cr_assert_neq(end, *p, "not a number at \"%.20s\"", *p);
    *p = end;
    return v;
}

static void check_csv(int n, bool with_test)
{
    dl_epoch_stats e[8];
    fill(e, n, with_test);
    const char *path = fx_join(dir, "metrics.csv");
    dl_err err = {0};
    cr_assert_eq(dl_report_write_csv(path, NULL, 0, e, n, &err), DL_OK, "%s", err.msg);

    char *s = slurp(path);
    int lines = 0;
    for (char *c = s; *c; c++)
        lines += *c == '\n';
    cr_expect_eq(lines, n + 1);
    cr_assert_eq(s[strlen(s) - 1], '\n');

    const char *hdr = "epoch,lr,train_loss,train_accuracy,test_loss,"
                      "test_accuracy,samples_per_sec,seconds\n";
    cr_assert_eq(strncmp(s, hdr, strlen(hdr)), 0, "header: %.80s", s);
    char *p = s + strlen(hdr);
    for (int i = 0; i < n; i++) {
        double want[8] = {e[i].epoch, e[i].lr, e[i].train_loss,
                          e[i].train_accuracy, e[i].test_loss,
                          e[i].test_accuracy, e[i].samples_per_sec,
                          e[i].seconds};
        for (int k = 0; k < 8; k++) {
            double got = field(&p);
            cr_expect(close_to(got, want[k]), "row %d col %d: %g != %g", i, k,
                      got, want[k]);
            cr_assert_eq(*p, k < 7 ? ',' : '\n', "row %d col %d ends in %c",
                         i, k, *p);
            p++;
        }
    }
    cr_expect_eq(*p, '\0');
    free(s);
}

static bool have_python(void)
{
    return access("/usr/bin/python3", X_OK) == 0;
}

static void check_svg(int n, bool with_test)
{
    dl_epoch_stats e[8];
    fill(e, n, with_test);
    const char *path = fx_join(dir, "curves.svg");
    dl_err err = {0};
    cr_assert_eq(dl_report_write_svg(path, "fashion-mlp a<b & \"c\" v3", NULL, 0, e, n,
                                     &err), DL_OK, "%s", err.msg);

    char *s = slurp(path);
    size_t len = strlen(s);
    cr_expect_eq(strncmp(s, "<svg", 4), 0);
    cr_assert_geq(len, 7);
    cr_expect_str_eq(s + len - 7, "</svg>\n");
    cr_expect_not_null(strstr(s, "viewBox=\""));
    cr_expect_not_null(strstr(s, "width=\""));
    cr_expect_not_null(strstr(s, "<polyline"));
    cr_expect_not_null(strstr(s, "<circle"));
    cr_expect_not_null(strstr(s, "a&lt;b &amp; &quot;c&quot; v3"));
    cr_expect_null(strstr(s, "a<b"));
    cr_expect_null(strstr(s, "nan"));
    cr_expect_null(strstr(s, "NaN"));
    cr_expect_null(strstr(s, "inf"));
    /* Only the test series use the dashed stroke. */
    if (with_test)
        cr_expect_not_null(strstr(s, "stroke-dasharray"));
    else
        cr_expect_null(strstr(s, "stroke-dasharray"));
    cr_expect_not_null(strstr(s, ">loss</text>"));
    cr_expect_not_null(strstr(s, ">accuracy</text>"));
    free(s);

    if (have_python()) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c 'import sys,"
                 "xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' '%s'",
                 path);
        cr_expect_eq(system(cmd), 0, "not well-formed XML: %s", path);
    }
}

Test(report, csv_one_epoch)        { check_csv(1, true); }
Test(report, csv_five_epochs)      { check_csv(5, true); }
Test(report, csv_no_test_set)      { check_csv(5, false); }
Test(report, svg_one_epoch)        { check_svg(1, true); }
Test(report, svg_five_epochs)      { check_svg(5, true); }
Test(report, svg_no_test_set)      { check_svg(5, false); }
Test(report, svg_one_epoch_no_test) { check_svg(1, false); }

Test(report, svg_constant_and_nonfinite_values)
{
    dl_epoch_stats e[4];
    fill(e, 4, true);
    for (int i = 0; i < 4; i++) {
        e[i].train_loss = 0.0;          /* constant, zero */
        e[i].train_accuracy = 1.0;      /* constant */
        e[i].test_accuracy = 1.0;
    }
    e[2].test_loss = NAN;
    e[3].test_loss = INFINITY;
    const char *path = fx_join(dir, "curves.svg");
    dl_err err = {0};
    cr_assert_eq(dl_report_write_svg(path, NULL, NULL, 0, e, 4, &err), DL_OK, "%s",
                 err.msg);
    char *s = slurp(path);
    cr_expect_null(strstr(s, "nan"));
    cr_expect_null(strstr(s, "inf"));
    cr_expect_not_null(strstr(s, "<polyline"));
    free(s);
}

Test(report, svg_escapes_bad_bytes)
{
    dl_epoch_stats e[2];
    fill(e, 2, true);
    const char *path = fx_join(dir, "curves.svg");
    dl_err err = {0};
    /* A control character, a broken UTF-8 byte and a valid "é". */
    cr_assert_eq(dl_report_write_svg(path, "m\x01x\xff" "caf\xc3\xa9", NULL, 0, e, 2,
                                     &err), DL_OK, "%s", err.msg);
    char *s = slurp(path);
    cr_expect_not_null(strstr(s, "m?x?caf\xc3\xa9"));
    free(s);
    if (have_python()) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c 'import sys,"
                 "xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' '%s'",
                 path);
        cr_expect_eq(system(cmd), 0, "not well-formed XML");
    }
}

static const dl_report_output two[] = { {"click", false}, {"rating", true} };

/* e[i].out[k]: figures that tell the output, the epoch and the field apart. */
static void fill_outputs(dl_epoch_stats *e, int n, int nouts, bool with_test)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nouts; k++)
            e[i].out[k] = (dl_output_stats){ 0.5 + k + 0.01 * i, 0.25 + 0.1 * k + 0.01 * i,
                                             with_test ? 0.75 + k + 0.01 * i : -1.0,
                                             with_test ? 0.125 + 0.1 * k + 0.01 * i : -1.0 };
}

static void check_csv_outputs(bool with_test)
{
    dl_epoch_stats e[3];
    fill(e, 3, with_test);
    fill_outputs(e, 3, 2, with_test);
    const char *path = fx_join(dir, "metrics.csv");
    dl_err err = {0};
    cr_assert_eq(dl_report_write_csv(path, two, 2, e, 3, &err), DL_OK, "%s", err.msg);
    char *s = slurp(path);
    const char *hdr = "epoch,lr,train_loss,train_accuracy,test_loss,test_accuracy,"
                      "samples_per_sec,seconds,click_train_loss,click_train_accuracy,"
                      "click_test_loss,click_test_accuracy,rating_train_loss,"
                      "rating_train_rmse,rating_test_loss,rating_test_rmse\n";
    cr_assert_eq(strncmp(s, hdr, strlen(hdr)), 0, "header: %.300s", s);
    char *p = s + strlen(hdr);
    for (int i = 0; i < 3; i++) {
        for (int c = 0; c < 8; c++, p++)   /* today's columns: check_csv */
            field(&p);
        for (int k = 0; k < 2; k++) {
            const dl_output_stats *o = &e[i].out[k];
            double want[4] = { o->train_loss, o->train_metric, o->test_loss, o->test_metric };
            for (int c = 0; c < 4; c++, p++) {
                double got = field(&p);
                cr_expect(close_to(got, want[c]), "row %d output %d col %d: %g != %g", i,
                          k, c, got, want[c]);
                cr_assert_eq(*p, k == 1 && c == 3 ? '\n' : ',', "row %d output %d col %d",
                             i, k, c);
            }
        }
    }
    cr_expect_eq(*p, '\0');
    free(s);
}

Test(report, csv_outputs)          { check_csv_outputs(true); }
Test(report, csv_outputs_no_test)  { check_csv_outputs(false); }

Test(report, svg_a_panel_an_output)
{
    const dl_report_output three[] = { {"click", false}, {"rating", true}, {"ctr", false} };
    dl_epoch_stats e[5];
    fill(e, 5, true);
    fill_outputs(e, 5, 3, true);
    const char *path = fx_join(dir, "curves.svg");
    dl_err err = {0};
    cr_assert_eq(dl_report_write_svg(path, "two-tower", three, 3, e, 5, &err), DL_OK, "%s",
                 err.msg);
    char *s = slurp(path);
    cr_expect_not_null(strstr(s, ">click accuracy</text>"));
    cr_expect_not_null(strstr(s, ">rating rmse</text>"));
    cr_expect_not_null(strstr(s, ">ctr accuracy</text>"));
    /* two rows of output panels under the first: taller than one model's */
    cr_expect_not_null(strstr(s, "height=\"1080\""), "%.200s", s);
    cr_expect_null(strstr(s, "nan"));
    free(s);
    if (have_python()) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c 'import sys,"
                 "xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' '%s'",
                 path);
        cr_expect_eq(system(cmd), 0, "not well-formed XML");
    }
}

Test(report, rejects_bad_arguments)
{
    dl_epoch_stats e[1];
    fill(e, 1, true);
    const char *path = fx_join(dir, "x");
    dl_err err = {0};
    cr_expect_eq(dl_report_write_svg(path, "t", NULL, 0, e, 0, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_report_write_svg(NULL, "t", NULL, 0, e, 1, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_report_write_csv(path, NULL, 0, NULL, 1, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_report_write_csv(path, NULL, 0, e, -1, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_report_write_csv(path, NULL, 2, e, 1, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_report_write_csv(path, two, -1, e, 1, &err), DL_ERR_INVALID);
    cr_expect_eq(dl_report_write_svg(path, "t", two, DL_REPORT_MAX_OUTPUTS + 1, e, 1, &err),
                 DL_ERR_INVALID);
    cr_expect_eq(access(path, F_OK), -1, "nothing is written");
}

Test(report, io_error_names_the_file)
{
    dl_epoch_stats e[1];
    fill(e, 1, true);
    dl_err err = {0};
    cr_expect_eq(dl_report_write_csv("/nonexistent-dir/metrics.csv", NULL, 0, e, 1, &err),
                 DL_ERR_IO);
    cr_expect_not_null(strstr(err.msg, "metrics.csv"), "message: %s", err.msg);
}
