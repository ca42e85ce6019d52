/* http_stats.c: Triton's statistics and model configuration extensions,
 * GET /v2/models/{m}[/versions/{v}]/stats and .../config, as JSON built
 * from the registry, the batcher's configuration and the stats. */
#include "serve/http/http.h"

#include <stdio.h>

/* The model (and version) must be one the registry knows: unknown ones
 * are DL_ERR_NOT_FOUND (404). A model with nothing ready yet is known. */
static dl_status known(const http_deps *d, const char *model, int64_t version, served **sv,
                       dl_err *err)
{
    dl_status st = registry_acquire(d->reg, model, version, sv, err);
    return st == DL_ERR_UNAVAILABLE ? DL_OK : st;
}

dl_status http_model_stats(const http_deps *d, const char *model, int64_t version, json_t **out,
                           dl_err *err)
{
    *out = NULL;
    served *sv = NULL;
    dl_status st = known(d, model, version, &sv, err);
    served_release(sv);
    if (st != DL_OK)
        return st;
    json_t *arr = stats_model_stats(d->st, model, version);
    if (!arr)
        return dl_err_set(err, DL_ERR_NOMEM, "out of memory");
    *out = json_pack("{s:o}", "model_stats", arr);
    return *out ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "out of memory");
}

/* One output of the config: {"name","data_type","dims"}. */
static json_t *config_tensor(const char *name, const char *type, const int64_t *dims, int n)
{
    json_t *jd = json_array();
    for (int i = 0; jd && i < n; i++)
        json_array_append_new(jd, json_integer((json_int_t)dims[i]));
    return json_pack("{s:s, s:s, s:o*}", "name", name, "data_type", type, "dims", jd);
}

/* Triton's model configuration (its JSON form) of a served version, with
 * the daemon's batching: every model batches dynamically, and requests
 * queued past their timeout are rejected. */
static json_t *model_config(const served *sv, const dl_batching_conf *bc)
{
    const dl_model_conf *conf = sv->conf;
    int64_t one = 1, out_dims = sv->out_dim;
    json_t *input = json_pack("{s:s, s:s, s:s, s:o*}", "name", conf->input_name, "data_type",
                              "TYPE_FP32", "format", "FORMAT_NONE", "dims", json_array());
    json_t *dims = input ? json_object_get(input, "dims") : NULL;
    for (int i = 0; dims && i < conf->in_ndim; i++)
        json_array_append_new(dims, json_integer((json_int_t)conf->in_shape[i]));
    json_t *outputs = json_array();
    if (outputs) {
        json_array_append_new(outputs,
                              config_tensor(conf->output_name, "TYPE_FP32", &out_dims, 1));
        if (conf->nlabels > 0)
            json_array_append_new(outputs, config_tensor("label", "TYPE_STRING", &one, 1));
        json_array_append_new(outputs, config_tensor("class", "TYPE_INT64", &one, 1));
    }
    json_t *policy = json_pack("{s:s, s:I, s:b, s:I}", "timeout_action", "REJECT",
                               "default_timeout_microseconds",
                               (json_int_t)bc->default_timeout_us, "allow_timeout_override", 1,
                               "max_queue_size", (json_int_t)bc->max_queue_size);
    json_t *batching = json_pack("{s:[], s:I, s:b, s:o*}", "preferred_batch_size",
                                 "max_queue_delay_microseconds",
                                 (json_int_t)bc->max_queue_delay_us, "preserve_ordering", 0,
                                 "default_queue_policy", policy);
    return json_pack("{s:s, s:s, s:s, s:I, s:[o*], s:o*, s:o*, s:s}", "name", conf->name,
                     "platform", "dlserve", "backend", "dlserve", "max_batch_size",
                     (json_int_t)bc->max_batch_size, "input", input, "output", outputs,
                     "dynamic_batching", batching, "default_model_filename",
                     "model.safetensors");
}

dl_status http_model_config(const http_deps *d, const char *model, int64_t version,
                            json_t **out, dl_err *err)
{
    *out = NULL;
    served *sv = NULL;
    dl_status st = registry_acquire(d->reg, model, version, &sv, err);
    if (st != DL_OK)
        return st;   /* unknown: 404; nothing ready to describe: 503 */
    *out = model_config(sv, batcher_conf(d->bat));
    served_release(sv);
    return *out ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "out of memory");
}
