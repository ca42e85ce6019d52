/* dataset.c: loads datasets into host memory: IDX files (MNIST layout,
 * gzip'd or plain), CSV files, and a data folder holding either. */
#define _POSIX_C_SOURCE 200809L
#include "data/dl_data.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_TYPE_U8      0x08

/* n * dim floats must stay addressable and fit int64 arithmetic. */
#define MAX_VALUES (INT64_MAX / (int64_t)sizeof(float))

enum { PATH_CAP = 4096 };

static const dl_scaling identity = {1.0f, 0.0f, 1.0f};

/* ---- shared helpers ------------------------------------------------- */

static dl_status check_scaling(const dl_scaling *sc, dl_err *err)
{
    if (sc->std > 0.0f && isfinite(sc->std) && isfinite(sc->scale) &&
        isfinite(sc->mean))
        return DL_OK;
    return dl_err_set(err, DL_ERR_INVALID,
                      "scaling {scale %g, mean %g, std %g}: std must be > 0 "
                      "and all finite", (double)sc->scale, (double)sc->mean,
                      (double)sc->std);
}

/* Allocates a dataset of n samples of the given shape. The caller has
 * checked that n * prod(shape) <= MAX_VALUES. *out is new. */
static dl_status dataset_new(int64_t n, int ndim, const int64_t *shape,
                             bool labels, dl_dataset **out, dl_err *err)
{
    *out = NULL;
    dl_dataset *ds = calloc(1, sizeof(*ds));
    if (!ds)
        return dl_err_set(err, DL_ERR_NOMEM, "dataset header");
    ds->n = n;
    ds->ndim = ndim;
    ds->dim = 1;
    for (int i = 0; i < ndim; i++) {
        ds->shape[i] = shape[i];
        ds->dim *= shape[i];
    }
    ds->x = malloc((size_t)n * (size_t)ds->dim * sizeof(float));
    ds->y = labels ? malloc((size_t)n * sizeof(int32_t)) : NULL;
    if (!ds->x || (labels && !ds->y)) {
        int64_t dim = ds->dim;
        dl_dataset_free(ds);
        return dl_err_set(err, DL_ERR_NOMEM, "dataset of %lld x %lld floats",
                          (long long)n, (long long)dim);
    }
    *out = ds;
    return DL_OK;
}

void dl_dataset_truncate(dl_dataset *ds, int64_t n)
{
    if (!ds || n <= 0 || n >= ds->n)
        return;
    ds->n = n;
    /* Give the tail back; on failure the larger block stays valid. */
    float *x = realloc(ds->x, (size_t)n * (size_t)ds->dim * sizeof(float));
    if (x)
        ds->x = x;
    if (ds->y) {
        int32_t *y = realloc(ds->y, (size_t)n * sizeof(int32_t));
        if (y)
            ds->y = y;
    }
    if (ds->t && ds->tdim) {   /* realloc to 0 bytes would free the block */
        float *t = realloc(ds->t, (size_t)(n * ds->tdim) * sizeof(float));
        if (t)
            ds->t = t;
    }
}

void dl_dataset_free(dl_dataset *ds)
{
    if (!ds)
        return;
    free(ds->x);
    free(ds->y);
    free(ds->t);
    free(ds);
}

/* ---- IDX ------------------------------------------------------------ */

