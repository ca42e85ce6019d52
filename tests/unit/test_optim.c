/* test_optim.c: SGD, momentum, Nesterov and Adam steps (with and without
 * weight decay) against hand-computed values, AdamW and Adagrad against
 * PyTorch's, clipping by global norm, optimizer state sizes, and the
 * learning-rate schedules of dl_lr_at. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_nn.h"

static dl_backend *be;
static dl_optim *o;

static void setup(void) { be = fx_cpu_backend(); }

static void teardown(void)
{
    dl_optim_free(o);
    o = NULL;
    dl_backend_free(be);
}

TestSuite(optim, .init = setup, .fini = teardown, .timeout = 10);

/* ---- helpers ------------------------------------------------------------ */

static dl_hparams hparams(dl_optim_kind kind)
{
    return (dl_hparams){ .epochs = 1, .batch_size = 1, .optimizer = kind, .lr = 0.1,
                         .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999,
                         .schedule = DL_SCHED_NONE,
                         .step_epochs = 1, .gamma = 0.1 };
}

static void make_optim(const dl_hparams *hp, int64_t n)
{
    dl_err err = {0};
    cr_assert_eq(dl_optim_new(be, hp, n, &o, &err), DL_OK, "%s", err.msg);
}

static void expect_near(const float *got, const double *want, int n, double tol,
                        const char *what)
{
    for (int i = 0; i < n; i++)
        cr_expect(fabs(got[i] - want[i]) <= tol, "%s[%d] = %.9g, want %.9g", what, i,
                  got[i], want[i]);
}

/* ---- SGD and momentum ---------------------------------------------------- */

Test(optim, sgd)
{
    dl_hparams hp = hparams(DL_OPTIM_SGD);
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 0.5f, -1.0f, 2.0f };
    dl_optim_step(o, p, g, 0.1);          /* p -= lr g */
    expect_near(p, (double[]){ 0.95, -1.9, 0.3 }, 3, 1e-6, "step 1");
    dl_optim_step(o, p, g, 0.1);
    expect_near(p, (double[]){ 0.9, -1.8, 0.1 }, 3, 1e-6, "step 2");
    int64_t n = -1;
    dl_optim_state(o, &n);
    cr_expect_eq(n, 0, "SGD keeps no state");
    cr_expect_eq(dl_optim_steps(o), 2);
}

Test(optim, sgd_uses_the_given_lr)
{
    dl_hparams hp = hparams(DL_OPTIM_SGD);   /* hp.lr = 0.1 must not be used */
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 0.5f, -1.0f, 2.0f };
    dl_optim_step(o, p, g, 0.5);
    expect_near(p, (double[]){ 0.75, -1.5, -0.5 }, 3, 1e-6, "lr 0.5");
}

Test(optim, sgd_weight_decay)
{
    dl_hparams hp = hparams(DL_OPTIM_SGD);
    hp.weight_decay = 0.5;
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 0.0f, 0.0f, 1.0f };
    dl_optim_step(o, p, g, 0.1);          /* p -= lr (g + wd p) */
    expect_near(p, (double[]){ 0.95, -1.9, 0.375 }, 3, 1e-6, "step 1");
    dl_optim_step(o, p, g, 0.1);
    expect_near(p, (double[]){ 0.9025, -1.805, 0.25625 }, 3, 1e-6, "step 2");
}

Test(optim, momentum)
{
    /* PyTorch: v = mu v + g; p -= lr v */
    dl_hparams hp = hparams(DL_OPTIM_MOMENTUM);
    make_optim(&hp, 3);
    int64_t n = -1;
    float *v = dl_optim_state(o, &n);
    cr_assert_eq(n, 3, "momentum keeps one buffer");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(v[i], 0.0f, "the buffer starts at zero");
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 1.0f, -0.5f, 2.0f };
    dl_optim_step(o, p, g, 0.1);          /* v = g */
    expect_near(p, (double[]){ 0.9, -1.95, 0.3 }, 3, 1e-6, "step 1");
    dl_optim_step(o, p, g, 0.1);          /* v = 1.9 g */
    expect_near(p, (double[]){ 0.71, -1.855, -0.08 }, 3, 1e-6, "step 2");
    dl_optim_step(o, p, g, 0.1);          /* v = 2.71 g */
    expect_near(p, (double[]){ 0.439, -1.7195, -0.622 }, 3, 1e-6, "step 3");
    expect_near(v, (double[]){ 2.71, -1.355, 5.42 }, 3, 1e-6, "v");
}

