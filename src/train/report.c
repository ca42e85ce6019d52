/* report.c: metrics.csv and curves.svg for a trained model version, built
 * in a growable string buffer and written atomically. */
#include "train/report.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends s as XML character data: markup characters escaped, characters
 * XML 1.0 forbids (C0 controls, broken UTF-8) replaced by '?'. */
static void sb_put_xml(dl_sbuf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        switch (*u) {
        case '&':  dl_sbuf_printf(b, "&amp;");  u++; continue;
        case '<':  dl_sbuf_printf(b, "&lt;");   u++; continue;
        case '>':  dl_sbuf_printf(b, "&gt;");   u++; continue;
        case '"':  dl_sbuf_printf(b, "&quot;"); u++; continue;
        case '\'': dl_sbuf_printf(b, "&apos;"); u++; continue;
        default:   break;
        }
        if (*u < 0x20) {
            dl_sbuf_putc(b, *u == '\t' ? ' ' : '?');
            u++;
            continue;
        }
        int n = (int)dl_utf8_len(u);
        if (n == 0) {
            dl_sbuf_putc(b, '?');
            u++;
            continue;
        }
        for (int i = 0; i < n; i++)
            dl_sbuf_putc(b, (char)u[i]);
        u += n;
    }
}

static dl_status sb_write(dl_sbuf *b, const char *path, dl_err *err)
{
    if (b->oom)
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    const void *parts[1] = {b->s};
    size_t lens[1] = {b->len};
    return dl_file_write_atomic(path, parts, lens, 1, err);
}

/* ---- metrics.csv ---------------------------------------------------- */

/* A value or, for a missing test value (< 0), an empty field. */
static void csv_field(dl_sbuf *b, double v, bool optional)
{
    if (optional && v < 0)
        dl_sbuf_printf(b, ",");
    else
        dl_sbuf_printf(b, ",%.9g", v);
}

static bool outputs_ok(const dl_report_output *outs, int nouts)
{
    return nouts >= 0 && nouts <= DL_REPORT_MAX_OUTPUTS && (nouts == 0 || outs);
}

static const char *metric_name(const dl_report_output *o)
{
    return o->rmse ? "rmse" : "accuracy";
}

/* The header: today's columns, then four an output. */
static void csv_header(dl_sbuf *b, const dl_report_output *outs, int nouts)
{
    dl_sbuf_printf(b, "epoch,lr,train_loss,train_accuracy,test_loss,"
                  "test_accuracy,samples_per_sec,seconds");
    for (int k = 0; k < nouts; k++) {
        const char *o = outs[k].name, *m = metric_name(&outs[k]);
        dl_sbuf_printf(b, ",%s_train_loss,%s_train_%s,%s_test_loss,%s_test_%s", o, o, m,
                       o, o, m);
    }
    dl_sbuf_printf(b, "\n");
}

static void csv_row(dl_sbuf *b, const dl_epoch_stats *e, int nouts)
{
    dl_sbuf_printf(b, "%d", e->epoch);
    csv_field(b, e->lr, false);
    csv_field(b, e->train_loss, false);
    csv_field(b, e->train_accuracy, false);
    csv_field(b, e->test_loss, true);
    csv_field(b, e->test_accuracy, true);
    csv_field(b, e->samples_per_sec, false);
    csv_field(b, e->seconds, false);
    for (int k = 0; k < nouts; k++) {
        csv_field(b, e->out[k].train_loss, false);
        csv_field(b, e->out[k].train_metric, false);
        csv_field(b, e->out[k].test_loss, true);
        csv_field(b, e->out[k].test_metric, true);
    }
    dl_sbuf_printf(b, "\n");
}

dl_status dl_report_write_csv(const char *path, const dl_report_output *outs, int nouts,
                              const dl_epoch_stats *e, int n, dl_err *err)
{
    if (!path || n < 0 || (n > 0 && !e) || !outputs_ok(outs, nouts))
        return dl_err_set(err, DL_ERR_INVALID, "metrics.csv: bad arguments");
    dl_sbuf b = {0};
    csv_header(&b, outs, nouts);
    for (int i = 0; i < n; i++)
        csv_row(&b, &e[i], nouts);
    dl_status st = sb_write(&b, path, err);
    free(b.s);
    return st;
}

/* ---- curves.svg ----------------------------------------------------- */

/* Page geometry in SVG user units (= CSS pixels). */
enum {
    SVG_W = 960, SVG_H = 420, PANEL_W = SVG_W / 2,
    PLOT_L = 68, PLOT_R = 24,        /* plot area insets within a panel */
    PLOT_T = 92, PLOT_B = 56,
    ROW_H = 330, ROW_T = 42,         /* a row of output panels; its plot's top inset */
    INSET_X = 12, INSET_Y = 8,       /* data kept off the axis lines */
    MAX_TICKS = 64,
    MAX_MARKED = 40,                 /* draw point markers up to this many epochs */
};

