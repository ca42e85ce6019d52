/* report.h: per-epoch training statistics written next to a trained model
 * as metrics.csv and curves.svg. Private to train/. */
#ifndef DL_TRAIN_REPORT_H
#define DL_TRAIN_REPORT_H

#include "util/dl_util.h"

/* The most outputs whose figures an epoch carries: as many as model.json
 * allows. */
#define DL_REPORT_MAX_OUTPUTS 64

/* One output of a model of several, as metrics.csv and curves.svg name it. */
typedef struct dl_report_output {
    const char *name;        /* borrowed */
    bool        rmse;        /* the metric is the RMSE (an MSE output), else the accuracy */
} dl_report_output;

/* One output's figures in an epoch: its mean loss and its metric. */
typedef struct dl_output_stats {
    double train_loss, train_metric;
    double test_loss, test_metric;     /* < 0 when no test set */
} dl_output_stats;

typedef struct dl_epoch_stats {
    int    epoch;            /* 1-based */
    double lr;               /* learning rate at the epoch's end */
    double train_loss, train_accuracy;
    double test_loss, test_accuracy;   /* < 0 when no test set */
    double samples_per_sec;  /* training throughput of the epoch */
    double seconds;          /* wall time of the epoch */
    dl_output_stats out[DL_REPORT_MAX_OUTPUTS];   /* per output, when several */
} dl_epoch_stats;

/* Writes metrics.csv: header "epoch,lr,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_sec,seconds" and one row per epoch, atomically. */
/* Then, for each of outs[0..nouts), four more columns from e[i].out[k]:
 * <name>_train_loss, <name>_train_<metric>, <name>_test_loss,
 * <name>_test_<metric>, the metric "accuracy" or "rmse". outs (nouts = 0:
 * none) and e[0..n) are borrowed; n >= 0 (n = 0 writes the header alone).
 * A test value < 0 is written as an empty field. Errors: DL_ERR_INVALID
 * (NULL path, n < 0, e NULL with n > 0, nouts not in [0,
 * DL_REPORT_MAX_OUTPUTS], outs NULL with nouts > 0), DL_ERR_NOMEM,
 * DL_ERR_IO. Thread-safe (no shared state). */
dl_status dl_report_write_csv(const char *path, const dl_report_output *outs, int nouts,
                              const dl_epoch_stats *e, int n, dl_err *err);

/* Writes curves.svg: a standalone SVG (viewBox, width/height), two panels side by side: loss per epoch (train and test lines) and accuracy per epoch (train and test), axes with tick labels, title (model name + version given in `title`, XML-escaped), legend; drawn with <polyline>/<circle>/<text> only, readable in any browser. Works for n = 1 (a single point) and when test values are < 0 (omit those series). Atomic write. */
/* Below them, two a row, one panel for each of outs[0..nouts): its metric
 * per epoch (train and test). title (may be NULL), outs and e[0..n) are
 * borrowed; n >= 1. Non-finite values are left out of the plot, so the
 * file never holds NaN or inf. Errors: DL_ERR_INVALID (NULL path or e,
 * n < 1, nouts as for dl_report_write_csv), DL_ERR_NOMEM, DL_ERR_IO.
 * Thread-safe (no shared state). */
dl_status dl_report_write_svg(const char *path, const char *title, const dl_report_output *outs,
                              int nouts, const dl_epoch_stats *e, int n, dl_err *err);

#endif /* DL_TRAIN_REPORT_H */
