/* model_info.c: Triton's statistics and model configuration extensions
 * as JSON built from the registry, the batcher's configuration and the
 * stats: HTTP answers them as they are, gRPC as their protobuf messages. */
#include "serve/model_info.h"
#include "serve/oip/oip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model (and version) must be one the registry knows: unknown ones
 * are DL_ERR_NOT_FOUND (404). A model with nothing ready yet is known. */
static dl_status known(const model_info_deps *d, const char *model, int64_t version, served **sv,
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
static bool add_model(const model_info_deps *d, json_t *arr, json_t *status, const char *model,
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

dl_status model_info_stats(const model_info_deps *d, const char *model, int64_t version,
                           json_t **out, dl_err *err)
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

/* One output of the config: {"name","data_type","dims"}; a scalar a
 * sample (label, class: no dims) as Triton writes one, dims [1] reshaped
 * to [], so that its metadata shape is [-1] as /v2/models/{m} says. */
static json_t *config_tensor(const char *name, const char *type, const int64_t *dims, int n)
{
    int64_t one = 1;
    json_t *jd = json_array();
    for (int i = 0; jd && i < (n ? n : 1); i++)
        json_array_append_new(jd, json_integer((json_int_t)(n ? dims[i] : one)));
    if (n == 0)
        return json_pack("{s:s, s:s, s:o*, s:{s:[]}}", "name", name, "data_type", type, "dims",
                         jd, "reshape", "shape");
    return json_pack("{s:s, s:s, s:o*}", "name", name, "data_type", type, "dims", jd);
}

/* Triton's version_policy of a [models] policy string. */
static json_t *version_policy(const char *p)
{
    if (strncmp(p, "versions:", 9) == 0) {
        json_t *vs = json_array();
        for (const char *c = p + 9; vs && *c; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
            json_array_append_new(vs, json_integer(strtoll(c, NULL, 10)));
        return json_pack("{s:{s:o*}}", "specific", "versions", vs);
    }
    long long n = p[6] == ':' ? strtoll(p + 7, NULL, 10) : 1;
    return json_pack("{s:{s:I}}", "latest", "num_versions", (json_int_t)n);
}

static json_t *int_list(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

/* Triton's dynamic_batching of a served version: its serving block over
 * the daemon's [batching]; requests queued past their timeout are
 * rejected. dlserve's own key: batch_invariant, the setting in force. */
static json_t *dynamic_batching(const served *sv, const dl_batching_conf *bc)
{
    const serving_conf *sc = &sv->serving;
    int64_t delay = sc->max_queue_delay_us >= 0 ? sc->max_queue_delay_us : bc->max_queue_delay_us;
    int64_t timeout = sc->default_timeout_us >= 0 ? sc->default_timeout_us
                                                  : bc->default_timeout_us;
    int64_t queue = sc->max_queue_size > 0 ? sc->max_queue_size : bc->max_queue_size;
    json_t *policy = json_pack("{s:s, s:I, s:b, s:I}", "timeout_action", "REJECT",
                               "default_timeout_microseconds", (json_int_t)timeout,
                               "allow_timeout_override", 1, "max_queue_size",
                               (json_int_t)queue);
    return json_pack("{s:o*, s:I, s:b, s:I, s:I, s:o*, s:b}", "preferred_batch_size",
                     int_list(sc->preferred, sc->npreferred), "max_queue_delay_microseconds",
                     (json_int_t)delay, "preserve_ordering", 0, "priority_levels",
                     (json_int_t)sc->priority_levels, "default_priority_level",
                     (json_int_t)sc->default_priority_level, "default_queue_policy", policy,
                     "batch_invariant", dl_model_batch_invariant(sv->m[0]));
}

/* The model's inputs as Triton's config lists them: a sequence's
 * positions as -1 ("dims": [-1] or [-1, D]), a text input TYPE_STRING
 * [1]; dlserve's own key "max_length" says how many positions a sequence
 * (or a text's tokens) may have. */
static json_t *config_inputs(const dl_model_conf *conf)
{
    static const char *const types[] = {"TYPE_FP32", "TYPE_UINT8", "TYPE_INT32", "TYPE_INT64",
                                        "TYPE_STRING"};
    json_t *arr = json_array();
    for (int k = 0; arr && k < conf->ninputs; k++) {
        const dl_input_conf *in = &conf->inputs[k];
        json_t *t = json_pack("{s:s, s:s, s:s}", "name", in->name, "data_type",
                              types[in->dtype], "format", "FORMAT_NONE");
        json_t *dims = json_array();
        for (int i = 0; dims && i < in->ndim; i++) {
            int64_t d = i > 0 || in->max_length == 0 ? in->shape[i]
                        : in->dtype == DL_IN_BYTES   ? 1
                                                     : -1;
            json_array_append_new(dims, json_integer((json_int_t)d));
        }
        if (!t || !dims || json_object_set_new(t, "dims", dims) != 0 ||
            (in->max_length > 0 && json_object_set_new(t, "max_length", json_integer(
                                       (json_int_t)in->max_length)) != 0) ||
            json_array_append_new(arr, t) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

/* The outputs an answer holds by default (oip_default_outputs). */
static json_t *config_outputs(const served *sv)
{
    const dl_model_conf *conf = sv->conf;
    oip_output all[OIP_MAX_OUTPUTS];
    int n = oip_default_outputs(conf, false, all);
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        int k = all[i].index;
        const dl_output_conf *o = &conf->outputs[k];
        int64_t dims[2] = {conf->noutputs == 1 ? sv->out_dim : o->served};
        bool crf = (k == 0 ? conf->loss : o->loss) == DL_LOSS_CRF;
        if (o->max_length > 0) {   /* per-token: [-1, C] scores, a crf's [-1] tags */
            dims[0] = -1;
            dims[1] = o->dim / o->max_length;
        }
        json_t *t = all[i].kind == OIP_OUT_LABEL   ? config_tensor("label", "TYPE_STRING", NULL, 0)
                    : all[i].kind == OIP_OUT_CLASS ? config_tensor("class", "TYPE_INT64", NULL, 0)
                    : crf ? config_tensor(o->name, "TYPE_INT64", dims, 1)
                          : config_tensor(o->name, "TYPE_FP32", dims, o->max_length > 0 ? 2 : 1);
        if (json_array_append_new(arr, t) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

/* Triton's model configuration (its JSON form) of a served version: every
 * model batches dynamically, with its serving block over the daemon's
 * [batching] and [models] (`policy`). */
static json_t *model_config(const served *sv, const dl_batching_conf *bc, const char *policy)
{
    const dl_model_conf *conf = sv->conf;
    int64_t mbs = sv->serving.max_batch_size > 0 ? sv->serving.max_batch_size
                                                 : bc->max_batch_size;
    const char *vp = sv->serving.version_policy[0] ? sv->serving.version_policy : policy;
    return json_pack("{s:s, s:s, s:s, s:I, s:o*, s:o*, s:o*, s:o*, s:[{s:s, s:i}], s:s}",
                     "name", conf->name, "platform", "dlserve", "backend", "dlserve",
                     "max_batch_size", (json_int_t)mbs, "version_policy", version_policy(vp),
                     "input", config_inputs(conf), "output", config_outputs(sv),
                     "dynamic_batching", dynamic_batching(sv, bc), "instance_group", "name",
                     conf->name, "count", sv->instances, "default_model_filename",
                     "model.safetensors");
}

dl_status model_info_config(const model_info_deps *d, const char *model, int64_t version,
                            json_t **out, dl_err *err)
{
    *out = NULL;
    served *sv = NULL;
    dl_status st = registry_acquire(d->reg, model, version, &sv, err);
    if (st != DL_OK)
        return st;   /* unknown: 404; nothing ready to describe: 503 */
    char policy[sizeof(((dl_models_conf *)0)->policy)];
    registry_policy(d->reg, policy, sizeof(policy));
    *out = model_config(sv, batcher_conf(d->bat), policy);
    served_release(sv);
    return *out ? DL_OK : dl_err_set(err, DL_ERR_NOMEM, "out of memory");
}
