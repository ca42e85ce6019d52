/* test_gpu_gen.c: generation on the CUDA backend against the CPU's: a
 * decoder-only transformer, an encoder-decoder and an LSTM decoder with
 * the same random weights on both devices decode the same prompts
 * greedily (the key-value cache, cross-attention's cached source and the
 * recurrent states through cuDNN's hx/hy), and on CUDA the cache gives
 * the ids that recomputing each prefix gives. Prints a line a check and
 * exits 1 if any failed, 77 ("SKIP: no CUDA device") without a GPU. No
 * Criterion: the GPU machine has none. */
#define _POSIX_C_SOURCE 200809L
#include "nn/dl_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP 5
#define MAXT 24

static const char *models[][2] = {
    { "transformer",
      "{'name': 'lm', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
      "'max_length': 64}], 'layers': ["
      "{'name': 'emb', 'type': 'embedding', 'num_embeddings': 256, 'dim': 32},"
      "{'name': 'pos', 'type': 'pos_embedding', 'max_length': 64},"
      "{'name': 'ln1', 'type': 'layernorm'},"
      "{'name': 'att', 'type': 'attention', 'heads': 4, 'causal': true},"
      "{'name': 'res', 'type': 'add', 'inputs': ['pos', 'att']},"
      "{'name': 'fc1', 'type': 'dense', 'units': 64},"
      "{'name': 'act', 'type': 'gelu'},"
      "{'name': 'logits', 'type': 'dense', 'units': 256}],"
      "'outputs': [{'name': 'logits', 'from': 'logits', 'loss': 'next_token', 'of': 'ids'}],"
      "'generate': {'input': 'ids', 'output': 'logits', 'eos': '~'}}" },
    { "encoder-decoder",
      "{'name': 'mt', 'inputs': [{'name': 'src', 'datatype': 'BYTES', 'shape': [1], "
      "'tokenizer': {'type': 'bytes'}, 'max_length': 64}, "
      "{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], 'max_length': 64}], 'layers': ["
      "{'name': 'semb', 'type': 'embedding', 'inputs': ['src'], 'num_embeddings': 256, "
      "'dim': 32},"
      "{'name': 'enc', 'type': 'attention', 'heads': 4},"
      "{'name': 'demb', 'type': 'embedding', 'inputs': ['ids'], 'num_embeddings': 256, "
      "'dim': 32},"
      "{'name': 'dpos', 'type': 'pos_embedding', 'max_length': 64},"
      "{'name': 'self', 'type': 'attention', 'heads': 4, 'causal': true},"
      "{'name': 'cross', 'type': 'attention', 'heads': 4, 'inputs': ['self', 'enc']},"
      "{'name': 'logits', 'type': 'dense', 'units': 256}],"
      "'outputs': [{'name': 'logits', 'from': 'logits', 'loss': 'next_token', 'of': 'ids'}],"
      "'generate': {'input': 'ids', 'output': 'logits', 'source': 'src', 'eos': '~'}}" },
    { "lstm",
      "{'name': 'rnn', 'inputs': [{'name': 'ids', 'datatype': 'INT64', 'shape': [-1], "
      "'max_length': 64}], 'layers': ["
      "{'name': 'emb', 'type': 'embedding', 'num_embeddings': 256, 'dim': 32},"
      "{'name': 'rnn', 'type': 'lstm', 'hidden': 48, 'layers': 2, 'return': 'sequence'},"
      "{'name': 'logits', 'type': 'dense', 'units': 256}],"
      "'outputs': [{'name': 'logits', 'from': 'logits', 'loss': 'next_token', 'of': 'ids'}],"
      "'generate': {'input': 'ids', 'output': 'logits', 'eos': '~'}}" },
};

static const char *prompts[NP] = { "In the beginning", "And God said", "x",
                                   "Let there be light: and there was light", "The" };

static int failures;

