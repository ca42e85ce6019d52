/* oip.h (private to serve/): the Open Inference Protocol v2 (KServe,
 * Triton) as pure functions: URL routing, infer requests (JSON and the
 * binary tensor data extension) read without a JSON tree, and the answers.
 * No I/O, no locks: every function here is thread-safe and unit-tested on
 * its own (tests/unit/test_oip.c). Routing is in oip_route.c, request
 * scanning in oip_scan.c, answers in oip_answer.c. */
#ifndef DL_SERVE_OIP_H
#define DL_SERVE_OIP_H

#include "nn/dl_nn.h"

#include <jansson.h>

/* Most dimensions a request tensor may have: batch + DL_MAX_DIMS, with
 * room for shapes that split a sample differently from model.json. */
#define OIP_MAX_DIMS 8

/* ---- routing ------------------------------------------------------------ */

typedef enum oip_route_kind {
    OIP_ROUTE_NONE,          /* no such path: 404 */
    OIP_ROUTE_LIVE,          /* GET  /v2/health/live */
    OIP_ROUTE_READY,         /* GET  /v2/health/ready */
    OIP_ROUTE_SERVER,        /* GET  /v2 */
    OIP_ROUTE_MODEL,         /* GET  /v2/models/{m}[/versions/{v}] */
    OIP_ROUTE_MODEL_READY,   /* GET  /v2/models/{m}[/versions/{v}]/ready */
    OIP_ROUTE_INFER,         /* POST /v2/models/{m}[/versions/{v}]/infer */
    OIP_ROUTE_MODEL_STATS,   /* GET  /v2/models[/{m}[/versions/{v}]]/stats
                                (no model: every model's) */
    OIP_ROUTE_MODEL_CONFIG,  /* GET  /v2/models/{m}[/versions/{v}]/config */
    OIP_ROUTE_REPO_INDEX,    /* POST /v2/repository/index */
    OIP_ROUTE_REPO_LOAD,     /* POST /v2/repository/models/{m}/load */
    OIP_ROUTE_REPO_UNLOAD,   /* POST /v2/repository/models/{m}/unload */
    OIP_ROUTE_METRICS,       /* GET  /metrics */
    OIP_ROUTE_STATUS,        /* GET  /status */
    OIP_ROUTE_PAGE,          /* GET  / (the status page) */
    OIP_ROUTE_PAGE_FILE,     /* GET  /ui/{file} (its scripts and styles) */
    OIP_ROUTE_TRAINING,      /* GET  /status/training */
    OIP_ROUTE_HISTORY,       /* GET  /status/history */
    OIP_ROUTE_TRACE_SETTING, /* GET|POST /v2[/models/{m}]/trace/setting (model: r->model) */
    OIP_ROUTE_GENERATE,      /* POST /v2/models/{m}[/versions/{v}]/generate */
    OIP_ROUTE_GENERATE_STREAM, /* POST /v2/models/{m}[/versions/{v}]/generate_stream */
    OIP_ROUTE_COMPLETIONS,   /* POST /v1/completions (OpenAI's; the model in the body) */
    OIP_ROUTE_OPENAI_MODELS, /* GET  /v1/models (OpenAI's) */
} oip_route_kind;

typedef struct oip_route {
    oip_route_kind kind;
    char           model[DL_NAME_MAX];   /* "" when the path names none; the
                                            file name for OIP_ROUTE_PAGE_FILE */
    int64_t        version;              /* 0: none named (the newest) */
} oip_route;

/* Parses a decoded URL path strictly: no trailing or doubled slashes (but
 * "/" itself), model and file names of 1..63 characters of [A-Za-z0-9._-]
 * not starting with '.',
 * versions positive decimal integers without leading zeros. Anything else
 * is OIP_ROUTE_NONE. Never reads past the NUL; never writes past r. */
oip_route_kind oip_route_parse(const char *path, oip_route *r);

/* The methods a route answers ("GET, HEAD", "POST", or all three), for
 * 405's Allow. */
const char *oip_route_allow(oip_route_kind kind);

/* True when `method` is one the route answers (HEAD goes with GET). */
bool oip_route_method_ok(oip_route_kind kind, const char *method);

/* ---- infer requests -----------------------------------------------------
 *
 * A request is read in two steps, so that a caller that learns the model
 * from the request itself (a Kafka record's "model") reads it only once:
 *
 *   oip_scan_infer   the body alone: strict JSON (json_scan.h, no tree),
 *                    the inputs decoded straight into floats, the binary
 *                    tensor data extension's raw tensors, the outputs
 *                    asked for; needs no model.
 *   oip_check_infer  the scanned request against the model that serves it:
 *                    input and output names, the shape, the batch size.
 *
 * oip_parse_infer does both (HTTP knows the model from the URL). None
 * scales the inputs: x holds the values as sent. */

