/* test_registry.c: the served model repository's lookups and what their
 * failures say: an unknown model, version or unloaded model is
 * DL_ERR_NOT_FOUND (404), a known model with no version ready is
 * DL_ERR_UNAVAILABLE (503); and the registry's metrics (refused versions,
 * readiness). A real repository in a temporary folder. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include "fixture.h"

#include "serve/oip/oip.h"
#include "serve/serve.h"

#include <sys/stat.h>

static char dir[64];
static dl_backend *be;
static registry *reg;

/* "tiny" serves version 1; "empty" has model.json and no weights. */
static void setup(void)
{
    fx_tmpdir(dir, sizeof(dir), "registry");
    be = fx_cpu_backend();
    dl_err err = {0};
    fx_repo_model(be, dir, "tiny", true);
    fx_repo_model(be, dir, "empty", false);
    dl_models_conf conf = {0};
    snprintf(conf.dir, sizeof(conf.dir), "%s", dir);
    snprintf(conf.policy, sizeof(conf.policy), "latest");
    cr_assert_eq(registry_new(&conf, &be, 1, &reg, &err), DL_OK, "%s", err.msg);
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

/* models.instances = 2: a copy of the version a backend, with the same
 * weights (the same predictions), and nothing past them. */
Test(registry, loads_a_copy_an_instance)
{
    dl_backend *two[2] = {be, fx_cpu_backend()};
    dl_models_conf conf = {0};
    snprintf(conf.dir, sizeof(conf.dir), "%s", dir);
    snprintf(conf.policy, sizeof(conf.policy), "latest");
    registry *r2 = NULL;
    dl_err err = {0};
    cr_assert_eq(registry_new(&conf, two, 2, &r2, &err), DL_OK, "%s", err.msg);
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
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\"} 1\n"));
    cr_expect(!metrics_has("dlserve_model_ready{model=\"empty\"}"),
              "a folder without weights holds no readiness back");
    cr_expect(metrics_has("dlserve_model_versions_refused_total{model=\"tiny\"} 0\n"));

    /* A corrupt version 2: refused, version 1 still serves. */
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
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\"} 1\n"));

    dl_err err = {0};
    cr_assert_eq(registry_unload(reg, "tiny", &err), DL_OK, "%s", err.msg);
    cr_expect(metrics_has("dlserve_model_ready{model=\"tiny\"} 0\n"));
}
