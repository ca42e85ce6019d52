/* test_rnn.c: the lstm and gru layers in training: a classifier of id
 * sequences of mixed lengths (embedding, a recurrent layer's last state,
 * dense, softmax cross-entropy) and a BiLSTM-CRF tagger (the layer over
 * the sequence, dense a position, a crf output) train 20 SGD steps as
 * PyTorch does from the same initial weights (tests/py/seq_steps.py:
 * nn.LSTM / nn.GRU over pack_padded_sequence, the CRF's forward
 * algorithm), losses and final weights within 1e-4. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <criterion/criterion.h>

#include "fixture.h"
#include "nn/dl_nn.h"

TestSuite(rnn, .timeout = 120);

enum { N = 16, MAXLEN = 12, VOCAB = 30, CLASSES = 4, STEPS = 20 };

/* The classifier (or with crf the tagger) around `rnn` (a layer's JSON,
 * named 'rnn'). */
static const char *classifier(const char *rnn, bool crf)
{
    static char buf[2048];
    snprintf(buf, sizeof(buf),
             "{'name': 'seq-cls', 'inputs': [{'name': 'ids', 'datatype': 'INT64', "
             "'shape': [-1], 'max_length': %d}], 'layers': [{'name': 'emb', "
             "'type': 'embedding', 'num_embeddings': %d, 'dim': 8}, %s, {'name': 'cls', "
             "'type': 'dense', 'units': %d}], 'outputs': [{'name': 'cls', 'from': 'cls', "
             "'loss': '%s'}]}", MAXLEN, VOCAB, rnn, CLASSES,
             crf ? "crf" : "softmax_cross_entropy");
    return fx_dq(buf);
}

/* N packed samples (lengths 1 to MAXLEN, both among them), then N labels
 * (with crf, N rows of MAXLEN tags, -1 past the length). */
static void make_data(float *x, float *labels, bool crf)
{
    dl_rng rng;
    dl_rng_seed(&rng, 21);
    memset(x, 0, sizeof(float) * N * (1 + MAXLEN));
    for (int i = 0; i < N; i++) {
        int len = i == 0 ? MAXLEN : i == 1 ? 1 : 1 + (int)dl_rng_below(&rng, MAXLEN);
        float *row = x + i * (1 + MAXLEN);
        row[0] = (float)len;
        for (int k = 0; k < len; k++)
            row[1 + k] = (float)dl_rng_below(&rng, VOCAB);
        for (int k = 0; crf && k < MAXLEN; k++)
            labels[i * MAXLEN + k] = k < len ? (float)dl_rng_below(&rng, CLASSES) : -1.0f;
        if (!crf)
            labels[i] = (float)dl_rng_below(&rng, CLASSES);
    }
}

