/* records.h (private to serve/): Kafka record values as pure functions:
 * which model a record names, its id, its decoded inputs, and the JSON of
 * its prediction. No librdkafka here: the consumer (kafka_in.c) hands over
 * the value and the few headers that matter, so every rule is unit-tested
 * on its own (tests/unit/test_records.c). Thread-safe.
 *
 * A record value takes one of four forms:
 *   JSON, the HTTP infer request   {"id", "model"?, "model_version"?, "inputs": [...]}
 *   JSON, flat values              {"id", "model"?, "model_version"?, "data": [numbers]}
 *   the OIP binary payload         header Inference-Header-Content-Length: N; the
 *                                  first N bytes the infer request (JSON), raw
 *                                  tensors after it (binary_data_size)
 *   raw float32                    content-type: application/octet-stream (and no
 *                                  Inference-Header-Content-Length): little-endian
 *                                  float32 values, whole samples
 * The first three are read once, by oip_scan_record, in record_open. */
#ifndef DL_SERVE_RECORDS_H
#define DL_SERVE_RECORDS_H

#include "nn/dl_nn.h"
#include "serve/oip/oip.h"

/* Why a record went to the dead-letter topic (the metrics label). */
typedef enum record_fault {
    REC_OK,
    REC_EMPTY,       /* zero-length value */
    REC_OVERSIZE,    /* larger than max_record_bytes */
    REC_JSON,        /* not JSON, or not an object of a known form */
    REC_MODEL,       /* names no served model (or none and no default) */
    REC_INPUT,       /* wrong shape, datatype, size or a non-finite value */
    REC_INFERENCE,   /* the batch failed (out of memory, ...) */
    REC_EXPIRED,     /* older than kafka.max_record_age_ms, or queued past its
                        deadline (its "timeout", batching.default_timeout_us) */
    REC_NFAULTS
} record_fault;

/* The label of a fault ("empty", "oversize", ...). */
const char *record_fault_name(record_fault f);

/* The fault of a record refused with status st (st != DL_OK) once its
 * model is known: REC_INPUT for invalid inputs, REC_OVERSIZE over a size
 * limit, REC_MODEL for a model or version not found, REC_EXPIRED for a
 * deadline passed (DL_ERR_TIMEOUT), REC_INFERENCE for
 * the daemon's own failures (memory, backend, ...). */
record_fault record_fault_of(dl_status st);

/* A consumed record: its value and what its headers say. */
typedef struct record_in {
    const void *value;
    size_t      len;
    bool        binary;        /* content-type: application/octet-stream */
    const char *json_len_hdr;  /* Inference-Header-Content-Length (any case), or
                                  NULL: the OIP binary payload form */
    const char *model_hdr;     /* dlserve-model, or NULL */
    const char *id_hdr;        /* dlserve-id, or NULL */
    const char *topic;
    int32_t     partition;
    int64_t     offset;
} record_in;

/* What the first look at a record found. */
typedef struct record_env {
    oip_request req;           /* the scanned record (JSON and OIP payload forms):
                                  its values until record_decode_into takes them */
    bool        scanned;       /* req holds it (false: raw float32) */
    char       *id;            /* new: the record's id, or "topic/partition/offset" */
    char        model[DL_NAME_MAX];
    int64_t     version;       /* 0: the newest */
} record_env;

/* First look, and the only parse: size limits, then (but for raw float32)
 * the whole value read by oip_scan_record: syntax, the envelope, the
 * values decoded into floats. The id is the record's "id" (a string or an
 * integer), else the dlserve-id header, else "topic/partition/offset"; the
 * model the record's "model", else the dlserve-model header, else
 * default_model. On failure the fault comes back with err saying why
 * (err->code DL_ERR_INVALID, DL_ERR_TOO_LARGE for REC_OVERSIZE,
 * DL_ERR_NOMEM for REC_INFERENCE): REC_JSON for bad JSON, a wrong envelope
 * or a bad Inference-Header-Content-Length, REC_INPUT for bad values,
 * REC_MODEL for no or a malformed model name; env->id is still set (when
 * memory allows) so the dead letter can name it. record_env_fini env
 * either way. */