/* A parsed IDX header; dims[0] is the sample count. */
typedef struct idx_header {
    int     ndims;
    int64_t dims[4];
    size_t  offset;          /* first data byte */
} idx_header;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* zlib's messages start with the path it was opened with; drop it. */
static const char *gz_message(gzFile gz, const char *path, int *code)
{
    const char *msg = gzerror(gz, code);
    size_t plen = strlen(path);
    if (strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
        msg += plen + 2;
    return msg;
}

static dl_status gz_failure(gzFile gz, const char *path, dl_err *err)
{
    int code = Z_OK;
    const char *msg = gz_message(gz, path, &code);
    if (code == Z_MEM_ERROR)
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    if (code == Z_ERRNO)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
    if (code == Z_BUF_ERROR)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: truncated gzip stream (%s)", path, msg);
    return dl_err_set(err, DL_ERR_INVALID, "%s: corrupt gzip stream (%s)",
                      path, msg);
}

/* Reads a whole file through zlib, which inflates gzip content (found by
 * its 1f 8b magic) and passes anything else through, so both forms load
 * alike. The buffer grows with the data actually read, never with sizes a
 * header claims. *out is new. */
static dl_status read_maybe_gz(const char *path, unsigned char **out,
                               size_t *len, dl_err *err)
{
    *out = NULL;
    *len = 0;
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path,
                          errno ? strerror(errno) : "cannot open");
    gzbuffer(gz, 1 << 17);
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    dl_status st = DL_OK;
    if (!buf)
        st = dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    while (st == DL_OK) {
        if (n == cap) {
            unsigned char *nb =
                cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                st = dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
            cap *= 2;
        }
        /* gzread takes an unsigned count and returns an int. */
        size_t want = cap - n < (1u << 30) ? cap - n : (1u << 30);
        int got = gzread(gz, buf + n, (unsigned)want);
        if (got < 0)
            st = gz_failure(gz, path, err);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    /* A stream cut short reads as a clean end; zlib flags it only here. */
    int code = Z_OK;
    if (st == DL_OK)
        gz_message(gz, path, &code);
    if (st == DL_OK && code != Z_OK)
        st = gz_failure(gz, path, err);
    int rc = gzclose_r(gz);
    if (st == DL_OK && rc == Z_BUF_ERROR)
        st = dl_err_set(err, DL_ERR_INVALID,
                        "%s: truncated gzip stream (unexpected end of file)",
                        path);
    if (st != DL_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *len = n;
    return DL_OK;
}

/* Checks the magic, the dims and that the data is exactly as long as the
 * dims promise. Images take 1-3 sample dims after the count, labels none. */
static dl_status parse_idx(const char *path, const unsigned char *buf,
                           size_t len, bool images, idx_header *h, dl_err *err)
{
    if (len < 4)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: file too short for an IDX header (%zu bytes)",
                          path, len);
    int nd = buf[3];
    bool ok = buf[0] == 0 && buf[1] == 0 && buf[2] == IDX_TYPE_U8 &&
              (images ? nd >= 2 && nd <= 4 : nd == 1);
    if (!ok)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: bad magic 0x%08x (expected 0x%08x for u8 %s)",
                          path, (unsigned)be32(buf),
                          images ? IDX_MAGIC_IMAGES : IDX_MAGIC_LABELS,
                          images ? "images" : "labels");
    h->ndims = nd;
    h->offset = 4 + 4 * (size_t)nd;
    if (len < h->offset)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: file too short for an IDX header with %d dims "
                          "(%zu bytes)", path, nd, len);
    int64_t values = 1;
    for (int i = 0; i < nd; i++) {
        int64_t d = be32(buf + 4 + 4 * i);
        if (d == 0)
            return dl_err_set(err, DL_ERR_INVALID, "%s: dimension %d is zero",
                              path, i);
        if (values > MAX_VALUES / d)
            return dl_err_set(err, DL_ERR_INVALID,
                              "%s: absurd dimensions (product overflows at "
                              "dimension %d = %lld)", path, i, (long long)d);
        values *= d;
        h->dims[i] = d;
    }
    size_t have = len - h->offset;
    if ((uint64_t)values > have)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: truncated data: header promises %lld bytes, "
                          "found %zu", path, (long long)values, have);
    if ((uint64_t)values < have)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s: %llu trailing bytes after the %lld data bytes "
                          "the header promises", path,
                          (unsigned long long)(have - (uint64_t)values),
                          (long long)values);
    return DL_OK;
}