Test(optim, momentum_weight_decay)
{
    dl_hparams hp = hparams(DL_OPTIM_MOMENTUM);
    hp.weight_decay = 0.1;
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 0.0f, 0.0f, 0.0f };
    dl_optim_step(o, p, g, 0.1);          /* g' = 0.1 p; v = g'; p = 0.99 p */
    expect_near(p, (double[]){ 0.99, -1.98, 0.495 }, 3, 1e-6, "step 1");
    dl_optim_step(o, p, g, 0.1);          /* v = 0.9 (0.1 p0) + 0.1 p1 */
    expect_near(p, (double[]){ 0.9711, -1.9422, 0.48555 }, 3, 1e-6, "step 2");
}

Test(optim, nesterov)
{
    /* PyTorch: v = mu v + g; p -= lr (g + mu v) */
    dl_hparams hp = hparams(DL_OPTIM_MOMENTUM);
    hp.nesterov = true;
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 1.0f, -0.5f, 2.0f };
    dl_optim_step(o, p, g, 0.1);          /* v = g: p -= 0.1 * 1.9 g */
    expect_near(p, (double[]){ 0.81, -1.905, 0.12 }, 3, 1e-6, "step 1");
    dl_optim_step(o, p, g, 0.1);          /* v = 1.9 g: p -= 0.1 * 2.71 g */
    expect_near(p, (double[]){ 0.539, -1.7695, -0.422 }, 3, 1e-6, "step 2");
}

Test(optim, nesterov_weight_decay)
{
    dl_hparams hp = hparams(DL_OPTIM_MOMENTUM);
    hp.nesterov = true;
    hp.weight_decay = 0.1;
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 1.0f, -0.5f, 2.0f };
    dl_optim_step(o, p, g, 0.1);          /* g' = g + 0.1 p; p -= 0.1 * 1.9 g' */
    expect_near(p, (double[]){ 0.791, -1.867, 0.1105 }, 3, 1e-6, "step 1");
}

/* ---- Adam -------------------------------------------------------------- */

/* PyTorch's Adam in double: L2 decay added to the gradient, bias-corrected
 * moments, eps added after the square root. */
