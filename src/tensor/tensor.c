/* tensor.c: tensor headers, views, shape helpers, convolution geometry and
 * backend selection by device name. */
#include "tensor/dl_tensor.h"
#include "tensor/dl_cuda.h"

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

dl_status dl_conv_geom_finish(dl_conv_geom *g, dl_err *err)
{
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0)
        return dl_err_set(err, DL_ERR_INVALID,
                          "kernel, stride must be >= 1 and padding >= 0");
    int64_t eh = g->h + 2 * g->ph - g->kh, ew = g->w + 2 * g->pw - g->kw;
    if (eh < 0 || ew < 0)
        return dl_err_set(err, DL_ERR_INVALID,
                          "window %lldx%lld does not fit input %lldx%lld with padding %lld,%lld",
                          (long long)g->kh, (long long)g->kw, (long long)g->h,
                          (long long)g->w, (long long)g->ph, (long long)g->pw);
    if (g->ph >= g->kh || g->pw >= g->kw)
        return dl_err_set(err, DL_ERR_INVALID, "padding must be smaller than the window");
    g->oh = eh / g->sh + 1;
    g->ow = ew / g->sw + 1;
    return DL_OK;
}

dl_status dl_backend_new(const char *device, int threads, dl_backend **out,
                         dl_err *err)
{
    *out = NULL;
    if (!device || strcmp(device, "cpu") == 0)
        return dl_backend_cpu_new(threads, out, err);
    /* "cuda": the GPU of this process's local rank; "cuda:N": GPU N. */
    char name[8];
    int64_t index;
    bool index_ok = dl_parse_name_num(device, name, sizeof(name), &index);
    if (strcmp(name, "cuda") == 0) {
#ifdef DL_HAVE_CUDA
        if (!index_ok || index > 1023)
            return dl_err_set(err, DL_ERR_INVALID,
                              "device '%s': expected cpu, cuda or cuda:N", device);
        (void)threads;   /* the GPU backend runs no CPU threads of its own */
        dl_status st = dl_backend_cuda_new((int)index, out, err);
        if (st != DL_OK)
            dl_err_prefix(err, "device '%s'", device);
        return st;
#else
        (void)index_ok;
        return dl_err_set(err, DL_ERR_UNAVAILABLE,
                          "device '%s': this build has no CUDA backend", device);
#endif
    }
    return dl_err_set(err, DL_ERR_INVALID,
                      "device '%s': expected cpu, cuda or cuda:N", device);
}