static const char *const COLOR_TRAIN = "#1f77b4";
static const char *const COLOR_TEST = "#d62728";

typedef struct axis {
    double lo, hi;      /* the mapped range */
    double step;        /* tick spacing: 1, 2 or 5 x 10^k */
    int    decimals;    /* digits after the point in tick labels */
} axis;

/* A "nice" step near span / target: 1, 2 or 5 times a power of ten. */
static double nice_step(double span, int target)
{
    double raw = span / target;
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    double m = f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0;
    return m * mag;
}

static int step_decimals(double step)
{
    int d = (int)-floor(log10(step) + 1e-9);
    return d < 0 ? 0 : d > 12 ? 12 : d;
}

/* Value axis over [lo, hi] (the finite data range; lo > hi when there is
 * no data), widened to whole steps; a constant series gets a band around
 * its value, so the range is never empty. */
static void axis_fit_values(axis *a, double lo, double hi)
{
    if (!(lo <= hi)) {
        lo = 0.0;
        hi = 1.0;
    }
    double mid = 0.5 * (lo + hi), mag = fmax(fabs(lo), fabs(hi));
    if (hi - lo <= 1e-9 * mag || hi - lo < 1e-300) {
        double d = mag > 0 ? 0.05 * mag : 0.5;
        lo = mid - d;
        hi = mid + d;
    }
    double step = nice_step(hi - lo, 5);
    a->lo = floor(lo / step + 1e-9) * step;
    a->hi = ceil(hi / step - 1e-9) * step;
    a->step = step;
    a->decimals = step_decimals(step);
    if (!isfinite(a->lo) || !isfinite(a->hi) || !isfinite(step) ||
        !(a->hi > a->lo) || step <= 0) {
        a->lo = 0.0;
        a->hi = 1.0;
        a->step = 0.2;
        a->decimals = 1;
    }
}

/* Epoch axis: [first, last] epoch with integer ticks; one epoch gets a
 * unit-wide range centred on it. */
static void axis_fit_epochs(axis *a, int first, int last)
{
    if (last <= first) {
        a->lo = first - 0.5;
        a->hi = first + 0.5;
        a->step = 1.0;
    } else {
        a->lo = first;
        a->hi = last;
        a->step = fmax(1.0, nice_step((double)(last - first), 8));
    }
    a->decimals = 0;
}

/* Fills out with the tick values of a (multiples of step within [lo, hi],
 * at most MAX_TICKS) and returns how many. */
static int axis_ticks(const axis *a, double *out)
{
    int n = 0;
    double k0 = ceil(a->lo / a->step - 1e-9);
    for (double k = k0; n < MAX_TICKS; k += 1.0) {
        double v = k * a->step;
        if (v > a->hi + 1e-9 * a->step)
            break;
        if (fabs(v) < 1e-9 * a->step)
            v = 0.0;   /* no "-0" labels */
        out[n++] = v;
    }
    return n;
}

static double map(const axis *a, double v, double p0, double p1)
{
    return p0 + (v - a->lo) / (a->hi - a->lo) * (p1 - p0);
}

/* Plot area of a panel: the frame, and the inset box data is mapped into. */
typedef struct plot {
    double l, r, t, b;           /* frame */
    const axis *xa, *ya;
} plot;

static double px(const plot *p, double x)
{
    return map(p->xa, x, p->l + INSET_X, p->r - INSET_X);
}

static double py(const plot *p, double y)
{
    return map(p->ya, y, p->b - INSET_Y, p->t + INSET_Y);
}

/* A field of dl_epoch_stats read through its offset; missing when not
 * finite, or negative for an optional (test) field. */
typedef struct series {
    size_t      off;
    bool        optional;
    const char *label;
    const char *color;
    const char *dash;    /* stroke-dasharray, or NULL for solid */
} series;

static bool series_value(const dl_epoch_stats *e, const series *s, double *v)
{
    *v = *(const double *)((const char *)e + s->off);
    return isfinite(*v) && !(s->optional && *v < 0);
}

static bool series_present(const dl_epoch_stats *e, int n, const series *s)
{
    double v;
    for (int i = 0; i < n; i++)
        if (series_value(&e[i], s, &v))
            return true;
    return false;
}

static void svg_text(dl_sbuf *b, double x, double y, const char *anchor,
                     const char *extra, const char *s)
{
    dl_sbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s>", x, y,
              anchor, extra ? " " : "", extra ? extra : "");
    sb_put_xml(b, s);
    dl_sbuf_printf(b, "</text>\n");
}