/* Sample shape: one dim stays {d}, HxW becomes {1,H,W}, CxHxW stays. */
static int idx_sample_shape(const idx_header *h, int64_t *shape)
{
    int k = h->ndims - 1;
    if (k == 2) {
        shape[0] = 1;
        shape[1] = h->dims[1];
        shape[2] = h->dims[2];
        return 3;
    }
    for (int i = 0; i < k; i++)
        shape[i] = h->dims[1 + i];
    return k;
}

/* Builds the dataset from validated buffers; lab may be NULL. */
static dl_status idx_to_dataset(const idx_header *ih, const unsigned char *img,
                                const unsigned char *lab, const idx_header *lh,
                                const dl_scaling *sc, dl_dataset **out,
                                dl_err *err)
{
    int64_t shape[DL_DATA_MAX_DIMS];
    int ndim = idx_sample_shape(ih, shape);
    dl_dataset *ds;
    dl_status st = dataset_new(ih->dims[0], ndim, shape, lab != NULL, &ds, err);
    if (st != DL_OK)
        return st;
    /* u8 has 256 values: scale each once, then look them up. */
    float lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (float)v;
    dl_scaling_apply(sc, lut, lut, 256);
    const unsigned char *px = img + ih->offset;
    size_t total = (size_t)ds->n * (size_t)ds->dim;
    for (size_t i = 0; i < total; i++)
        ds->x[i] = lut[px[i]];
    for (int64_t i = 0; lab && i < ds->n; i++)
        ds->y[i] = lab[lh->offset + (size_t)i];
    *out = ds;
    return DL_OK;
}

dl_status dl_dataset_load_idx(const char *images_path, const char *labels_path,
                              const dl_scaling *sc, dl_dataset **out,
                              dl_err *err)
{
    *out = NULL;
    if (!sc)
        sc = &identity;
    dl_status st = check_scaling(sc, err);
    if (st != DL_OK)
        return st;
    unsigned char *img = NULL, *lab = NULL;
    size_t ilen = 0, llen = 0;
    idx_header ih = {0}, lh = {0};
    st = read_maybe_gz(images_path, &img, &ilen, err);
    if (st == DL_OK)
        st = parse_idx(images_path, img, ilen, true, &ih, err);
    if (st == DL_OK && labels_path) {
        st = read_maybe_gz(labels_path, &lab, &llen, err);
        if (st == DL_OK)
            st = parse_idx(labels_path, lab, llen, false, &lh, err);
        if (st == DL_OK && lh.dims[0] != ih.dims[0])
            st = dl_err_set(err, DL_ERR_INVALID,
                            "%s: count mismatch: %lld labels for %lld images "
                            "in %s", labels_path, (long long)lh.dims[0],
                            (long long)ih.dims[0], images_path);
    }
    if (st == DL_OK)
        st = idx_to_dataset(&ih, img, lab, &lh, sc, out, err);
    free(img);
    free(lab);
    return st;
}

/* ---- CSV ------------------------------------------------------------ */

typedef struct csv_ctx {
    const char          *path;
    int64_t              dim;
    bool                 has_label;
    const dl_scaling    *sc;
    dl_dataset          *ds;
    const dl_model_conf *conf;         /* a graph model's layout, or NULL */
    bool                 targets;      /* with conf: lines start with targets */
} csv_ctx;

/* Up to 9 digits with an optional sign: exact in a double, and by far the
 * most common field (pixel values, labels), so strtod is skipped. */
static bool parse_int_fast(const char *p, const char *end, double *v)
{
    bool neg = false;
    if (p < end && (*p == '-' || *p == '+'))
        neg = *p++ == '-';
    if (p == end || end - p > 9)
        return false;
    int64_t acc = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        acc = acc * 10 + (*p - '0');
    }
    *v = neg ? -(double)acc : (double)acc;
    return true;
}

/* Parses the field [p, end) (end is its ',' or the line end) as a finite
 * number. strtod never runs past end: that is a separator, a blank or a
 * NUL, and p starts on a non-blank. Uses the C locale's decimal point. */
