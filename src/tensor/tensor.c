/* tensor.c: tensor headers, views, shape helpers, convolution geometry and
 * backend selection by device name. */
#include "tensor/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t dl_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

int64_t dl_tensor_numel(const dl_tensor *t)
{
    return dl_shape_numel(t->ndim, t->shape);
}

dl_status dl_tensor_new(dl_backend *be, int ndim, const int64_t *shape,
                        dl_tensor **out, dl_err *err)
{
    *out = NULL;
    if (ndim < 1 || ndim > DL_MAX_DIMS)
        return dl_err_set(err, DL_ERR_INVALID, "ndim %d not in [1, %d]",
                          ndim, DL_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return dl_err_set(err, DL_ERR_INVALID, "negative dimension %lld",
                              (long long)shape[i]);
    dl_tensor *t = calloc(1, sizeof(*t));
    if (!t)
        return dl_err_set(err, DL_ERR_NOMEM, "tensor header");
    dl_tensor_view(t, be, ndim, shape, NULL);
    size_t nbytes = (size_t)dl_tensor_numel(t) * sizeof(float);
    dl_status st = be->ops->alloc(be, nbytes ? nbytes : sizeof(float),
                                  (void **)&t->data, err);
    if (st != DL_OK) {
        free(t);
        return st;
    }
    t->owns = true;
    *out = t;              /* ownership passes to the caller only here */
    return DL_OK;
}

void dl_tensor_view(dl_tensor *t, dl_backend *be, int ndim,
                    const int64_t *shape, float *data)
{
    DL_ASSERT(ndim >= 1 && ndim <= DL_MAX_DIMS);
    memset(t, 0, sizeof(*t));
    t->be = be;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof(*shape));
    t->data = data;
}

void dl_tensor_free(dl_tensor *t)
{
    if (!t)
        return;
    if (t->owns && t->data)
        t->be->ops->release(t->be, t->data);
    free(t);
}

int64_t dl_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (x[j] > x[best])
            best = j;
    return best;
}

const char *dl_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t off = 0;
    off += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "",
                                (long long)shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

/* The extent of a window of k taps dilated by d (0 or 1: none). */
static int64_t extent(int64_t k, int64_t d)
{
    return (k - 1) * (d > 1 ? d : 1) + 1;
}

dl_status dl_conv_geom_finish(dl_conv_geom *g, dl_err *err)
{
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0)
        return dl_err_set(err, DL_ERR_INVALID,
                          "kernel, stride must be >= 1 and padding >= 0");
    int64_t kh = extent(g->kh, g->dh), kw = extent(g->kw, g->dw);
    int64_t eh = g->h + 2 * g->ph - kh, ew = g->w + 2 * g->pw - kw;
    if (eh < 0 || ew < 0)
        return dl_err_set(err, DL_ERR_INVALID,
                          "window %lldx%lld does not fit input %lldx%lld with padding %lld,%lld",
                          (long long)kh, (long long)kw, (long long)g->h,
                          (long long)g->w, (long long)g->ph, (long long)g->pw);
    if (g->ph >= kh || g->pw >= kw)
        return dl_err_set(err, DL_ERR_INVALID, "padding must be smaller than the window");
    g->oh = eh / g->sh + 1;
    g->ow = ew / g->sw + 1;
    return DL_OK;
}

/* Every backend this build knows; the only list of them. */
static const dl_backend_reg *const backends[] = { &dl_backend_cpu_reg, &dl_backend_cuda_reg };
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

dl_status dl_backend_new(const char *device, const dl_backend_params *p,
                         dl_backend **out, dl_err *err)
{
    *out = NULL;
    static const dl_backend_params defaults = { 0 };
    if (!device)
        device = "cpu";
    char name[16];
    int64_t index;   /* -1: none given */
    bool index_ok = dl_parse_name_num(device, name, sizeof(name), &index);
    for (size_t i = 0; i < NBACKENDS; i++) {
        const dl_backend_reg *r = backends[i];
        if (strcmp(name, r->name) != 0)
            continue;
        if (!index_ok || index > 1023 || (index >= 0 && !r->indexed))
            break;
        dl_status st = r->create((int)index, p ? p : &defaults, out, err);
        if (st != DL_OK)
            dl_err_prefix(err, "device '%s'", device);
        return st;
    }
    return dl_err_set(err, DL_ERR_INVALID, "device '%s': expected cpu, cuda or cuda:N",
                      device);
}

void dl_backend_free(dl_backend *be)
{
    if (be)
        be->ops->free(be);
}

dl_status dl_backend_sync(dl_backend *be, dl_err *err)
{
    return be->ops->sync(be, err);
}

dl_status dl_backend_memory(dl_backend *be, size_t *used, size_t *total)
{
    if (be->ops->memory)
        return be->ops->memory(be, used, total);
    *used = *total = 0;
    return DL_ERR_INVALID;
}

const char *dl_backend_conv_engine(const dl_backend *be)
{
    return be->ops->conv_fwd ? "onednn" : "im2col";
}

bool dl_backend_can_record(const dl_backend *be)
{
    return be->ops->graph_begin != NULL;
}

dl_status dl_graph_begin(dl_backend *be, dl_err *err)
{
    if (!dl_backend_can_record(be))
        return dl_err_set(err, DL_ERR_INVALID, "the %s backend cannot record graphs",
                          be->ops->name);
    return be->ops->graph_begin(be, err);
}

dl_status dl_graph_end(dl_backend *be, dl_graph **out, dl_err *err)
{
    *out = NULL;
    if (!dl_backend_can_record(be))
        return dl_err_set(err, DL_ERR_INVALID, "no graph is being recorded");
    return be->ops->graph_end(be, out, err);
}

/* A graph exists only if its backend made it. */
dl_status dl_graph_launch(dl_backend *be, dl_graph *g, dl_err *err)
{
    return be->ops->graph_launch(be, g, err);
}

void dl_graph_free(dl_backend *be, dl_graph *g)
{
    if (g)
        be->ops->graph_free(be, g);
}
