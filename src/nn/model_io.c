/* model_io.c: model weights to and from safetensors with PyTorch names
 * ("<layer>.weight", "<bn>.running_mean") and layouts. */
#include "nn/model.h"

#include <stdlib.h>
#include <string.h>

/* Host copies of the parameter and state buffers. */
static dl_status download_all(dl_model *m, float **hp, float **hs, dl_err *err)
{
    int64_t np, ns;
    float *p = dl_model_params(m, &np), *s = dl_model_state(m, &ns);
    *hp = malloc((size_t)(np + 1) * sizeof(float));
    *hs = malloc((size_t)(ns + 1) * sizeof(float));
    if (!*hp || !*hs) {
        free(*hp);
        free(*hs);
        *hp = *hs = NULL;
        return dl_err_set(err, DL_ERR_NOMEM, "weights staging");
    }
    dl_backend *be = dl_model_backend(m);
    be->ops->download(be, *hp, p, (size_t)np * sizeof(float));
    be->ops->download(be, *hs, s, (size_t)ns * sizeof(float));
    return DL_OK;
}

/* Offset of tensor data inside the parameter or state buffer. */
static float *host_ptr(dl_model *m, float *data, float *hp, float *hs)
{
    int64_t np, ns;
    float *p = dl_model_params(m, &np), *s = dl_model_state(m, &ns);
    if (data >= p && data < p + np)
        return hp + (data - p);
    return hs + (data - s);
}

dl_status dl_model_save(dl_model *m, const char *path, const char *training_json,
                        dl_err *err)
{
    float *hp, *hs;
    dl_status st = download_all(m, &hp, &hs, err);
    if (st != DL_OK)
        return st;
    int n = dl_model_tensor_count(m);
    dl_st_tensor *t = calloc((size_t)(n + 1), sizeof(*t));
    if (!t) {
        free(hp);
        free(hs);
        return dl_err_set(err, DL_ERR_NOMEM, "tensor list");
    }
    for (int i = 0; i < n; i++) {
        const int64_t *shape;
        float *data;
        dl_model_tensor_at(m, i, &t[i].name, &t[i].ndim, &shape, &data);
        memcpy(t[i].shape, shape, (size_t)t[i].ndim * sizeof(*shape));
        t[i].dtype = DL_ST_F32;
        t[i].data = host_ptr(m, data, hp, hs);
        t[i].nbytes = (size_t)dl_shape_numel(t[i].ndim, shape) * sizeof(float);
    }
    const char *meta[6] = { "format", "pt", "dlserve.model", dl_model_conf_of(m)->json,
                            "dlserve.training", training_json };
    st = dl_st_write(path, t, n, meta, training_json ? 3 : 2, err);
    free(t);
    free(hp);
    free(hs);
    return st;
}

static bool is_ignored_extra(const char *name)
{
    const char *suffix = ".num_batches_tracked";
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

static const dl_st_tensor *find_in(const dl_st_tensor *ts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0)
            return &ts[i];
    return NULL;
}

/* Checks every tensor (ts, n of them, from `path`) against the model and
 * copies the values into the host staging buffers. */
static dl_status match(dl_model *m, const dl_st_tensor *ts, int n, const char *path,
                       float *hp, float *hs, dl_err *err)
{
    char want[96], got[96];
    for (int i = 0; i < dl_model_tensor_count(m); i++) {
        const char *name;
        int ndim;
        const int64_t *shape;
        float *data;
        dl_model_tensor_at(m, i, &name, &ndim, &shape, &data);
        const dl_st_tensor *t = find_in(ts, n, name);
        if (!t)
            return dl_err_set(err, DL_ERR_INVALID, "%s: tensor '%s' is missing", path, name);
        if (t->dtype != DL_ST_F32)
            return dl_err_set(err, DL_ERR_INVALID, "%s: tensor '%s' is %s, expected F32",
                              path, name, dl_st_dtype_name(t->dtype));
        if (t->ndim != ndim || memcmp(t->shape, shape, (size_t)ndim * sizeof(*shape)) != 0)
            return dl_err_set(err, DL_ERR_INVALID,
                              "%s: tensor '%s' has shape %s, model.json needs %s", path, name,
                              dl_shape_str(t->ndim, t->shape, got, sizeof(got)),
                              dl_shape_str(ndim, shape, want, sizeof(want)));
        memcpy(host_ptr(m, data, hp, hs), t->data, t->nbytes);
    }
    for (int i = 0; i < n; i++) {
        const char *name = ts[i].name;
        if (dl_model_tensor_index(m, name) < 0 && !is_ignored_extra(name))
            return dl_err_set(err, DL_ERR_INVALID,
                              "%s: tensor '%s' is not part of model '%s'", path, name,
                              dl_model_conf_of(m)->name);
    }
    return DL_OK;
}

dl_status dl_model_set_weights(dl_model *m, const dl_st_tensor *ts, int n, const char *what,
                               dl_err *err)
{
    if (m->fixed)
        return dl_err_set(err, DL_ERR_INVALID, "%s: the model's weights are fixed for serving",
                          what);
    float *hp = NULL, *hs = NULL;
    dl_status st = download_all(m, &hp, &hs, err);
    if (st == DL_OK)
        st = match(m, ts, n, what, hp, hs, err);
    if (st == DL_OK) {
        /* Everything matched: only now replace the model's weights. */
        int64_t np, ns;
        dl_backend *be = dl_model_backend(m);
        float *p = dl_model_params(m, &np), *s = dl_model_state(m, &ns);
        be->ops->upload(be, p, hp, (size_t)np * sizeof(float));
        be->ops->upload(be, s, hs, (size_t)ns * sizeof(float));
    }
    free(hp);
    free(hs);
    return st;
}

dl_status dl_model_load(dl_model *m, const char *path, dl_err *err)
{
    dl_st_file *f;
    dl_status st = dl_st_load(path, &f, err);
    if (st != DL_OK)
        return st;
    st = dl_model_set_weights(m, dl_st_count(f) ? dl_st_at(f, 0) : NULL, dl_st_count(f),
                              path, err);
    dl_st_free(f);
    return st;
}