static bool have_torch(void)
{
    return system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* Reads the "losses" list of PyTorch's JSON line. */
static void torch_losses(const char *path, double *loss)
{
    static char json[8192];
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    size_t len = fread(json, 1, sizeof(json) - 1, f);
    fclose(f);
    json[len] = '\0';
    char *p = strchr(json, '[');
    cr_assert_not_null(p, "PyTorch printed: %s", json);
    for (int s = 0; s < STEPS; s++)
        loss[s] = strtod(p + 1, &p);
}

/* Trains the classifier (tagger) around `rnn` here and in PyTorch;
 * compares. */
static void trains_as_pytorch(const char *rnn, bool crf, double lr)
{
    /* scripts/test installs python3-torch: the peer missing is a failure */
    cr_assert(have_torch(), "/usr/bin/python3 has no torch (apt-get install python3-torch)");
    dl_err err = {0};
    const char *json = classifier(rnn, crf);
    dl_model_conf *conf = NULL;
    dl_model *m = NULL, *ref = NULL;
    dl_backend *be = fx_cpu_backend();
    cr_assert_eq(dl_model_conf_parse(json, strlen(json), "seq-cls.json", &conf, &err), DL_OK,
                 "%s", err.msg);
    cr_assert_eq(dl_model_new(be, conf, 5, &m, &err), DL_OK, "%s", err.msg);

    char dir[256], cmd[2048];
    fx_tmpdir(dir, sizeof(dir), "rnn");
    char spec[300], init[300], data[300], out[300];
    snprintf(spec, sizeof(spec), "%s/model.json", dir);
    snprintf(init, sizeof(init), "%s/init.safetensors", dir);
    snprintf(data, sizeof(data), "%s/data.f32", dir);
    snprintf(out, sizeof(out), "%s/out.safetensors", dir);
    FILE *f = fopen(spec, "w");
    cr_assert_not_null(f);
    fputs(json, f);
    fclose(f);
    cr_assert_eq(dl_model_save(m, init, NULL, &err), DL_OK, "%s", err.msg);
    static float x[N * (1 + MAXLEN)], labels[N * MAXLEN];
    make_data(x, labels, crf);
    f = fopen(data, "wb");
    cr_assert_not_null(f);
    fwrite(x, sizeof(x), 1, f);
    fwrite(labels, sizeof(float), crf ? N * MAXLEN : N, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 /usr/bin/python3 %s %s %s %s %d %d %g %s > "
             "%s/torch.json", fx_source_path("tests/py/seq_steps.py"), spec, init, data, N,
             STEPS, lr, out, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    double theirs[STEPS];
    torch_losses(fx_join(dir, "torch.json"), theirs);

    dl_hparams hp = { .optimizer = DL_OPTIM_SGD, .lr = lr };
    dl_optim *o = NULL;
    int64_t np;
    float *p = dl_model_params(m, &np), *g = dl_model_grads(m, &np);
    cr_assert_eq(dl_optim_new(be, &hp, np, &o, &err), DL_OK, "%s", err.msg);
    const float *xs[1] = { x };
    double worst_loss = 0.0, worst_weight = 0.0;
    for (int s = 0; s < STEPS; s++) {
        double loss;
        int64_t correct;
        dl_model_zero_grad(m);
        cr_assert_eq(dl_model_forward_multi(m, xs, N, true, &err), DL_OK, "%s", err.msg);
        cr_assert_eq(dl_model_loss(m, NULL, labels, 1.0f / N, true, &loss, &correct, &err),
                     DL_OK, "%s", err.msg);
        loss /= N;
        worst_loss = fmax(worst_loss, fabs(loss - theirs[s]));
        cr_expect(fabs(loss - theirs[s]) <= 1e-4, "step %d: loss %.7f, PyTorch %.7f", s, loss,
                  theirs[s]);
        cr_assert_eq(dl_model_backward(m, &err), DL_OK, "%s", err.msg);
        dl_optim_step(o, p, g, lr);
    }
    cr_expect(fabs(theirs[0] - theirs[STEPS - 1]) > 1e-2, "the loss hardly moved: %g to %g",
              theirs[0], theirs[STEPS - 1]);

    cr_assert_eq(dl_model_new(be, conf, 3, &ref, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_load(ref, out, &err), DL_OK, "%s", err.msg);
    const float *want = dl_model_params(ref, &np);
    for (int64_t i = 0; i < np; i++)
        worst_weight = fmax(worst_weight, fabs((double)p[i] - want[i]));
    cr_log_info("%s: losses %.4f to %.4f, within %.1e of PyTorch's; weights within %.1e",
                dl_layer_type_name(conf->layers[1].type), theirs[0], theirs[STEPS - 1],
                worst_loss, worst_weight);
    for (int64_t i = 0; i < np; i++)
        cr_expect(fabsf(p[i] - want[i]) <= 1e-4f, "weight %lld: %.7f, PyTorch %.7f",
                  (long long)i, p[i], want[i]);
    dl_optim_free(o);
    dl_model_free(ref);
    dl_model_free(m);
    dl_model_conf_free(conf);
    dl_backend_free(be);
    fx_rmtree(dir);
}

Test(rnn, lstm_classifier_trains_as_pytorch)
{
    trains_as_pytorch("{'name': 'rnn', 'type': 'lstm', 'hidden': 10, 'return': 'last'}", false,
                      0.5);
}

Test(rnn, stacked_bidirectional_gru_trains_as_pytorch)
{
    trains_as_pytorch("{'name': 'rnn', 'type': 'gru', 'hidden': 7, 'layers': 2, "
                      "'bidirectional': true, 'return': 'last'}", false, 0.5);
}

Test(rnn, bilstm_crf_tagger_trains_as_pytorch)
{
    trains_as_pytorch("{'name': 'rnn', 'type': 'lstm', 'hidden': 6, 'bidirectional': true}",
                      true, 0.1);
}