/* Greedy ids of every prompt, started together, on model m. */
static int decode(dl_model *m, const dl_gen_conf *gc, const dl_tokenizer *tok, bool recompute,
                  int32_t (*ids)[MAXT], int64_t *n)
{
    dl_err err = {0};
    dl_gen *g;
    dl_gen_seq *s[NP];
    dl_gen_params p;
    dl_gen_params_init(&p);
    p.max_tokens = MAXT;
    if (dl_gen_new(m, gc, tok, NP, 0, &g, &err) != DL_OK) {
        fprintf(stderr, "dl_gen_new: %s\n", err.msg);
        return -1;
    }
    dl_gen_set_recompute(g, recompute);
    for (int i = 0; i < NP; i++)
        if (dl_gen_start(g, prompts[i], strlen(prompts[i]), &p, &s[i], &err) != DL_OK) {
            fprintf(stderr, "dl_gen_start: %s\n", err.msg);
            return -1;
        }
    while (dl_gen_running(g) > 0)
        if (dl_gen_step(g, &err) != DL_OK) {
            fprintf(stderr, "dl_gen_step: %s\n", err.msg);
            return -1;
        }
    for (int i = 0; i < NP; i++) {
        const int32_t *got = dl_gen_ids(s[i], &n[i]);
        memcpy(ids[i], got, (size_t)n[i] * sizeof(int32_t));
    }
    dl_gen_free(g);
    return 0;
}

static void compare(const char *what, int32_t (*a)[MAXT], const int64_t *na,
                    int32_t (*b)[MAXT], const int64_t *nb)
{
    for (int i = 0; i < NP; i++) {
        int64_t k = 0;
        while (k < na[i] && k < nb[i] && a[i][k] == b[i][k])
            k++;
        bool ok = na[i] == nb[i] && k == na[i];
        printf("%-40s prompt %d  %s", what, i, ok ? "PASS\n" : "FAIL");
        if (!ok)
            printf(": %lld and %lld ids, first difference at %lld\n", (long long)na[i],
                   (long long)nb[i], (long long)k);
        failures += !ok;
    }
}

static int check_model(dl_backend *cpu, dl_backend *gpu, const char *name, const char *json)
{
    char text[4096], what[96];
    snprintf(text, sizeof(text), "%s", json);
    for (char *c = text; *c; c++)
        if (*c == '\'')
            *c = '"';
    dl_err err = {0};
    dl_model_conf *conf;
    dl_gen_conf gc;
    dl_tokenizer *tok;
    dl_model *mc, *mg;
    bool has;
    if (dl_model_conf_parse(text, strlen(text), name, &conf, &err) != DL_OK ||
        dl_gen_conf_read(text, name, conf, &gc, &has, &err) != DL_OK ||
        dl_tokenizer_new(&gc.tok, &tok, &err) != DL_OK ||
        dl_model_new(cpu, conf, 3, &mc, &err) != DL_OK ||
        dl_model_new(gpu, conf, 3, &mg, &err) != DL_OK) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return -1;
    }
    int64_t np, ng;
    float *pc = dl_model_params(mc, &np), *pg = dl_model_params(mg, &ng);
    gpu->ops->upload(gpu, pg, pc, (size_t)np * sizeof(float));   /* the CPU's weights */
    int32_t a[NP][MAXT], b[NP][MAXT], c[NP][MAXT];
    int64_t na[NP], nb[NP], nc[NP];
    if (decode(mc, &gc, tok, false, a, na) || decode(mg, &gc, tok, false, b, nb) ||
        decode(mg, &gc, tok, true, c, nc))
        return -1;
    snprintf(what, sizeof(what), "%s: cuda against cpu", name);
    compare(what, b, nb, a, na);
    snprintf(what, sizeof(what), "%s: cuda cache against recompute", name);
    compare(what, b, nb, c, nc);
    dl_model_free(mc);
    dl_model_free(mg);
    dl_tokenizer_free(tok);
    dl_gen_conf_release(&gc);
    dl_model_conf_free(conf);
    return 0;
}

int main(void)
{
    dl_err err = {0};
    dl_backend *cpu, *gpu;
    if (dl_backend_new("cuda", NULL, &gpu, &err) != DL_OK) {
        printf("SKIP: no CUDA device (%s)\n", err.msg);
        return 77;
    }
    if (dl_backend_new("cpu", NULL, &cpu, &err) != DL_OK) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        if (check_model(cpu, gpu, models[i][0], models[i][1]) != 0)
            failures++;
    dl_backend_free(gpu);
    dl_backend_free(cpu);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
