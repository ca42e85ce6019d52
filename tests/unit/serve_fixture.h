/* serve_fixture.h: the served repository the serving unit tests share: a
 * registry over a folder, with the "latest" version policy. */
#ifndef DL_TEST_SERVE_FIXTURE_H
#define DL_TEST_SERVE_FIXTURE_H

#include "fixture.h"
#include "serve/serve.h"

/* A registry serving the models under dir on n backends (asserts). */
static inline registry *fx_registry(const char *dir, dl_backend **bes, int n)
{
    dl_models_conf conf = {0};
    snprintf(conf.dir, sizeof(conf.dir), "%s", dir);
    snprintf(conf.policy, sizeof(conf.policy), "latest");
    conf.instances = n;   /* models.instances = n, not its default (0) */
    registry *r = NULL;
    dl_err err = {0};
    cr_assert_eq(registry_new(&conf, true, NULL, NULL, bes, n, &r, &err), DL_OK, "%s", err.msg);
    return r;
}

#endif
