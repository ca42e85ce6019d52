/* records.h (private to serve/): Kafka record values as pure functions:
 * which model a record names, its id, its decoded inputs, and the JSON of
 * its prediction. No librdkafka here: the consumer (kafka_in.c) hands over
 * the value and the few headers that matter, so every rule is unit-tested
 * on its own (tests/unit/test_records.c). Thread-safe. */
#ifndef DL_SERVE_RECORDS_H
#define DL_SERVE_RECORDS_H

#include "nn/dl_nn.h"

#include <jansson.h>

/* Why a record went to the dead-letter topic (the metrics label). */
typedef enum record_fault {
    REC_OK,
    REC_EMPTY,       /* zero-length value */
    REC_OVERSIZE,    /* larger than max_record_bytes */
    REC_JSON,        /* not JSON, or not an object of a known form */
    REC_MODEL,       /* names no served model (or none and no default) */
    REC_INPUT,       /* wrong shape, datatype, size or a non-finite value */
    REC_INFERENCE,   /* the batch failed (out of memory, ...) */
    REC_NFAULTS
} record_fault;

/* The label of a fault ("empty", "oversize", ...). */
const char *record_fault_name(record_fault f);

/* The fault of a record refused with status st (st != DL_OK) once its
 * model is known: REC_INPUT for invalid inputs, REC_OVERSIZE over a size
 * limit, REC_MODEL for a model or version not found, REC_INFERENCE for
 * the daemon's own failures (memory, backend, ...). */
record_fault record_fault_of(dl_status st);

/* A consumed record: its value and what its headers say. */
typedef struct record_in {
    const void *value;
    size_t      len;
    bool        binary;        /* content-type: application/octet-stream */
    const char *model_hdr;     /* dlserve-model, or NULL */
    const char *id_hdr;        /* dlserve-id, or NULL */
    const char *topic;
    int32_t     partition;
    int64_t     offset;
} record_in;

/* What the first look at a record found. */
typedef struct record_env {
    json_t  *root;             /* the parsed JSON value; NULL for binary */
    char    *id;               /* new: the record's id, or "topic/partition/offset" */
    char     model[DL_NAME_MAX];
    int64_t  version;          /* 0: the newest */
} record_env;

/* First look: size limits, JSON syntax, the id and the model (the record's
 * "model", else the dlserve-model header, else default_model). On failure
 * the fault comes back with err saying why (err->code DL_ERR_INVALID,
 * DL_ERR_TOO_LARGE for REC_OVERSIZE, DL_ERR_NOMEM for REC_INFERENCE), and
 * env->id is still set (when memory allows) so the dead letter can name it. */
record_fault record_open(const record_in *in, const char *default_model,
                         size_t max_bytes, record_env *env, dl_err *err);

/* Decodes the inputs for the model named by env: n samples of in_dim raw
 * values each, unscaled (the batcher scales them). *x is new. On
 * failure err says why: REC_INPUT (DL_ERR_INVALID) or REC_INFERENCE
 * (DL_ERR_NOMEM). */
record_fault record_decode(const record_in *in, const record_env *env,
                           const dl_model_conf *conf, int64_t in_dim,
                           int64_t *n, float **x, dl_err *err);

/* record_decode into a buffer the caller reuses: *x holds *cap floats
 * (NULL and 0 at first) and is grown (realloc) when the record needs
 * more; it stays the caller's, on failure too. */
record_fault record_decode_into(const record_in *in, const record_env *env,
                                const dl_model_conf *conf, int64_t in_dim,
                                int64_t *n, float **x, size_t *cap, dl_err *err);

void record_env_fini(record_env *env);

/* A prediction to write: n samples of out_dim probabilities. */
typedef struct record_out {
    const char          *id;
    const char          *model;
    int64_t              version;
    const dl_model_conf *conf;     /* labels */
    int64_t              n, out_dim;
    const float         *y;
    const char          *topic;    /* the source record */
    int32_t              partition;
    int64_t              offset;
} record_out;

/* Appends {"id","model","version","class","label","scores":[...],"source":
 * {"topic","partition","offset"}} to b; for n > 1, "class", "label" and
 * "scores" hold one entry per sample. Scores are the shortest text that
 * reads back as the same float (dl_fmt_float). No allocation but b's
 * growth, so a reused b costs none; false when out of memory (b->oom). */
bool record_format(const record_out *o, dl_sbuf *b);

/* record_format as a new string (*len bytes), NULL when out of memory. */
char *record_output(const record_out *o, size_t *len);

#endif /* DL_SERVE_RECORDS_H */
