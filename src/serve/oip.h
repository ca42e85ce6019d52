/* oip.h (private to serve/): the Open Inference Protocol v2 (KServe,
 * Triton) as pure functions: URL routing, infer-request parsing, input
 * scaling and the JSON answers. No I/O, no locks: every function here is
 * thread-safe and unit-tested on its own (tests/unit/test_oip.c). */
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
    OIP_ROUTE_REPO_INDEX,    /* POST /v2/repository/index */
    OIP_ROUTE_REPO_LOAD,     /* POST /v2/repository/models/{m}/load */
    OIP_ROUTE_REPO_UNLOAD,   /* POST /v2/repository/models/{m}/unload */
    OIP_ROUTE_METRICS,       /* GET  /metrics */
    OIP_ROUTE_STATUS,        /* GET  /status */
} oip_route_kind;

typedef struct oip_route {
    oip_route_kind kind;
    char           model[DL_NAME_MAX];   /* "" when the path names none */
    int64_t        version;              /* 0: none named (the newest) */
} oip_route;

/* Parses a decoded URL path strictly: no trailing or doubled slashes, model
 * names of 1..63 characters of [A-Za-z0-9._-] not starting with '.',
 * versions positive decimal integers without leading zeros. Anything else
 * is OIP_ROUTE_NONE. Never reads past the NUL; never writes past r. */
oip_route_kind oip_route_parse(const char *path, oip_route *r);

/* The methods a route answers ("GET, HEAD" or "POST"), for 405's Allow. */
const char *oip_route_allow(oip_route_kind kind);

/* True when `method` is one the route answers (HEAD goes with GET). */
bool oip_route_method_ok(oip_route_kind kind, const char *method);

/* ---- infer requests ----------------------------------------------------- */

/* Outputs a client may ask for (the "outputs" list of the request). */
enum {
    OIP_OUT_TENSOR = 1,      /* the model's output (probabilities), FP32 */
    OIP_OUT_LABEL  = 2,      /* "label": the top class's label, BYTES */
    OIP_OUT_CLASS  = 4,      /* "class": the top class's index, INT64 */
    OIP_OUT_ALL    = 7,
};

typedef struct oip_request {
    char    *id;                   /* new; NULL when the request had none */
    int64_t  batch;                /* samples */
    int      ndim;                 /* the request's shape, as sent */
    int64_t  shape[OIP_MAX_DIMS];
    float   *x;                    /* new: batch * in_dim RAW values (unscaled) */
    unsigned outputs;              /* OIP_OUT_* mask (all when not asked) */
} oip_request;

/* Parses an infer request body for a model whose samples have in_dim
 * values (conf: borrowed, for the sample shape, the output name and the
 * labels). Exactly one input; datatype "FP32" (numbers) or "UINT8"
 * (integers 0..255); data flat or nested to match the shape; shape
 * [B, ...] with in_dim values per sample, or any shape of in_dim values
 * in all (the sample shape alone: batch 1). On success *req holds new memory (oip_request_fini). On
 * failure *req is empty and DL_ERR_INVALID (answer 400) or DL_ERR_NOMEM
 * (500) comes back with err saying which key is wrong and why. */
dl_status oip_parse_infer(const char *body, size_t len, const dl_model_conf *conf,
                          int64_t in_dim, oip_request *req, dl_err *err);
void oip_request_fini(oip_request *req);

/* Applies the model's input scaling in place to n raw values, exactly as
 * the training data and `dlserve --predict` do: x = (raw * scale - mean) / std. */
void oip_scale(const dl_model_conf *conf, float *x, int64_t n);

/* ---- answers (each a new reference, NULL only when out of memory) --------- */

/* What an infer response reports. All pointers borrowed. */
typedef struct oip_result {
    const char          *model;
    int64_t              version;
    const char          *id;        /* echoed when non-NULL */
    const dl_model_conf *conf;      /* output name and labels */
    int64_t              batch, out_dim;
    const float         *y;         /* batch * out_dim probabilities */
    unsigned             outputs;   /* OIP_OUT_* mask */
} oip_result;

/* {"model_name","model_version","id"?,"outputs":[tensor, label, class]}
 * with the outputs the mask selects. "label" appears only for models
 * with labels. */
json_t *oip_infer_response(const oip_result *res);

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
 * codes. 400 invalid, 404 not found, 413 too large, 503 unavailable or
 * busy (retry), 500 for the server's own failures (memory, I/O, backend). */
int oip_http_code(dl_status st);

/* {"error": "<formatted message>"} */
json_t *oip_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Compact text of j with floats at 9 significant digits (enough to give
 * back every float exactly). New string (free), NULL when out of memory. */
char *oip_dump(const json_t *j);

#endif /* DL_SERVE_OIP_H */