static void svg_line(dl_sbuf *b, double x0, double y0, double x1, double y1,
                     const char *stroke, double width, const char *dash)
{
    dl_sbuf_printf(b, "<polyline points=\"%.1f,%.1f %.1f,%.1f\" fill=\"none\" "
                 "stroke=\"%s\" stroke-width=\"%.1f\"", x0, y0, x1, y1,
              stroke, width);
    if (dash)
        dl_sbuf_printf(b, " stroke-dasharray=\"%s\"", dash);
    dl_sbuf_printf(b, "/>\n");
}

/* Draws one series: polylines over runs of present points, and markers. */
static void svg_series(dl_sbuf *b, const dl_epoch_stats *e, int n,
                       const series *s, const plot *p)
{
    int i = 0;
    while (i < n) {
        double v;
        while (i < n && !series_value(&e[i], s, &v))
            i++;
        int j = i;
        while (j < n && series_value(&e[j], s, &v))
            j++;
        if (j - i >= 2) {
            dl_sbuf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" "
                         "stroke-width=\"2\" stroke-linejoin=\"round\"%s%s%s "
                         "points=\"", s->color,
                      s->dash ? " stroke-dasharray=\"" : "",
                      s->dash ? s->dash : "", s->dash ? "\"" : "");
            for (int k = i; k < j; k++) {
                series_value(&e[k], s, &v);
                dl_sbuf_printf(b, "%s%.2f,%.2f", k > i ? " " : "",
                          px(p, e[k].epoch), py(p, v));
            }
            dl_sbuf_printf(b, "\"/>\n");
        }
        i = j;
    }
    if (n > MAX_MARKED)
        return;
    for (int k = 0; k < n; k++) {
        double v;
        if (!series_value(&e[k], s, &v))
            continue;
        dl_sbuf_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.1f\" fill=\"%s\"/>\n",
                  px(p, e[k].epoch), py(p, v), n == 1 ? 4.0 : 3.0, s->color);
    }
}

/* One panel, its frame from y = top to bottom: heading, grid, axes with
 * tick labels, legend, series. */
static void svg_panel(dl_sbuf *b, int x0, int top, int bottom, const char *heading,
                      const dl_epoch_stats *e, int n, const series *ser,
                      int nser, const axis *xa)
{
    double lo = INFINITY, hi = -INFINITY, v;
    for (int s = 0; s < nser; s++)
        for (int i = 0; i < n; i++)
            if (series_value(&e[i], &ser[s], &v)) {
                lo = fmin(lo, v);
                hi = fmax(hi, v);
            }
    axis ya;
    axis_fit_values(&ya, lo, hi);
    const plot p = {x0 + PLOT_L, x0 + PANEL_W - PLOT_R, top, bottom, xa, &ya};

    svg_text(b, p.l, p.t - 18, "start",
             "font-size=\"14\" font-weight=\"bold\"", heading);

    double ticks[MAX_TICKS];
    char label[64];
    int nt = axis_ticks(&ya, ticks);
    for (int i = 0; i < nt; i++) {
        double y = py(&p, ticks[i]);
        svg_line(b, p.l, y, p.r, y, "#e4e4e4", 1.0, NULL);
        svg_line(b, p.l - 5, y, p.l, y, "#333333", 1.0, NULL);
        snprintf(label, sizeof(label), "%.*f", ya.decimals, ticks[i]);
        svg_text(b, p.l - 8, y + 4, "end", NULL, label);
    }
    nt = axis_ticks(xa, ticks);
    for (int i = 0; i < nt; i++) {
        double x = px(&p, ticks[i]);
        svg_line(b, x, p.b, x, p.b + 5, "#333333", 1.0, NULL);
        snprintf(label, sizeof(label), "%.0f", ticks[i]);
        svg_text(b, x, p.b + 19, "middle", NULL, label);
    }
    dl_sbuf_printf(b, "<polyline points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
                 "fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n",
              p.l, p.t, p.l, p.b, p.r, p.b);
    svg_text(b, 0.5 * (p.l + p.r), p.b + 40, "middle", NULL, "epoch");

    /* Legend, right-aligned above the plot, for the series drawn: a
     * stroke sample, then the label (about 7 units a character). */
    double lx = p.r;
    for (int s = nser - 1; s >= 0; s--) {
        if (!series_present(e, n, &ser[s]))
            continue;
        svg_text(b, lx, p.t - 18, "end", NULL, ser[s].label);
        lx -= 7.0 * (double)strlen(ser[s].label) + 6;
        svg_line(b, lx - 22, p.t - 22, lx, p.t - 22, ser[s].color, 2.0,
                 ser[s].dash);
        lx -= 22 + 16;
    }

    for (int s = 0; s < nser; s++)
        svg_series(b, e, n, &ser[s], &p);
}