/* Outputs a client may ask for (the "outputs" list of the request). */
enum {
    OIP_OUT_TENSOR = 1,      /* the model's output (probabilities), FP32 */
    OIP_OUT_LABEL  = 2,      /* "label": the top class's label, BYTES */
    OIP_OUT_CLASS  = 4,      /* "class": the top class's index, INT64 */
    OIP_OUT_ALL    = 7,
};

/* Most entries a request's "outputs" may list, and most tensors a model
 * answers (a model's outputs, then "label" and "class"). */
#define OIP_MAX_OUTPUTS 16
/* Most entries of a request's "inputs" that are read. */
#define OIP_MAX_INPUTS 16

/* An input tensor's datatype: "FP32", or the integer types of ids (and
 * UINT8 images), every value held as a float (ids exact below 2^24); or
 * "BYTES", strings (a text input's), held as Triton's binary layout. */
typedef enum oip_dtype { OIP_FP32, OIP_UINT8, OIP_INT32, OIP_INT64, OIP_BYTES } oip_dtype;

/* The HTTP header of the binary tensor data extension: the byte length of
 * the JSON that starts a request or answer body, binary tensors after it. */
#define OIP_HEADER_JSON_LEN "Inference-Header-Content-Length"

/* A tensor name as a request gives it. */
typedef struct oip_name {
    char text[DL_NAME_MAX];  /* "" when absent; cut (at a UTF-8 boundary) when longer */
    bool given;
    bool too_long;           /* longer than DL_NAME_MAX - 1 bytes: names no tensor */
} oip_name;

/* One entry of the request's "outputs" list. */
typedef struct oip_asked {
    oip_name name;
    int      binary;         /* parameters.binary_data: 1 or 0; -1 when not given */
    int64_t  classification; /* parameters.classification: the top classes asked
                                (Triton's classification extension); 0: none */
    int      labels;         /* parameters.labels: 1 or 0; -1 when not given */
} oip_asked;

/* One output of the answer, in answer order. */
typedef struct oip_output {
    unsigned kind;           /* OIP_OUT_TENSOR, OIP_OUT_LABEL or OIP_OUT_CLASS */
    int      index;          /* OIP_OUT_TENSOR: which of the model's outputs */
    bool     binary;         /* sent as raw bytes after the JSON */
    /* OIP_OUT_TENSOR only: > 0 answers it as Triton's classification
     * extension does, the topk highest scores of each sample (of each
     * position of a per-token output) as BYTES "score:index[:label]",
     * shape [batch, topk] ([batch, len, topk]); 0: the tensor itself */
    int64_t  topk;
    /* OIP_OUT_TENSOR of a classifier or crf output with labels: answered
     * as its label strings instead, BYTES [batch] (per-token: [batch,
     * len]): the top class's, or the crf path's tags' */
    bool     labels;
} oip_output;

/* What was wrong with a request that oip_scan_infer refused, for callers
 * that tell faults apart (Kafka's dead-letter kinds); HTTP answers 400 to
 * each. */
typedef enum oip_fault {
    OIP_FAULT_NONE,          /* no fault of the request's (or out of memory) */
    OIP_FAULT_SYNTAX,        /* not JSON, or a JSON length past the body */
    OIP_FAULT_ENVELOPE,      /* JSON, but not an object, or "id", "model",
                                "model_version", "parameters", "inputs" or
                                "outputs" not of their type */
    OIP_FAULT_TENSOR,        /* an input (name, datatype, shape, data, binary
                                data and sizes) or an entry of "outputs" */
} oip_fault;

/* An entry of "inputs" after the first (which the request holds itself). */
typedef struct oip_input {
    oip_name   name;
    oip_dtype  dtype;
    bool       binary_in;
    int        ndim;
    int64_t    shape[OIP_MAX_DIMS];
    int64_t    count;              /* values in x (strings in bytes for BYTES) */
    float     *x;                  /* new: count RAW values; NULL for BYTES */
    char      *bytes;              /* new, BYTES: count strings, each a 4-byte
                                      little-endian length then its bytes */
    size_t     nbytes;
} oip_input;

