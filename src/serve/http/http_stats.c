/* http_stats.c: Triton's statistics and model configuration extensions,
 * GET /v2/models/{m}[/versions/{v}]/stats and .../config, as JSON built
 * from the registry, the batcher's configuration and the stats. */
#include "serve/http/http.h"
#include "serve/oip/oip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model (and version) must be one the registry knows: unknown ones
 * are DL_ERR_NOT_FOUND (404). A model with nothing ready yet is known. */
static dl_status known(const http_deps *d, const char *model, int64_t version, served **sv,
                       dl_err *err)
{
    dl_status st = registry_acquire(d->reg, model, version, sv, err);
    return st == DL_ERR_UNAVAILABLE ? DL_OK : st;
}

/* A served version's entry with zero counts, as stats_model_stats writes
 * one (a version that has answered nothing yet). */
static json_t *zero_stat(const char *model, const char *version)
{
    json_t *inference = json_object();
    static const char *const kinds[] = {"success", "fail", "queue", "compute_input",
                                        "compute_infer", "compute_output", "cache_hit",
                                        "cache_miss"};
    for (size_t i = 0; inference && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        json_object_set_new(inference, kinds[i], json_pack("{s:i, s:i}", "count", 0, "ns", 0));
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:o*, s:[], s:[]}", "name", model, "version",
                     version, "last_inference", 0, "inference_count", 0, "execution_count", 0,
                     "inference_stats", inference, "batch_stats", "memory_usage");
}

static bool has_version(json_t *arr, const char *version)
{
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
        if (strcmp(json_string_value(json_object_get(e, "version")), version) == 0)
            return true;
    return false;
}

/* Appends to arr the statistics of `model` (listed in registry_status()
 * output `status`):
 * those recorded, then each served version without any (zero counts);
 * only `version` when it is not 0. False when out of memory. */
static bool add_model(const http_deps *d, json_t *arr, json_t *status, const char *model,
                      int64_t version)
{
    json_t *recorded = stats_model_stats(d->st, model, version);
    bool ok = recorded && json_array_extend(arr, recorded) == 0;
    json_t *versions = ok ? oip_versions_of(status, model) : NULL;
    size_t i;
    json_t *v;
    json_array_foreach(versions, i, v) {
        const char *vs = json_string_value(v);
        if (ok && (version == 0 || strtoll(vs, NULL, 10) == version) &&
            !has_version(recorded, vs))
            ok = json_array_append_new(arr, zero_stat(model, vs)) == 0;
    }
    ok = ok && versions;
    json_decref(versions);
    json_decref(recorded);
    return ok;
}

dl_status http_model_stats(const http_deps *d, const char *model, int64_t version, json_t **out,
                           dl_err *err)
{
    *out = NULL;
    if (model[0] != '\0') {
        served *sv = NULL;
        dl_status st = known(d, model, version, &sv, err);
        served_release(sv);
        if (st != DL_OK)
            return st;
    }
    json_t *status = registry_status(d->reg);
    json_t *arr = json_array();
    bool ok = status && arr;
    size_t i;
    json_t *e;
    json_array_foreach(status, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (ok && (model[0] == '\0' || strcmp(name, model) == 0))
            ok = add_model(d, arr, status, name, version);
    }
    json_decref(status);
    *out = ok ? json_pack("{s:o}", "model_stats", arr) : (json_decref(arr), NULL);
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
