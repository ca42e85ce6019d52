/* dl_data.h: datasets (IDX, gzip'd or not, CSV and JSON Lines) scaled as
 * dl_scaling says, the per-epoch deterministic shuffle and the rank sharding of global
 * batches. Depends on util, and on nn for dl_scaling; everything here is
 * host memory. */
#ifndef DL_DATA_H
#define DL_DATA_H

#include "nn/dl_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_DATA_MAX_DIMS 4

/* A dataset in memory. Plain struct: fields are read directly. */
typedef struct dl_dataset {
    int64_t  n;                          /* samples */
    int      ndim;                       /* per-sample dims, e.g. 3 */
    int64_t  shape[DL_DATA_MAX_DIMS];    /* per-sample shape, e.g. {1,28,28} */
    int64_t  dim;                        /* product of shape */
    float   *x;                          /* n * dim scaled inputs (owned) */
    int32_t *y;                          /* n labels (owned), NULL if none */
    int64_t  tdim;                       /* target columns a sample (graph models) */
    float   *t;                          /* n * tdim targets (owned), NULL if none */
} dl_dataset;

/* Loads an IDX image file (magic 0x00000803, u8, 1-3 dims after the count;
 * gzip'd or plain: detected from the content) and, if labels_path is not
 * NULL, its IDX label file (0x00000801). Images of HxW load with shape
 * {1, H, W}. Checks magic, dimensions, sizes against the file length and
 * that both files have the same count. *out is new. Errors name the file. */
dl_status dl_dataset_load_idx(const char *images_path, const char *labels_path,
                              const dl_scaling *sc, dl_dataset **out,
                              dl_err *err);

/* Loads a CSV file: one sample per line, the label first when has_label,
 * then exactly `dim` numeric features; an optional header line whose first
 * field is not a number is skipped. Samples get shape {dim}. Errors name
 * the file and line. *out is new. */
dl_status dl_dataset_load_csv(const char *path, int64_t dim, bool has_label,
                              const dl_scaling *sc, dl_dataset **out,
                              dl_err *err);

/* dl_dataset_load_csv from memory: text[0..len) (need not be
 * NUL-terminated; copied while parsing), `what` naming it in errors. */
dl_status dl_dataset_parse_csv(const char *text, size_t len, const char *what,
                               int64_t dim, bool has_label, const dl_scaling *sc,
                               dl_dataset **out, dl_err *err);

/* Loads a CSV file for a graph model (conf->graph): each line holds
 * the target columns of every output in the order of "outputs" (a class
 * index for softmax cross-entropy, else one value a unit: conf's tcols),
 * then each input's values in the order of "inputs", FP32 ones scaled as
 * the input says, ids (integer datatypes) whole numbers in the type's
 * range below 2^24. No header line. A bad line is refused with file:line.
 * Samples get the inputs' values side by side (dim = their sum) and
 * targets in t. *out is new. */
dl_status dl_dataset_load_csv_model(const char *path, const dl_model_conf *conf,
                                    dl_dataset **out, dl_err *err);
/* dl_dataset_load_csv_model of lines without target columns: each input's
 * values only, as `dlserve --predict` reads them. */
dl_status dl_dataset_load_csv_inputs(const char *path, const dl_model_conf *conf,
                                     dl_dataset **out, dl_err *err);

/* Loads a JSON Lines file for a graph model (conf->graph; sequence models
 * are): one JSON object a line, a key per input (a string for BYTES, a
 * list for a sequence: flat or a list a position, a number or a list for
 * the others) and per output but next_token ones (a class index or a
 * label, a list of them a token, or a number or list of values). Rows are
 * packed as dl_model_forward takes them (dl_input_width floats an input),
 * targets as dl_dataset_load_csv_model's (-1 past a sequence's length).
 * Read a line at a time; a bad line is refused with file:line, as are a
 * key no input or output has, a missing key and a too long sample.
 * docs/model-repository.md has the format. *out is new. */
dl_status dl_dataset_load_jsonl(const char *path, const dl_model_conf *conf,
                                dl_dataset **out, dl_err *err);
/* dl_dataset_load_jsonl of inputs only, as `dlserve --predict` reads them:
 * any model, output keys ignored, no targets. */
dl_status dl_dataset_load_jsonl_inputs(const char *path, const dl_model_conf *conf,
                                       dl_dataset **out, dl_err *err);
/* The same from memory: text[0..len) (not NUL-terminated), `what` naming
 * it in errors, with targets or without. */
dl_status dl_dataset_parse_jsonl(const char *text, size_t len, const char *what,
                                 const dl_model_conf *conf, bool targets, dl_dataset **out,
                                 dl_err *err);

/* Loads a split ("train" or "test") from a data folder: the IDX pair
 * (train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz], or
 * t10k-... for "test") if present, else <split>.csv with labels, where
 * dim is the features per sample. *out is new. */
dl_status dl_dataset_load_dir(const char *dir, const char *split, int64_t dim,
                              const dl_scaling *sc, dl_dataset **out,
                              dl_err *err);

/* Keeps only the first n samples (no-op if n <= 0 or n >= ds->n). */
void dl_dataset_truncate(dl_dataset *ds, int64_t n);

void dl_dataset_free(dl_dataset *ds);

/* Fills perm[0..n) with epoch `epoch`'s global permutation for `seed`:
 * a Fisher-Yates shuffle driven by dl_rng seeded from (seed, epoch). The
 * same (seed, epoch, n) gives the same permutation on every rank. */
void dl_data_permutation(uint64_t seed, int64_t epoch, int64_t n,
                         int64_t *perm);

/* Steps per epoch for n samples and a global batch of `global_batch`
 * (the last, partial batch counts). */
int64_t dl_data_steps(int64_t n, int64_t global_batch);

/* Which positions of the epoch's permutation rank `rank` of `nranks`
 * takes at step `step`, with `batch` samples per rank: the global batch
 * covers positions [step*G, min(n, (step+1)*G)) with G = nranks*batch;
 * rank r takes the r-th of nranks contiguous, near-equal parts of it
 * (exactly `batch` each when the global batch is full). *count may be 0. */
void dl_data_shard(int64_t n, int64_t batch, int rank, int nranks,
                   int64_t step, int64_t *begin, int64_t *count);

/* Copies samples idx[0..count) into x (count * ds->dim floats) and, when
 * y is not NULL, their labels into y. */
void dl_data_gather(const dl_dataset *ds, const int64_t *idx, int64_t count,
                    float *x, int32_t *y);

/* Copies the targets of samples idx[0..count) into t (count * ds->tdim). */
void dl_data_gather_targets(const dl_dataset *ds, const int64_t *idx, int64_t count,
                            float *t);

#ifdef __cplusplus
}
#endif
#endif /* DL_DATA_H */