static void adam_ref(double *p, double *m, double *v, const float *g, int n,
                     double lr, double b1, double b2, double eps, double wd, int t)
{
    for (int i = 0; i < n; i++) {
        double gi = g[i] + wd * p[i];
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        double mhat = m[i] / (1.0 - pow(b1, t)), vhat = v[i] / (1.0 - pow(b2, t));
        p[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

/* Two Adam steps from p = {1, -2, 0.5} against adam_ref. */
static void adam_case(double wd, double eps)
{
    dl_hparams hp = hparams(DL_OPTIM_ADAM);
    hp.weight_decay = wd;
    hp.eps = eps;
    make_optim(&hp, 3);
    int64_t n = -1;
    float *state = dl_optim_state(o, &n);
    cr_assert_eq(n, 6, "Adam keeps two buffers");
    float p[3] = { 1.0f, -2.0f, 0.5f };
    double rp[3] = { 1.0, -2.0, 0.5 }, rm[3] = { 0 }, rv[3] = { 0 };
    const float g[2][3] = { { 0.5f, -1.0f, 2.0f }, { -0.3f, 0.2f, 1.0f } };
    for (int t = 1; t <= 2; t++) {
        dl_optim_step(o, p, g[t - 1], 0.01);
        adam_ref(rp, rm, rv, g[t - 1], 3, 0.01, 0.9, 0.999, eps, wd, t);
        char what[32];
        snprintf(what, sizeof(what), "step %d", t);
        expect_near(p, rp, 3, 1e-6, what);
    }
    expect_near(state, rm, 3, 1e-6, "first moment");
    expect_near(state + 3, rv, 3, 1e-7, "second moment");
    cr_expect_eq(dl_optim_steps(o), 2);
}

Test(optim, adam_first_step_moves_by_lr)
{
    /* Bias correction makes the first step lr * g / |g| (up to eps). */
    dl_hparams hp = hparams(DL_OPTIM_ADAM);
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    const float g[3] = { 0.5f, -1.0f, 2.0f };
    dl_optim_step(o, p, g, 0.01);
    expect_near(p, (double[]){ 0.99, -1.99, 0.49 }, 3, 1e-6, "step 1");
}

Test(optim, adam_two_steps)
{
    adam_case(0.0, 1e-8);
}

Test(optim, adam_weight_decay)
{
    adam_case(0.1, 1e-8);
}

Test(optim, adam_eps_outside_bias_correction)
{
    /* A large eps shows where it is added: sqrt(v_hat) + eps, as PyTorch. */
    adam_case(0.0, 0.1);
}

/* ---- AdamW and Adagrad against PyTorch ------------------------------------
 * Two steps from p = {1, -2, 0.5} with the gradients g1 and g2 below; the
 * values are torch 1.13's, printed by:
 *
 *   import torch
 *   def run(cls, **kw):
 *       p = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
 *       opt = cls([p], **kw)
 *       for g in ([0.5, -1.0, 2.0], [-0.3, 0.2, 1.0]):
 *           p.grad = torch.tensor(g)
 *           opt.step()
 *           print(["%.9g" % x for x in p.detach()])
 *       print({k: ["%.9g" % x for x in v] for k, v in opt.state[p].items()
 *              if v.dim() > 0})
 *   run(torch.optim.AdamW, lr=0.01, weight_decay=0.0)
 *   run(torch.optim.AdamW, lr=0.01, weight_decay=0.1)
 *   run(torch.optim.Adagrad, lr=0.1)
 *   run(torch.optim.Adagrad, lr=0.1, weight_decay=0.1)
 */

static const float g12[2][3] = { { 0.5f, -1.0f, 2.0f }, { -0.3f, 0.2f, 1.0f } };

/* Two steps of `kind` at lr against PyTorch's parameters after each
 * (want[0], want[1]) and its state after the second (state, nstate floats). */
static void torch_case(dl_optim_kind kind, double lr, double wd, const double want[2][3],
                       const double *state, int64_t nstate)
{
    dl_hparams hp = hparams(kind);
    hp.weight_decay = wd;
    make_optim(&hp, 3);
    float p[3] = { 1.0f, -2.0f, 0.5f };
    for (int t = 0; t < 2; t++) {
        dl_optim_step(o, p, g12[t], lr);
        char what[32];
        snprintf(what, sizeof(what), "step %d", t + 1);
        expect_near(p, want[t], 3, 1e-6, what);
    }
    int64_t n = -1;
    const float *s = dl_optim_state(o, &n);
    cr_assert_eq(n, nstate);
    expect_near(s, state, (int)n, 1e-6, "state");
}

Test(optim, adamw)
{
    /* Without weight decay AdamW is Adam. */
    torch_case(DL_OPTIM_ADAMW, 0.01, 0.0,
               (const double[2][3]){ { 0.99000001, -1.99000001, 0.49000001 },
                                     { 0.988085032, -1.98488975, 0.480678201 } },
               (const double[]){ 0.0149999969, -0.0699999928, 0.280000001,
                                 0.000339750026, 0.001039, 0.00499600032 }, 6);
}

Test(optim, adamw_weight_decay)
{
    /* Decoupled: p *= 1 - lr wd, the moments see the gradient alone. */
    torch_case(DL_OPTIM_ADAMW, 0.01, 0.1,
               (const double[2][3]){ { 0.989000022, -1.98800004, 0.489500016 },
                                     { 0.986096084, -1.98090184, 0.479688704 } },
               (const double[]){ 0.0149999969, -0.0699999928, 0.280000001,
                                 0.000339750026, 0.001039, 0.00499600032 }, 6);
}

Test(optim, adagrad)
{
    torch_case(DL_OPTIM_ADAGRAD, 0.1, 0.0,
               (const double[2][3]){ { 0.899999976, -1.89999998, 0.400000006 },
                                     { 0.951449573, -1.91961157, 0.355278641 } },
               (const double[]){ 0.340000004, 1.03999996, 5.0 }, 3);
}

Test(optim, adagrad_weight_decay)
{
    torch_case(DL_OPTIM_ADAGRAD, 0.1, 0.1,
               (const double[2][3]){ { 0.899999976, -1.89999998, 0.400000006 },
                                     { 0.933035016, -1.90083325, 0.354757369 } },
               (const double[]){ 0.404100031, 1.44010007, 5.28409958 }, 3);
}

Test(optim, adagrad_default_eps)
{
    /* eps 0 means Adagrad's 1e-10: a gradient of 1e-9 moves p by
     * lr / 1.1 (Adam's 1e-8 would give lr / 11). PyTorch: -0.0909090936. */
    dl_hparams hp = hparams(DL_OPTIM_ADAGRAD);
    make_optim(&hp, 1);
    float p[1] = { 0.0f };
    dl_optim_step(o, p, (const float[]){ 1e-9f }, 0.1);
    expect_near(p, (double[]){ -0.0909090936 }, 1, 1e-7, "step 1");
}

Test(optim, adamw_delta_matches_step)
{
    /* Parameter averaging's form: with params = anchor + delta, delta
     * takes AdamW's decay from the parameters, as the direct step. */
    dl_hparams hp = hparams(DL_OPTIM_ADAMW);
    hp.weight_decay = 0.1;
    dl_optim *direct = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_optim_new(be, &hp, 3, &direct, &err), DL_OK, "%s", err.msg);
    make_optim(&hp, 3);
    const float anchor[3] = { 1.0f, -2.0f, 0.5f };
    float p[3] = { 1.0f, -2.0f, 0.5f }, delta[3] = { 0 }, params[3];
    for (int t = 0; t < 2; t++) {
        float g[3];
        memcpy(g, g12[t], sizeof(g));
        for (int i = 0; i < 3; i++)
            params[i] = anchor[i] + delta[i];
        dl_optim_step(direct, p, g12[t], 0.01);
        dl_optim_step_delta(o, delta, params, g, 0.01);
    }
    for (int i = 0; i < 3; i++)
        params[i] = anchor[i] + delta[i];
    expect_near(params, (double[]){ p[0], p[1], p[2] }, 3, 1e-6, "anchor + delta");
    dl_optim_free(direct);
}

/* ---- clipping by global norm ---------------------------------------------- */

Test(optim, clip_norm_scales_above_the_limit)
{
    float g[2] = { 3.0f, 4.0f };   /* norm 5 */
    double norm = dl_clip_grad_norm(be, g, 2, 1.0);
    cr_expect(fabs(norm - 5.0) < 1e-12, "norm %.12g", norm);
    /* scaled by 1 / (5 + 1e-6); PyTorch: 0.599999905, 0.799999833 */
    expect_near(g, (double[]){ 3.0 / 5.000001, 4.0 / 5.000001 }, 2, 1e-7, "clipped");
}

Test(optim, clip_norm_leaves_a_smaller_norm)
{
    /* At the limit itself, 5 / (5 + 1e-6) < 1 still scales, as PyTorch. */
    float g[2] = { 3.0f, 4.0f };
    cr_expect(fabs(dl_clip_grad_norm(be, g, 2, 5.00001) - 5.0) < 1e-12);
    cr_expect(g[0] == 3.0f && g[1] == 4.0f, "just below the limit: %g %g", g[0], g[1]);
    cr_expect(fabs(dl_clip_grad_norm(be, g, 2, 100.0) - 5.0) < 1e-12);
    cr_expect(g[0] == 3.0f && g[1] == 4.0f, "far below it: %g %g", g[0], g[1]);
}

Test(optim, clip_norm_over_many_blocks)
{
    /* 300,000 values of 0.5 (a sum over several blocks): norm^2 75,000. */
    int64_t n = 300000;
    float *g = malloc((size_t)n * sizeof(float));
    cr_assert_not_null(g);
    for (int64_t i = 0; i < n; i++)
        g[i] = i % 2 ? 0.5f : -0.5f;
    double norm = dl_clip_grad_norm(be, g, n, 2.0);
    cr_expect(fabs(norm - sqrt(75000.0)) < 1e-9, "norm %.12g", norm);
    double want = 0.5 * 2.0 / (sqrt(75000.0) + 1e-6);
    cr_expect(fabs(g[0] + want) < 1e-9 && fabs(g[n - 1] - want) < 1e-9, "%.9g %.9g", g[0],
              g[n - 1]);
    free(g);
}

Test(optim, state_sizes)
{
    const dl_optim_kind kinds[5] = { DL_OPTIM_SGD, DL_OPTIM_MOMENTUM, DL_OPTIM_ADAM,
                                     DL_OPTIM_ADAGRAD, DL_OPTIM_ADAMW };
    const int64_t want[5] = { 0, 5, 10, 5, 10 };
    for (int k = 0; k < 5; k++) {
        dl_hparams hp = hparams(kinds[k]);
        make_optim(&hp, 5);
        int64_t n = -1;
        float *s = dl_optim_state(o, &n);
        cr_expect_eq(n, want[k], "%s: state of %lld floats", dl_optim_name(kinds[k]),
                     (long long)n);
        for (int64_t i = 0; i < n; i++)
            cr_expect_eq(s[i], 0.0f);
        cr_expect_eq(dl_optim_steps(o), 0);
        dl_optim_free(o);
        o = NULL;
    }
}

/* ---- schedules ------------------------------------------------------------ */

static dl_hparams sched(dl_sched_kind kind, double warmup_epochs)
{
    dl_hparams hp = hparams(DL_OPTIM_SGD);
    hp.schedule = kind;
    hp.warmup_epochs = warmup_epochs;
    return hp;
}

#define EXPECT_LR(hp, step, spe, total, want)                                  \
    do {                                                                       \
        double got_ = dl_lr_at((hp), (step), (spe), (total));                  \
        cr_expect(fabs(got_ - (want)) <= 1e-12 + 1e-9 * fabs(want),            \
                  "lr at step %d: %.12g, want %.12g", (int)(step), got_,       \
                  (double)(want));                                             \
    } while (0)

Test(optim, schedule_none_is_constant)
{
    dl_hparams hp = sched(DL_SCHED_NONE, 0.0);
    for (int s = 0; s < 100; s += 7)
        EXPECT_LR(&hp, s, 10, 100, 0.1);
    EXPECT_LR(&hp, 99, 10, 100, 0.1);
}

Test(optim, schedule_step)
{
    dl_hparams hp = sched(DL_SCHED_STEP, 0.0);
    hp.step_epochs = 2;
    hp.gamma = 0.5;
    /* 10 steps an epoch: gamma applies every 20 steps */
    EXPECT_LR(&hp, 0, 10, 100, 0.1);
    EXPECT_LR(&hp, 19, 10, 100, 0.1);
    EXPECT_LR(&hp, 20, 10, 100, 0.05);
    EXPECT_LR(&hp, 39, 10, 100, 0.05);
    EXPECT_LR(&hp, 40, 10, 100, 0.025);
    EXPECT_LR(&hp, 99, 10, 100, 0.1 * pow(0.5, 4));
}

Test(optim, schedule_cosine)
{
    dl_hparams hp = sched(DL_SCHED_COSINE, 0.0);
    EXPECT_LR(&hp, 0, 10, 100, 0.1);
    EXPECT_LR(&hp, 25, 10, 100, 0.05 * (1.0 + cos(3.14159265358979323846 / 4.0)));
    EXPECT_LR(&hp, 50, 10, 100, 0.05);
    double last = dl_lr_at(&hp, 99, 10, 100);
    cr_expect(last >= 0.0 && last < 1e-3 * 0.1, "last step lr %g is not about 0", last);
    for (int s = 1; s < 100; s++)
        cr_expect(dl_lr_at(&hp, s, 10, 100) < dl_lr_at(&hp, s - 1, 10, 100),
                  "cosine must decrease at step %d", s);
}

Test(optim, schedule_linear_warmup)
{
    /* warm-up of half an epoch of 10 steps: 5 steps, lr/5 .. lr */
    dl_hparams hp = sched(DL_SCHED_COSINE, 0.5);
    EXPECT_LR(&hp, 0, 10, 105, 0.1 / 5.0);
    EXPECT_LR(&hp, 1, 10, 105, 0.2 / 5.0);
    EXPECT_LR(&hp, 4, 10, 105, 0.1);
    /* then cosine over the remaining 100 steps */
    EXPECT_LR(&hp, 5, 10, 105, 0.1);
    EXPECT_LR(&hp, 55, 10, 105, 0.05);
    cr_expect(dl_lr_at(&hp, 104, 10, 105) < 1e-4);

    hp = sched(DL_SCHED_STEP, 1.0);       /* one epoch of 4 steps */
    hp.step_epochs = 2;
    hp.gamma = 0.5;
    EXPECT_LR(&hp, 0, 4, 40, 0.025);
    EXPECT_LR(&hp, 3, 4, 40, 0.1);
    EXPECT_LR(&hp, 4, 4, 40, 0.1);
    EXPECT_LR(&hp, 8, 4, 40, 0.05);
}