typedef struct oip_request {
    /* ---- filled by oip_scan_infer ---- */
    char      *id;                 /* new: "id", a string or an integer's digits;
                                      NULL when the request has none */
    bool       id_integer;         /* "id" was a JSON integer (the protocol wants a
                                      string: oip_parse_infer refuses it) */
    char      *model;              /* new: "model" (Kafka records name their
                                      model); NULL when absent */
    int64_t    model_version;      /* "model_version", an integer >= 0 or a string
                                      of digits; 0 when absent (the newest) */
    int        ninputs;            /* entries of "inputs"; the first OIP_MAX_INPUTS
                                      are read */
    oip_name   input;              /* inputs[0].name */
    oip_dtype  dtype;              /* inputs[0].datatype */
    bool       uint8;              /* inputs[0].datatype "UINT8" */
    bool       binary_in;          /* inputs[0] came as binary data */
    int        ndim;               /* inputs[0].shape, as sent */
    int64_t    shape[OIP_MAX_DIMS];
    int64_t    count;              /* values in x: the product of the shape (for
                                      flat: the values of "data"; for BYTES the
                                      strings in bytes) */
    float     *x;                  /* new: count RAW values (unscaled); after
                                      oip_check_infer for a model of several
                                      inputs or a sequence input, batch rows of
                                      every input's values side by side, each
                                      sequence packed (dl_input_width; count
                                      updated) */
    char      *bytes;              /* new, inputs[0] of BYTES: its strings, each
                                      a 4-byte little-endian length then its
                                      bytes (Triton's binary layout) */
    size_t     nbytes;
    oip_input *more;               /* new: inputs[1..ninputs), read */
    bool       flat;               /* oip_scan_record only: the record's values
                                      came as "data", a flat array (no "inputs":
                                      no name, datatype or shape) */
    int        nasked;             /* entries of "outputs" (0: every output) */
    oip_asked  asked[OIP_MAX_OUTPUTS];
    bool       binary_out;         /* parameters.binary_data_output */
    int64_t    timeout_us;         /* parameters.timeout: microseconds it may queue
                                      (0: the server's default) */
    int64_t    priority;           /* parameters.priority: Triton's priority level,
                                      1 the highest (0: the model's default) */
    const char *sequence;          /* the first of parameters.sequence_id,
                                      sequence_start, sequence_end given (static
                                      text; NULL: none): oip_check_infer refuses
                                      it, no model batches sequences */
    oip_fault  fault;              /* why the scan failed; OIP_FAULT_NONE on success */
    /* ---- filled by oip_check_infer ---- */
    int64_t    batch;              /* samples */
    unsigned   outputs;            /* OIP_OUT_* mask of the answer's outputs */
    int        nout;               /* the answer's outputs, in order */
    oip_output out[OIP_MAX_OUTPUTS];
} oip_request;

/* Reads an infer request without its model. body[0..json_len) is the JSON
 * request; body[json_len..len) the binary tensor data extension's raw
 * tensors (little-endian, in input order), so a body without them has
 * json_len == len (an HTTP request without Inference-Header-Content-Length).
 *
 * Checks all the request says on its own, key by key as docs/serving.md
 * ("What an infer request may hold") lists it; other keys are skipped
 * (checked as JSON only).
 *
 * On success req holds new memory (oip_request_fini). On failure:
 * DL_ERR_INVALID (answer 400) with err naming the key at fault and why,
 * and req->fault its kind; or DL_ERR_NOMEM. req then holds nothing but
 * req->id, kept when the JSON is well formed and the id valid (so that a
 * dead letter can name it): oip_request_fini it either way. Never reads
 * outside body[0..len) (body need not be NUL-terminated; NULL with len 0
 * is an empty body). Thread-safe. */
dl_status oip_scan_infer(const char *body, size_t len, size_t json_len, oip_request *req,
                         dl_err *err);

/* oip_scan_infer for a Kafka record, which may also take the form
 * {"id", "model"?, "model_version"?, "data": [numbers]}: a flat array of
 * numbers, each finite as float32, read into req->x (req->count values,
 * req->flat set; whole samples are the caller's check, as oip_check_infer
 * does not apply to it). A record with "inputs" is read as oip_scan_infer
 * reads a request ("data" beside it is then ignored, unless it came first
 * and was refused), and "id" may be a string or an integer. Refusals
 * beyond oip_scan_infer's: neither "inputs" nor "data" (ENVELOPE, "the
 * record has neither 'inputs' nor 'data'"); "data" not an array or an
 * element not a finite float32 number, "data[i] is not a number" / "is
 * not a finite float" (TENSOR); binary data after the JSON of a "data"
 * record (TENSOR). Memory, errors and thread-safety as oip_scan_infer. */
dl_status oip_scan_record(const char *body, size_t len, size_t json_len, oip_request *req,
                          dl_err *err);