static bool parse_number(const char *p, const char *end, double *v)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (p == end)
        return false;
    if (parse_int_fast(p, end, v))
        return true;
    char *stop;
    double d = strtod(p, &stop);
    if (stop != end || !isfinite(d))
        return false;
    *v = d;
    return true;
}

/* How much of a bad field an error message quotes. */
static int shown(const char *p, const char *fe)
{
    return fe - p < 24 ? (int)(fe - p) : 24;
}

static const char *field_end(const char *p, const char *end)
{
    const char *c = memchr(p, ',', (size_t)(end - p));
    return c ? c : end;
}

static int64_t count_fields(const char *p, const char *end)
{
    int64_t n = 1;
    while ((p = memchr(p, ',', (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

static bool is_blank(const char *p, const char *end)
{
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t')
            return false;
    return true;
}

static bool is_header(const char *p, const char *end)
{
    double v;
    return !parse_number(p, field_end(p, end), &v);
}

/* Whether v fits the input's datatype: any number for FP32, else a
 * whole number in the type's range and below 2^24 (exact as a float). */
static bool fits_input(const dl_input_conf *in, double v)
{
    double lo = in->dtype == DL_IN_UINT8 ? 0 : -16777216.0;
    double hi = in->dtype == DL_IN_UINT8 ? 255 : 16777216.0;
    return in->dtype == DL_IN_FP32 || (v == floor(v) && v >= lo && v <= hi);
}

/* A graph model's target columns from *p on (field numbers from *f). */
static dl_status parse_targets(const csv_ctx *c, const char **p, const char *end,
                               int64_t lineno, int64_t *f, float *t, dl_err *err)
{
    const dl_model_conf *m = c->conf;
    for (int k = 0; k < m->noutputs; k++)
        for (int64_t j = 0; j < m->outputs[k].tcols; j++, (*f)++) {
            const char *fe = field_end(*p, end);
            double v;
            bool cls = m->outputs[k].loss == DL_LOSS_XENT, ok = parse_number(*p, fe, &v);
            if (!ok || (cls && (v < 0 || v >= (double)m->outputs[k].dim || v != floor(v))))
                return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: field %lld (output '%s'): "
                                  "bad %s '%.*s'", c->path, (long long)lineno, (long long)*f + 1,
                                  m->outputs[k].name, cls ? "class" : "target",
                                  shown(*p, fe), *p);
            *t++ = (float)v;
            *p = fe + 1;
        }
    return DL_OK;
}

/* A graph model's input values from *p on, scaled (FP32) or checked (ids). */
static dl_status parse_inputs(const csv_ctx *c, const char **p, const char *end,
                              int64_t lineno, int64_t *f, float *x, dl_err *err)
{
    const dl_model_conf *m = c->conf;
    for (int k = 0; k < m->ninputs; k++) {
        const dl_input_conf *in = &m->inputs[k];
        for (int64_t j = 0; j < in->dim; j++, (*f)++) {
            const char *fe = field_end(*p, end);
            double v;
            if (!parse_number(*p, fe, &v) || !fits_input(in, v))
                return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: field %lld (input '%s') is "
                                  "not %s: '%.*s'", c->path, (long long)lineno,
                                  (long long)*f + 1, in->name,
                                  in->dtype == DL_IN_FP32 ? "a number" : "an id",
                                  shown(*p, fe), *p);
            x[j] = (float)v;
            *p = fe + 1;
        }
        if (in->dtype == DL_IN_FP32)
            dl_scaling_apply(&in->sc, x, x, in->dim);
        x += in->dim;
    }
    return DL_OK;
}

/* A graph model's line: targets, then each input's values. */
static dl_status parse_model_line(const csv_ctx *c, const char *p, const char *end,
                                  int64_t lineno, int64_t row, dl_err *err)
{
    int64_t td = c->ds->tdim, want = td + c->dim, found = count_fields(p, end), f = 0;
    if (found != want && !td)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: expected %lld fields (the inputs), "
                          "found %lld", c->path, (long long)lineno, (long long)want,
                          (long long)found);
    if (found != want)
        return dl_err_set(err, DL_ERR_INVALID, "%s:%lld: expected %lld fields (%lld targets, "
                          "%lld inputs), found %lld", c->path, (long long)lineno,
                          (long long)want, (long long)td, (long long)c->dim, (long long)found);
    dl_status st = td ? parse_targets(c, &p, end, lineno, &f, c->ds->t + row * td, err) : DL_OK;
    if (st == DL_OK)
        st = parse_inputs(c, &p, end, lineno, &f, c->ds->x + row * c->dim, err);
    return st;
}

/* Parses one sample line [p, end) (no line terminator) into row `row`. */
static dl_status parse_line(const csv_ctx *c, const char *p, const char *end,
                            int64_t lineno, int64_t row, dl_err *err)
{
    if (c->conf)
        return parse_model_line(c, p, end, lineno, row, err);
    int64_t want = c->dim + (c->has_label ? 1 : 0);
    int64_t found = count_fields(p, end);
    if (found != want)
        return dl_err_set(err, DL_ERR_INVALID,
                          "%s:%lld: expected %lld fields, found %lld", c->path,
                          (long long)lineno, (long long)want, (long long)found);
    float *x = c->ds->x + row * c->dim;
    for (int64_t i = 0; i < want; i++) {
        const char *fe = field_end(p, end);
        double v;
        bool ok = parse_number(p, fe, &v);
        bool label = c->has_label && i == 0;
        if (label && (!ok || v < 0 || v > INT32_MAX || v != floor(v)))
            return dl_err_set(err, DL_ERR_INVALID,
                              "%s:%lld: bad label '%.*s' (expected a "
                              "non-negative integer)", c->path,
                              (long long)lineno, shown(p, fe), p);
        if (!ok)
            return dl_err_set(err, DL_ERR_INVALID,
                              "%s:%lld: field %lld is not a number: '%.*s'",
                              c->path, (long long)lineno, (long long)i + 1,
                              shown(p, fe), p);
        if (label)
            c->ds->y[row] = (int32_t)v;
        else
            *x++ = (float)v;
        p = fe + 1;
    }
    dl_scaling_apply(c->sc, c->ds->x + row * c->dim, c->ds->x + row * c->dim, c->dim);
    return DL_OK;
}

/* Walks the lines; blank lines may only trail. Returns the sample count. */
static dl_status parse_csv(const csv_ctx *c, const char *buf, size_t len,
                           int64_t *nrows, dl_err *err)
{
    const char *p = buf, *end = buf + len;
    int64_t lineno = 0, row = 0, blank_at = 0;
    for (; p < end; lineno++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        if (!eol)
            eol = end;
        if (eol > p && eol[-1] == '\r')
            eol--;
        if (is_blank(p, eol)) {
            if (!blank_at)
                blank_at = lineno + 1;
        } else if (blank_at) {
            return dl_err_set(err, DL_ERR_INVALID,
                              "%s:%lld: blank line inside the data",
                              c->path, (long long)blank_at);
        } else if (!(lineno == 0 && !c->conf && is_header(p, eol))) {
            dl_status st = parse_line(c, p, eol, lineno + 1, row++, err);
            if (st != DL_OK)
                return st;
        }
        p = next;
    }
    *nrows = row;
    if (row == 0)
        return dl_err_set(err, DL_ERR_INVALID, "%s: no samples",
                          c->path);
    return DL_OK;
}

static int64_t count_lines(const char *p, size_t len)
{
    int64_t n = 1;
    const char *end = p + len;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

/* Parses text[0..len), NUL-terminated at text[len]: strtod stops there. */
static dl_status csv_parse_text(const char *text, size_t len, const char *what,
                                int64_t dim, bool has_label, const dl_scaling *sc,
                                const dl_model_conf *conf, bool targets, dl_dataset **out,
                                dl_err *err)
{
    /* Every line is at most one sample; a sample needs >= 2 chars a field. */
    int64_t cap = count_lines(text, len);
    int64_t by_size = (int64_t)(len / (size_t)(2 * dim)) + 1;
    cap = cap < by_size ? cap : by_size;
    csv_ctx c = {what, dim, has_label, sc, NULL, conf, targets};
    int64_t n = 0;
    dl_status st = DL_OK;
    if (cap > MAX_VALUES / dim)
        st = dl_err_set(err, DL_ERR_NOMEM, "%s: too large", what);
    if (st == DL_OK)
        st = dataset_new(cap, 1, &dim, has_label, &c.ds, err);
    if (st == DL_OK && conf && targets) {
        for (int k = 0; k < conf->noutputs; k++)
            c.ds->tdim += conf->outputs[k].tcols;
        if (!(c.ds->t = malloc((size_t)(cap * c.ds->tdim) * sizeof(float))))
            st = dl_err_set(err, DL_ERR_NOMEM, "%s: targets", what);
    }
    if (st == DL_OK)
        st = parse_csv(&c, text, len, &n, err);
    if (st != DL_OK) {
        dl_dataset_free(c.ds);
        return st;
    }
    dl_dataset_truncate(c.ds, n);
    *out = c.ds;
    return DL_OK;
}

/* The arguments both CSV entry points check. */
static dl_status csv_args(const char *what, int64_t dim, const dl_scaling *sc, dl_err *err)
{
    if (dim < 1 || dim > MAX_VALUES)
        return dl_err_set(err, DL_ERR_INVALID, "%s: dim %lld must be >= 1",
                          what, (long long)dim);
    return check_scaling(sc, err);
}

dl_status dl_dataset_load_csv(const char *path, int64_t dim, bool has_label,
                              const dl_scaling *sc, dl_dataset **out,
                              dl_err *err)
{
    *out = NULL;
    if (!sc)
        sc = &identity;
    dl_status st = csv_args(path, dim, sc, err);
    if (st != DL_OK)
        return st;
    char *buf;
    size_t len;
    st = dl_file_read(path, &buf, &len, err);   /* NUL-terminated */
    if (st != DL_OK)
        return st;
    st = csv_parse_text(buf, len, path, dim, has_label, sc, NULL, false, out, err);
    free(buf);
    return st;
}

/* A graph model's CSV file, its lines with target columns or without. */
static dl_status load_csv_model(const char *path, const dl_model_conf *conf, bool targets,
                                dl_dataset **out, dl_err *err)
{
    *out = NULL;
    int64_t dim = 0;
    for (int k = 0; k < conf->ninputs; k++)
        dim += conf->inputs[k].dim;
    for (int k = 0; k < conf->ninputs; k++)     /* CSV has no lengths */
        if (conf->inputs[k].max_length > 0)
            return dl_err_set(err, DL_ERR_INVALID, "%s: input '%s' is a sequence: give JSON "
                              "Lines data (.jsonl) for model '%s'", path, conf->inputs[k].name,
                              conf->name);
    char *buf;
    size_t len;
    dl_status st = dl_file_read(path, &buf, &len, err);
    if (st != DL_OK)
        return st;
    st = csv_parse_text(buf, len, path, dim, false, &identity, conf, targets, out, err);
    free(buf);
    return st;
}

dl_status dl_dataset_load_csv_model(const char *path, const dl_model_conf *conf,
                                    dl_dataset **out, dl_err *err)
{
    return load_csv_model(path, conf, true, out, err);
}

dl_status dl_dataset_load_csv_inputs(const char *path, const dl_model_conf *conf,
                                     dl_dataset **out, dl_err *err)
{
    return load_csv_model(path, conf, false, out, err);
}

dl_status dl_dataset_parse_csv(const char *text, size_t len, const char *what,
                               int64_t dim, bool has_label, const dl_scaling *sc,
                               dl_dataset **out, dl_err *err)
{
    *out = NULL;
    if (!sc)
        sc = &identity;
    dl_status st = csv_args(what, dim, sc, err);
    if (st != DL_OK)
        return st;
    char *copy = malloc(len + 1);
    if (!copy)
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", what);
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    st = csv_parse_text(copy, len, what, dim, has_label, sc, NULL, false, out, err);
    free(copy);
    return st;
}

/* ---- data folder ---------------------------------------------------- */

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

/* Finds <dir>/<name>.gz, else <dir>/<name>; the path lands in buf. */
static bool find_idx(const char *dir, const char *name, char *buf)
{
    int w = snprintf(buf, PATH_CAP, "%s/%s.gz", dir, name);
    if (w > 0 && w < PATH_CAP && is_file(buf))
        return true;
    w = snprintf(buf, PATH_CAP, "%s/%s", dir, name);
    return w > 0 && w < PATH_CAP && is_file(buf);
}

/* Loads an IDX pair and checks its sample size against dim (if > 0). */
static dl_status load_idx_dim(const char *images, const char *labels,
                              int64_t dim, const dl_scaling *sc,
                              dl_dataset **out, dl_err *err)
{
    dl_dataset *ds;
    dl_status st = dl_dataset_load_idx(images, labels, sc, &ds, err);
    if (st != DL_OK)
        return st;
    if (dim > 0 && ds->dim != dim) {
        char shape[64] = "";
        for (int i = 0, w = 0; i < ds->ndim && w >= 0 && w < 64; i++)
            w += snprintf(shape + w, sizeof(shape) - (size_t)w, "%s%lld",
                          i ? "x" : "", (long long)ds->shape[i]);
        st = dl_err_set(err, DL_ERR_INVALID,
                        "%s: samples have shape %s (%lld values), expected "
                        "dim %lld", images, shape, (long long)ds->dim,
                        (long long)dim);
        dl_dataset_free(ds);
        return st;
    }
    *out = ds;
    return DL_OK;
}

dl_status dl_dataset_load_dir(const char *dir, const char *split, int64_t dim,
                              const dl_scaling *sc, dl_dataset **out,
                              dl_err *err)
{
    *out = NULL;
    const char *prefix = strcmp(split, "train") == 0 ? "train"
                       : strcmp(split, "test") == 0  ? "t10k" : NULL;
    if (!prefix)
        return dl_err_set(err, DL_ERR_INVALID,
                          "split '%s' is not \"train\" or \"test\"", split);
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return dl_err_set(err, DL_ERR_IO, "%s: not a folder", dir);

    char images[PATH_CAP], labels[PATH_CAP], name[64];
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
    bool has_images = find_idx(dir, name, images);
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
    bool has_labels = find_idx(dir, name, labels);
    if (has_images && has_labels)
        return load_idx_dim(images, labels, dim, sc, out, err);
    /* Half a pair is a broken download, not a reason to try the CSV. */
    if (has_images || has_labels)
        return dl_err_set(err, DL_ERR_IO, "%s: found %s but no %s-%s[.gz]",
                          dir, has_images ? images : labels, prefix,
                          has_images ? "labels-idx1-ubyte"
                                     : "images-idx3-ubyte");

    char csv[PATH_CAP];
    int w = snprintf(csv, sizeof(csv), "%s/%s.csv", dir, split);
    if (w > 0 && w < PATH_CAP && is_file(csv))
        return dl_dataset_load_csv(csv, dim, true, sc, out, err);
    return dl_err_set(err, DL_ERR_IO,
                      "%s: no %s data: looked for %s-images-idx3-ubyte[.gz] + "
                      "%s-labels-idx1-ubyte[.gz] and %s.csv",
                      dir, split, prefix, prefix, split);
}