record_fault record_open(const record_in *in, const char *default_model,
                         size_t max_bytes, record_env *env, dl_err *err);

/* The inputs for the model named by env: n samples of in_dim raw values
 * each, unscaled (the batcher scales them), sequences packed. Checks what
 * record_open read against the model (oip_check_infer for "inputs", with
 * tok the tokenizers of its text inputs; whole samples, their sequences'
 * lengths and their ids for "data" and raw float32, which carry samples
 * packed) and hands the values over; raw float32 values are copied from
 * in. *x is new. On failure err says why: REC_INPUT (DL_ERR_INVALID),
 * REC_OVERSIZE (DL_ERR_TOO_LARGE: inputs past OIP_MAX_PACKED_BYTES once
 * packed) or REC_INFERENCE (DL_ERR_NOMEM). The values of a scanned record are handed
 * over once: call it once per record_open (raw float32 records may be
 * decoded again). */
record_fault record_decode(const record_in *in, record_env *env,
                           const dl_model_conf *conf, dl_tokenizer *const *tok, int64_t in_dim,
                           int64_t *n, float **x, dl_err *err);

/* Makes *x (of *cap floats) hold at least need floats; false when out of
 * memory (*x is kept as it was). */
bool record_reserve(float **x, size_t *cap, size_t need);

/* record_decode into a buffer the caller reuses: *x holds *cap floats
 * (NULL and 0 at first); *values says where the n * in_dim values are. A
 * scanned record's values replace *x (the old buffer is freed, *x and
 * *cap are the scanner's) and *values is *x. Raw float32 values are
 * checked where they lie and not copied: *values is in->value, which must
 * outlive their use (any alignment: read them with memcpy). *x stays the
 * caller's, on failure too. */
record_fault record_decode_into(const record_in *in, record_env *env,
                                const dl_model_conf *conf, dl_tokenizer *const *tok,
                                int64_t in_dim, int64_t *n, float **x, size_t *cap,
                                const void **values, dl_err *err);

void record_env_fini(record_env *env);

/* A prediction to write: n samples of out_dim values (probabilities for
 * classifiers), a sample's outputs side by side in model.json's order, as
 * served (dl_model_served_dim). */
typedef struct record_out {
    const char          *id;
    const char          *model;
    int64_t              version;
    const dl_model_conf *conf;     /* labels */
    int64_t              n, out_dim;
    const float         *y;
    /* The record's inputs, n packed rows of in_dim floats (any alignment):
     * the lengths of per-token outputs (oip_out_length); NULL: max_length */
    const void          *x;
    int64_t              in_dim;
    const char          *topic;    /* the source record */
    int32_t              partition;
    int64_t              offset;
} record_out;

/* Appends the dlserve form to b, keyed on the model's outputs
 * (oip_model_outputs): a classifier's {"id","model","version","class",
 * "label","scores":[...],"source":{"topic","partition","offset"}}, any
 * other model's {"id","model","version","output","values":[...],"source"}
 * ("output" the tensor's name): of the model's first output; a model of
 * several outputs adds "outputs": {"name": values} for the others. A
 * per-token output's values are a list a position (of its sample's
 * length), a crf's its path's labels (its tags without labels). For n
 * > 1, "class", "label", "scores", "values" and each of "outputs" hold
 * one entry per sample. Values are the shortest text that
 * reads back as the same float (dl_fmt_float). No allocation but b's
 * growth, so a reused b costs none; false when out of memory (b->oom). */
bool record_format(const record_out *o, dl_sbuf *b);

/* Appends the Open Inference Protocol form to b: the InferenceResponse
 * HTTP answers (oip_write_infer, every output the model has) with
 * "parameters" {"source_topic","source_partition","source_offset"}; when
 * binary, every output's data as raw bytes after the JSON (the binary
 * tensor data extension). *json_len: the bytes of JSON appended (all of
 * them when not binary). Allocation and failure as record_format. */
bool record_format_oip(const record_out *o, bool binary, dl_sbuf *b, size_t *json_len);

/* record_format as a new string (*len bytes), NULL when out of memory. */
char *record_output(const record_out *o, size_t *len);

#endif /* DL_SERVE_RECORDS_H */