/* Checks a scanned request against the model that serves it (conf:
 * borrowed, for the names, the sample shapes, the datatypes, the
 * embeddings' sizes and the labels; tok: the tokenizer of each model
 * input, NULL but for BYTES inputs (tok itself may be NULL for a model
 * without any); in_dim floats a sample).
 *
 * A model of one input: exactly one input, named as the model's input; a
 * shape [B, ...] with in_dim values per sample, or of in_dim values in all
 * (the sample shape alone: batch 1). A model of several inputs: each of
 * its inputs once by name (in any order), none other; each input's shape
 * fits its own sample shape as above, and all agree on B; req->x then
 * holds each sample's inputs side by side, in model.json's order
 * (req->count = B * in_dim). Either way each input's datatype suits it
 * (FP32 or UINT8 for a float input, UINT8, INT32 or INT64 for ids, BYTES
 * for text) and each id is an integer in [0, oip_id_bound).
 *
 * Sequences: a sequence input takes [B, len] ([B, len, D...] for a
 * position of several values), 1 <= len <= max_length, and a text input
 * [B] or [B, 1] strings, tokenized by its tokenizer into 1 to max_length
 * ids; each sample is then packed (its length, then max_length positions:
 * dl_seq_pack) in req->x as for several inputs. DL_ERR_TOO_LARGE when the
 * packed inputs would pass OIP_MAX_PACKED_BYTES.
 *
 * Outputs: names the model has. Sets req->batch and the answer's outputs
 * (outputs, nout, out): those listed, in the order listed (a name listed
 * twice answers once), or else oip_default_outputs; each binary when its
 * binary_data says so, else when binary_data_output does. A
 * classification is asked of a classifier's tensor only (softmax
 * cross-entropy, per-token too, or next_token): the answer's topk; of a
 * crf's, 1 alone, it asks for its labels. "labels" (true) is asked of a
 * classifier's or crf's tensor with labels: the answer's labels.
 * DL_ERR_INVALID with err naming what does not fit (the input or output
 * by name); DL_ERR_NOMEM; req keeps its values either way. Thread-safe. */
dl_status oip_check_infer(oip_request *req, const dl_model_conf *conf,
                          dl_tokenizer *const *tok, int64_t in_dim, dl_err *err);

/* Most bytes a request's inputs may take once packed: packing pads each
 * sequence to max_length, so a request of many short samples may take far
 * more than it sent. */
#define OIP_MAX_PACKED_BYTES ((int64_t)256 << 20)

/* The ids model input k (an integer input) takes: [0, bound), bound the
 * fewest rows of the embeddings that read it (at most 256 for UINT8, 2^24,
 * where floats stop holding every integer, for the others). */
int64_t oip_id_bound(const dl_model_conf *conf, int k);

/* Checks the ids of n samples of float32 values (any alignment) held side
 * by side (in_dim values a sample, each input's in model.json's order,
 * sequences packed: their length, then max_length positions): the "data"
 * and raw float32 forms of Kafka records, which oip_check_infer does not
 * see. Each sequence's length must be a whole number from 1 to its
 * max_length, each id (padding included) in [0, oip_id_bound).
 * DL_ERR_INVALID with err naming the input otherwise. */
dl_status oip_check_ids(const dl_model_conf *conf, const void *x, int64_t n, dl_err *err);

/* The outputs an answer holds when the request lists none, into out (room
 * for OIP_MAX_OUTPUTS); returns their count: every model output's tensor
 * in model.json's order, then, for a model of one output or whose first
 * output is a classifier, "label" (with labels) and "class". */
int oip_default_outputs(const dl_model_conf *conf, bool binary, oip_output *out);

/* Checks the classifications a checked request asks for against the
 * classes of the output each is asked of: at most as many as it has
 * (out_dim for a model of one output). DL_ERR_INVALID with err naming
 * the output otherwise. Thread-safe. */
dl_status oip_check_classes(const oip_request *req, const dl_model_conf *conf, int64_t out_dim,
                            dl_err *err);

/* oip_scan_infer then oip_check_infer, for HTTP, with the protocol's rule
 * that an "id" is a string. On failure *req holds nothing but req->fault
 * (and nothing needs freeing). */
dl_status oip_parse_infer(const char *body, size_t len, size_t json_len,
                          const dl_model_conf *conf, dl_tokenizer *const *tok, int64_t in_dim,
                          oip_request *req, dl_err *err);

/* Frees what a request holds and empties it; a zeroed request is empty. */
void oip_request_fini(oip_request *req);

