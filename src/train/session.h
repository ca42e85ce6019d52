/* session.h (private to train/): what every mode opens first: the model's
 * configuration, a backend, the model itself and, on demand, data. */
#ifndef DL_TRAIN_SESSION_H
#define DL_TRAIN_SESSION_H

#include "data/dl_data.h"
#include "train/dl_train.h"
#include "train/report.h"

typedef struct session {
    dl_model_conf *conf;
    dl_backend    *be;
    dl_model      *m;
    dl_scaling     sc;
    int64_t        version;      /* loaded version, 0 for fresh weights */
    char           weights[4096];
    /* per output, from the last session_evaluate: mean loss a sample,
     * accuracy (per-token outputs: over their tokens), (MSE) mean squared
     * error and its root, (next_token) perplexity: exp(mean token loss) */
    double         out_loss[DL_REPORT_MAX_OUTPUTS], out_acc[DL_REPORT_MAX_OUTPUTS],
                   out_rmse[DL_REPORT_MAX_OUTPUTS], out_mse[DL_REPORT_MAX_OUTPUTS],
                   out_ppl[DL_REPORT_MAX_OUTPUTS];
} session;

/* Opens model.json, the backend and a model with fresh weights (seed);
 * `serving`: the model will only serve (session_serve), which picks the
 * CPU's engine for its dense layers too. */
dl_status session_open(session *s, const dl_run_opts *o, uint64_t seed, bool serving,
                       dl_err *err);

/* The model only serves from now on (--eval, --predict, --bench):
 * dl_model_fix_weights, and batch-invariant answers as o->batch_invariant,
 * else model.json's serving block, else DL_BATCH_INVARIANT_DEFAULT say. */
void session_serve(session *s, const dl_run_opts *o);

/* Loads o->version (or the newest) into the model. */
dl_status session_load_weights(session *s, const dl_run_opts *o, dl_err *err);

/* The data folder of a split into dir (len bytes): o->data_dir; without
 * one, when the model folder has a `prepare` script, its data/ folder,
 * the script run first (`prepare DIR`, OUT_DIR=DIR in its environment)
 * unless data/ holds <split>.jsonl or <split>.csv; else
 * DL_DEFAULT_DATA_DIR. Errors: the script missing its execute bit,
 * failing, or writing no such file. (prepare.c) */
dl_status session_data_dir(const dl_run_opts *o, const char *split, char *dir, size_t len,
                           dl_err *err);

/* Loads one split of the data folder (session_data_dir): JSON Lines when
 * a graph model's folder has <split>.jsonl, else CSV or IDX as
 * dl_dataset_load_dir; truncated to o->limit. */
dl_status session_data(session *s, const dl_run_opts *o, const char *split,
                       dl_dataset **out, dl_err *err);

/* Mean loss and accuracy (output 0's, over its tokens for a per-token
 * output) of the model (inference mode) over a dataset; each output's
 * figures in s->out_*. */
dl_status session_evaluate(session *s, const dl_dataset *ds, int64_t batch,
                           double *loss, double *accuracy, dl_err *err);

void session_close(session *s);

#endif /* DL_TRAIN_SESSION_H */