/* The caption under the title: how many epochs and the final values. */
static void svg_caption(dl_sbuf *b, const dl_epoch_stats *e, int n)
{
    const dl_epoch_stats *z = &e[n - 1];
    char cap[256];
    int len = snprintf(cap, sizeof(cap), "%d epoch%s", n, n == 1 ? "" : "s");
    struct { const char *name; double v; bool optional; } f[] = {
        {"train loss", z->train_loss, false},
        {"train accuracy", z->train_accuracy, false},
        {"test loss", z->test_loss, true},
        {"test accuracy", z->test_accuracy, true},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (!isfinite(f[i].v) || (f[i].optional && f[i].v < 0))
            continue;
        len += snprintf(cap + len, sizeof(cap) - (size_t)len, ", %s %.4f",
                        f[i].name, f[i].v);
    }
    if (isfinite(z->samples_per_sec) && z->samples_per_sec > 0)
        snprintf(cap + len, sizeof(cap) - (size_t)len, ", %.0f samples/s",
                 z->samples_per_sec);
    svg_text(b, SVG_W / 2.0, 50, "middle", "font-size=\"12\" fill=\"#555555\"",
             cap);
}

/* Output k's metric panel, two a row under the loss and accuracy panels. */
static void svg_output_panel(dl_sbuf *b, const dl_report_output *o, int k,
                             const dl_epoch_stats *e, int n, const axis *xa)
{
    size_t at = offsetof(dl_epoch_stats, out) + (size_t)k * sizeof(dl_output_stats);
    const series ser[] = {
        {at + offsetof(dl_output_stats, train_metric), false, "train", COLOR_TRAIN, NULL},
        {at + offsetof(dl_output_stats, test_metric), true, "test", COLOR_TEST, "6,3"},
    };
    char heading[128];
    snprintf(heading, sizeof(heading), "%s %s", o->name, metric_name(o));
    int top = SVG_H + (k / 2) * ROW_H;
    svg_panel(b, (k % 2) * PANEL_W, top + ROW_T, top + ROW_H - PLOT_B, heading, e, n, ser,
              2, xa);
}

dl_status dl_report_write_svg(const char *path, const char *title,
                              const dl_report_output *outs, int nouts,
                              const dl_epoch_stats *e, int n, dl_err *err)
{
    if (!path || !e || n < 1 || !outputs_ok(outs, nouts))
        return dl_err_set(err, DL_ERR_INVALID, "curves.svg: bad arguments "
                          "(%d epochs, %d outputs)", n, nouts);

    int first = e[0].epoch, last = e[0].epoch;
    for (int i = 1; i < n; i++) {
        first = e[i].epoch < first ? e[i].epoch : first;
        last = e[i].epoch > last ? e[i].epoch : last;
    }
    axis xa;
    axis_fit_epochs(&xa, first, last);

    const series loss[] = {
        {offsetof(dl_epoch_stats, train_loss), false, "train", COLOR_TRAIN, NULL},
        {offsetof(dl_epoch_stats, test_loss), true, "test", COLOR_TEST, "6,3"},
    };
    const series acc[] = {
        {offsetof(dl_epoch_stats, train_accuracy), false, "train", COLOR_TRAIN, NULL},
        {offsetof(dl_epoch_stats, test_accuracy), true, "test", COLOR_TEST, "6,3"},
    };

    int height = SVG_H + (nouts + 1) / 2 * ROW_H;
    dl_sbuf b = {0};
    dl_sbuf_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                  "height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
                  "font-size=\"12\" fill=\"#222222\" "
                  "style=\"background-color:#ffffff\">\n",
              SVG_W, height, SVG_W, height);
    svg_text(&b, SVG_W / 2.0, 28, "middle",
             "font-size=\"17\" font-weight=\"bold\"",
             title && *title ? title : "training");
    svg_caption(&b, e, n);
    svg_panel(&b, 0, PLOT_T, SVG_H - PLOT_B, "loss", e, n, loss, 2, &xa);
    svg_panel(&b, PANEL_W, PLOT_T, SVG_H - PLOT_B, "accuracy", e, n, acc, 2, &xa);
    for (int k = 0; k < nouts; k++)
        svg_output_panel(&b, &outs[k], k, e, n, &xa);
    dl_sbuf_printf(&b, "</svg>\n");

    dl_status st = sb_write(&b, path, err);
    free(b.s);
    return st;
}