/* The JSON length of a body of len bytes from the value of an
 * Inference-Header-Content-Length header (NULL when absent: len): a
 * decimal byte count, at most len. DL_ERR_INVALID with err naming the
 * header otherwise. */
dl_status oip_json_len(const char *header, size_t len, size_t *json_len, dl_err *err);


/* ---- answers ------------------------------------------------------------ */

/* One entry of an answer's "parameters": a string when str is non-NULL,
 * else the integer num. Borrowed. */
typedef struct oip_param {
    const char *name;
    const char *str;
    int64_t     num;
} oip_param;

/* The outputs a model has, as an OIP_OUT_* mask: its tensor, and for a
 * classifier (softmax cross-entropy) of a class a sample "class" and,
 * with labels, "label". */
unsigned oip_model_outputs(const dl_model_conf *conf);

/* The positions sample i answers for model output k: for a per-token
 * output (max_length > 0), the length of the sequence input it runs along,
 * read from the sample's packed row of x (in_dim floats a row, any
 * alignment; NULL: max_length); 0 for any other output. */
int64_t oip_out_length(const dl_model_conf *conf, int k, const void *x, int64_t in_dim,
                       int64_t i);

/* What an infer response reports. All pointers borrowed. */
typedef struct oip_result {
    const char          *model;
    int64_t              version;
    const char          *id;        /* echoed when non-NULL */
    const dl_model_conf *conf;      /* output name and labels */
    int64_t              batch, out_dim;
    const float         *y;         /* batch * out_dim values: a sample's outputs
                                       side by side, in model.json's order, as
                                       served (dl_model_served_dim) */
    /* The request's inputs as packed rows (in_dim floats a sample, any
     * alignment), for the lengths per-token outputs answer
     * (oip_out_length): [batch, len, C] with len the longest of the batch,
     * a shorter sample's positions past its own length 0 (FP32), -1 (a
     * crf's INT64 tags) or "" (BYTES). NULL: max_length positions. */
    const void          *x;
    int64_t              in_dim;
    /* The outputs: out[0..nout) in that order (oip_check_infer's), or when
     * nout is 0, those of oip_default_outputs whose kinds are in the
     * OIP_OUT_* mask `outputs` (OIP_OUT_TENSOR: every model output), all
     * as JSON (all binary when `binary`). */
    int                  nout;
    const oip_output    *out;
    unsigned             outputs;
    bool                 binary;
    /* The answer's "parameters" (nparams 0: none), in this order. */
    int                  nparams;
    const oip_param     *params;
} oip_result;

/* Appends the infer answer to *b, written directly (no JSON tree):
 * {"model_name","model_version","id"?,"parameters"?,"outputs":[{"name",
 * "datatype","shape","data"}...]} with scores as dl_fmt_float writes them (the
 * shortest text that reads back as the same float; null when not
 * finite). A binary output has "parameters":{"binary_data_size":bytes}
 * instead of "data", and its bytes follow the JSON, in output order:
 * FP32 little-endian float32, INT64 little-endian int64, BYTES each a
 * 4-byte little-endian length then the bytes. *json_len: the bytes of
 * JSON appended (all of them when no output is binary). DL_ERR_NOMEM when
 * out of memory (b->oom). Thread-safe. */
dl_status oip_write_infer(const oip_result *res, dl_sbuf *b, size_t *json_len, dl_err *err);

/* The other answers, as jansson values (each a new reference, NULL only
 * when out of memory): they are not on the hot path. */

/* Model metadata: {"name","versions","platform","inputs","outputs"}.
 * versions: borrowed array of version strings. */
json_t *oip_model_metadata(const dl_model_conf *conf, int64_t out_dim,
                           json_t *versions);

/* The served versions of `name` in registry_status() output (borrowed),
 * ascending, as strings ["1","2"]; NULL when the model is not listed. */
json_t *oip_versions_of(json_t *status, const char *name);

/* /v2/repository/index from registry_status() output (borrowed):
 * [{"name","version","state","reason"}], version = newest served or "". */
json_t *oip_repository_index(json_t *status);

/* The HTTP code that answers a status: the one table from error kinds to
 * codes. 400 invalid, 404 not found, 413 too large, 503 unavailable,
 * busy or timed out in the queue (retry), 500 for the server's own failures (memory, I/O, backend). */
int oip_http_code(dl_status st);

/* {"error": "<formatted message>"} */
json_t *oip_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Compact text of j with floats at 9 significant digits (enough to give
 * back every float exactly). New string (free), NULL when out of memory. */
char *oip_dump(const json_t *j);

#endif /* DL_SERVE_OIP_H */
