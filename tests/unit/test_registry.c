/* test_registry.c: the served model repository's lookups and what their
 * failures say: an unknown model, version or unloaded model is
 * DL_ERR_NOT_FOUND (404), a known model with no version ready is
 * DL_ERR_UNAVAILABLE (503); and the registry's metrics (refused versions,
 * readiness). A real repository in a temporary folder. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include "serve_fixture.h"

#include "serve/oip/oip.h"

#include <sys/stat.h>

static char dir[64];
static dl_backend *be;
static registry *reg;

/* "tiny" serves version 1; "empty" has model.json and no weights. */
static void setup(void)
{
    fx_tmpdir(dir, sizeof(dir), "registry");
    be = fx_cpu_backend();
    fx_repo_model(be, dir, "tiny", true);
    fx_repo_model(be, dir, "empty", false);
    reg = fx_registry(dir, &be, 1);
}

static void teardown(void)
{
    registry_free(reg);
    dl_backend_free(be);
    fx_rmtree(dir);
}

TestSuite(registry, .init = setup, .fini = teardown, .timeout = 30);

/* Expects registry_acquire to fail with `want`, HTTP code `code` and
 * `needle` in the message, and to leave *out NULL. */
static void refused(const char *name, int64_t version, dl_status want, int code,
                    const char *needle)
{
    served *sv = (served *)1;
    dl_err err = {0};
    dl_status st = registry_acquire(reg, name, version, &sv, &err);
    cr_expect_eq(st, want, "%s v%lld: %s (%s)", name, (long long)version, dl_status_str(st),
                 err.msg);
    cr_expect_eq(err.code, want);
    cr_expect_null(sv);
    cr_expect_eq(oip_http_code(st), code);
    cr_expect_not_null(strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
}

Test(registry, acquires_served_versions)
{
    served *sv = NULL;
    dl_err err = {0};
    cr_assert_eq(registry_acquire(reg, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(sv->version, 1);
    cr_expect_eq(sv->in_dim, 4);
    served_release(sv);
    cr_assert_eq(registry_acquire(reg, "tiny", 1, &sv, NULL), DL_OK);
    cr_expect_str_eq(sv->name, "tiny");
    served_release(sv);
}

/* models.instances' default (0): the daemon's two backends, and a version
 * without serving.instances loads a copy for each instance that runs it:
 * both when its warm-up sample computes long, the first alone otherwise
 * (which of the two, a timing, is not asserted). */
Test(registry, default_instances_copies_match)
{
    dl_backend *two[2] = {be, fx_cpu_backend()};
    dl_models_conf conf = {0};
    snprintf(conf.dir, sizeof(conf.dir), "%s", dir);
    snprintf(conf.policy, sizeof(conf.policy), "latest");
    registry *r2 = NULL;
    dl_err err = {0};
    cr_assert_eq(registry_new(&conf, true, NULL, NULL, two, 2, &r2, &err), DL_OK, "%s", err.msg);
    served *sv = NULL;
    cr_assert_eq(registry_acquire(r2, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_expect(sv->instances == 1 || sv->instances == 2, "%d", sv->instances);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(sv->m[i] != NULL, i < sv->instances, "copy %d of %d", i, sv->instances);
    served_release(sv);
    registry_free(r2);
    dl_backend_free(two[1]);
}

/* models.instances = 2: a copy of the version a backend, with the same
 * weights (the same predictions), and nothing past them. */
Test(registry, loads_a_copy_an_instance)
{
    dl_backend *two[2] = {be, fx_cpu_backend()};
    registry *r2 = fx_registry(dir, two, 2);
    dl_err err = {0};
    served *sv = NULL;
    cr_assert_eq(registry_acquire(r2, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_assert(sv->m[0] && sv->m[1] && sv->m[0] != sv->m[1]);
    cr_expect_null(sv->m[2]);
    const float x[4] = {0.5f, -1.0f, 2.0f, 0.25f};
    float y0[16], y1[16];
    cr_assert_leq(sv->out_dim, 16);
    cr_assert_eq(dl_model_predict(sv->m[0], x, 1, 1, y0, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_predict(sv->m[1], x, 1, 1, y1, &err), DL_OK, "%s", err.msg);
    cr_expect_arr_eq(y0, y1, (size_t)sv->out_dim * sizeof(float));
    served_release(sv);
    registry_free(r2);
    dl_backend_free(two[1]);
}

Test(registry, tells_not_found_from_unavailable)
{
    refused("nope", 0, DL_ERR_NOT_FOUND, 404, "unknown model 'nope'");
    refused("nope", 2, DL_ERR_NOT_FOUND, 404, "unknown model 'nope'");
    refused("tiny", 2, DL_ERR_NOT_FOUND, 404, "version 2 of model 'tiny' is not served");
    refused("empty", 1, DL_ERR_NOT_FOUND, 404, "version 1 of model 'empty' is not served");
    refused("empty", 0, DL_ERR_UNAVAILABLE, 503, "model 'empty' has no version ready");
}

Test(registry, unloaded_is_not_found_until_loaded)
{
    dl_err err = {0};
    cr_assert_eq(registry_unload(reg, "tiny", &err), DL_OK, "%s", err.msg);
    refused("tiny", 0, DL_ERR_NOT_FOUND, 404, "model 'tiny' is unloaded");
    refused("tiny", 1, DL_ERR_NOT_FOUND, 404, "model 'tiny' is unloaded");
    cr_assert_eq(registry_load(reg, "tiny", &err), DL_OK, "%s", err.msg);
    served *sv = NULL;
    cr_expect_eq(registry_acquire(reg, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    served_release(sv);
}

Test(registry, load_and_unload_refusals)
{
    dl_err err = {0};
    cr_expect_eq(registry_load(reg, "nope", &err), DL_ERR_NOT_FOUND);
    cr_expect_not_null(strstr(err.msg, "unknown model 'nope'"), "%s", err.msg);
    cr_expect_eq(registry_unload(reg, "nope", &err), DL_ERR_NOT_FOUND);
    cr_expect_not_null(strstr(err.msg, "unknown model 'nope'"), "%s", err.msg);
    /* A model folder without weights is known, but cannot load: 400. */
    cr_expect_eq(registry_load(reg, "empty", &err), DL_ERR_INVALID);
    cr_expect_not_null(strstr(err.msg, "cannot be loaded"), "%s", err.msg);
    cr_expect_eq(oip_http_code(err.code), 400);
}

/* metrics_has TEXT: the registry's /metrics lines hold TEXT. */
static bool metrics_has(const char *text)
{
    dl_sbuf b = {0};
    registry_metrics(reg, &b);
    bool has = b.s && strstr(b.s, text);
    dl_sbuf_free(&b);
    return has;
}

Test(registry, metrics_count_refused_versions_and_readiness)
{
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\",version=\"1\"} 1\n"));
    cr_expect(!metrics_has("dlserve_model_ready{model=\"empty\""),
              "a folder without weights holds no readiness back");
    cr_expect(metrics_has("dlserve_model_versions_refused_total{model=\"tiny\"} 0\n"));

    /* A corrupt version 2: refused (0, with its reason), version 1 still
     * serves. */
    char path[192];
    snprintf(path, sizeof(path), "%s/tiny/2", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/tiny/2/model.safetensors", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("not safetensors", f);
    fclose(f);
    registry_rescan(reg);
    cr_expect(metrics_has("dlserve_model_versions_refused_total{model=\"tiny\"} 1\n"));
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\",version=\"2\",reason=\""));
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\",version=\"1\"} 1\n"));

    /* Unloaded: one 0 without a version, never an absent series. */
    dl_err err = {0};
    cr_assert_eq(registry_unload(reg, "tiny", &err), DL_OK, "%s", err.msg);
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\",reason=\"unloaded\"} 0\n"));
    cr_expect(!metrics_has("dlserve_model_ready{model=\"tiny\",version="));
}

/* ---- the "serving" block of model.json ---------------------------------- */

/* serving_parse refuses `text` (a block) with `needle` in the message. */
static void bad_block(const char *text, const char *needle)
{
    json_t *block = json_loads(fx_dq(text), 0, NULL);
    cr_assert_not_null(block, "%s", text);
    serving_conf sc;
    dl_err err = {0};
    cr_expect_eq(serving_parse(block, 2, &sc, &err), DL_ERR_INVALID, "accepted: %s", text);
    cr_expect_not_null(strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
    json_decref(block);
}

Test(registry, serving_blocks_are_checked)
{
    bad_block("[]", "serving must be an object");
    bad_block("{'max_batch':4}", "serving: unknown key 'max_batch'");
    bad_block("{'max_batch_size':0}", "serving.max_batch_size must be an integer from 1");
    bad_block("{'max_batch_size':'8'}", "serving.max_batch_size must be an integer");
    bad_block("{'max_queue_delay_us':-1}", "serving.max_queue_delay_us must be an integer from 0");
    bad_block("{'instances':3}", "serving.instances must be an integer from 1 to 2");
    bad_block("{'preferred_batch_size':[]}", "serving.preferred_batch_size must be a list");
    bad_block("{'preferred_batch_size':[2,2]}", "lists 2 twice");
    bad_block("{'max_batch_size':4,'preferred_batch_size':[8]}", "is 8, over serving.max_batch_size 4");
    bad_block("{'version_policy':'newest'}", "serving.version_policy must be");
    bad_block("{'priority_levels':2}", "needs serving.default_priority_level");
    bad_block("{'default_priority_level':1}", "needs serving.priority_levels");
    bad_block("{'priority_levels':2,'default_priority_level':3}",
              "serving.default_priority_level must be an integer from 1 to 2");
    bad_block("{'max_batch_size':8,'max_queue_size':4}", "serving.max_batch_size 8 is over");
    bad_block("{'batch_invariant':1}", "serving.batch_invariant must be true or false");

    json_t *block = json_loads(fx_dq("{'max_batch_size':8,'preferred_batch_size':[4,2],"
                                     "'max_queue_delay_us':0,'version_policy':'latest:2',"
                                     "'priority_levels':3,'default_priority_level':2}"),
                               0, NULL);
    serving_conf sc;
    dl_err err = {0};
    cr_assert_eq(serving_parse(block, 2, &sc, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(sc.max_batch_size, 8);
    cr_expect_eq(sc.npreferred, 2);
    cr_expect(sc.preferred[0] == 2 && sc.preferred[1] == 4, "sorted");
    cr_expect_eq(sc.max_queue_delay_us, 0);
    cr_expect_eq(sc.default_timeout_us, -1, "not given");
    cr_expect_str_eq(sc.version_policy, "latest:2");
    cr_expect_eq(sc.default_priority_level, 2);
    cr_expect_eq(sc.batch_invariant, -1, "not given");
    json_decref(block);
}

static void write_model_json(const char *name, const char *serving)
{
    char path[256], text[512];
    snprintf(path, sizeof(path), "%s/%s/model.json", dir, name);
    snprintf(text, sizeof(text), "{\"name\": \"%s\", \"input\": {\"shape\": [4]}, \"layers\": "
             "[{\"name\": \"fc\", \"type\": \"dense\", \"units\": 3}], \"loss\": "
             "\"softmax_cross_entropy\", \"serving\": %s}", name, serving);
    fx_write_text(path, text);
}

static json_t *status_of(registry *r, const char *name)
{
    json_t *all = registry_status(r), *found = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(all, i, e)
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            found = json_incref(e);
    json_decref(all);
    cr_assert_not_null(found, "%s not listed", name);
    return found;
}

/* A model's serving block: read with the model (instances: copies loaded),
 * shown in the status; a bad block refuses the new version and the old
 * one keeps serving with the settings it was loaded with. */
Test(registry, serving_block_loads_with_the_model)
{
    write_model_json("tiny", "{\"max_batch_size\": 4, \"instances\": 1}");
    dl_backend *two[2] = {be, fx_cpu_backend()};
    registry *r2 = fx_registry(dir, two, 2);
    dl_err err = {0};
    served *sv = NULL;
    cr_assert_eq(registry_acquire(r2, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(sv->serving.max_batch_size, 4);
    cr_expect_eq(sv->instances, 1);
    cr_expect(sv->m[0] && !sv->m[1], "one copy for serving.instances 1");
    cr_expect(dl_model_batch_invariant(sv->m[0]), "[batching]'s setting (the fixture's: on)");
    served_release(sv);
    json_t *e = status_of(r2, "tiny");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(e, "serving"),
                                                    "max_batch_size")), 4);
    json_decref(e);

    /* version 2 with a bad block: refused, version 1 serves on */
    write_model_json("tiny", "{\"max_batch_size\": 0}");
    char from[256], to[256];
    snprintf(to, sizeof(to), "%s/tiny/2", dir);
    cr_assert_eq(mkdir(to, 0755), 0);
    snprintf(from, sizeof(from), "%s/tiny/1/model.safetensors", dir);
    snprintf(to, sizeof(to), "%s/tiny/2/model.safetensors", dir);
    size_t len;
    char *w = fx_read(from, &len);
    fx_write(to, w, len);
    free(w);
    registry_rescan(r2);
    cr_assert_eq(registry_acquire(r2, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(sv->version, 1);
    cr_expect_eq(sv->serving.max_batch_size, 4);
    served_release(sv);
    e = status_of(r2, "tiny");
    cr_expect_str_eq(json_string_value(json_object_get(e, "state")), "READY");
    const char *reason = json_string_value(json_object_get(e, "reason"));
    cr_expect_not_null(strstr(reason, "serving.max_batch_size must be"), "%s", reason);
    json_decref(e);

    /* fixed: version 2 loads with its settings */
    write_model_json("tiny", "{\"max_batch_size\": 2, \"batch_invariant\": false}");
    registry_rescan(r2);
    cr_assert_eq(registry_acquire(r2, "tiny", 0, &sv, &err), DL_OK, "%s", err.msg);
    cr_expect_eq(sv->version, 2);
    cr_expect_eq(sv->serving.max_batch_size, 2);
    cr_expect_eq(sv->instances, 2, "the daemon's instances");
    cr_expect(!dl_model_batch_invariant(sv->m[0]) && !dl_model_batch_invariant(sv->m[1]),
              "the block's batch_invariant, on every copy");
    served_release(sv);
    registry_free(r2);
    dl_backend_free(two[1]);
}

/* An unloaded model is UNAVAILABLE, as Triton reports it, with a reason. */
Test(registry, unloaded_is_unavailable_with_a_reason)
{
    dl_err err = {0};
    cr_assert_eq(registry_unload(reg, "tiny", &err), DL_OK, "%s", err.msg);
    json_t *e = status_of(reg, "tiny");
    cr_expect_str_eq(json_string_value(json_object_get(e, "state")), "UNAVAILABLE");
    cr_expect_str_eq(json_string_value(json_object_get(e, "reason")), "unloaded");
    json_decref(e);
}
