/* dl_train.h: training, evaluation, prediction and benchmarking of a
 * model from the model repository, as run by `dlserve --train`, `--eval`,
 * `--predict` and `--bench`. Depends on nn, data, tensor and util. */
#ifndef DL_TRAIN_H
#define DL_TRAIN_H

#include "nn/dl_gen.h"
#include "nn/dl_nn.h"
#include "train/dist/dl_dist.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DL_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

/* Options common to every mode, then training overrides. Negative
 * numbers (and NULL strings) mean "use model.json's value". */
/* What training reports to a listener (rank 0 only): after each epoch,
 * and once more when the version is written (version > 0). */
typedef struct dl_train_event {
    const char *model;          /* the model's name */
    int64_t     epoch, epochs;  /* 1-based epoch just finished */
    int64_t     step;           /* optimizer steps so far */
    double      train_loss, train_accuracy;
    double      test_accuracy;  /* < 0 when not measured */
    double      samples_per_s;
    int         ranks;          /* trainers */
    int64_t     version;        /* the version written; 0 before */
    const char *weights;        /* its model.safetensors; NULL before */
} dl_train_event;

typedef struct dl_run_opts {
    const char *model_dir;
    const char *data_dir;       /* NULL: DL_DEFAULT_DATA_DIR */
    const char *device;         /* NULL: "cpu" */
    int         threads;        /* <= 0: all online CPUs */
    int64_t     limit;          /* > 0: use only the first N samples of each split */
    int64_t     version;        /* eval / predict: <= 0 means the newest */
    const char *input;          /* predict: file or "-" */
    /* training overrides */
    int64_t     epochs, batch_size, seed;
    double      lr, momentum, weight_decay, clip_norm;   /* < 0: model.json's */
    int         optimizer;      /* dl_optim_kind, or -1 */
    int         nesterov;       /* 0 / 1, or -1 */
    int         progress;       /* 1 bar, 0 plain lines, -1 bar on a terminal */
    /* distributed training and checkpoints */
    dl_dist_conf dist;
    bool        dist_given;     /* --dist was on the command line */
    int64_t     checkpoint_every;  /* steps; 0: none */
    bool        resume;
    /* --train: stop after this many steps with a checkpoint (0: run to
     * the end); --bench: timed steps (0: 50) */
    int64_t     steps;
    /* GPU: --math tf32 (TF32 tensor-core GEMMs on CUDA); --infer-batch:
     * --bench measures inference only, at these batch sizes ("1,64"). */
    bool        tf32;
    const char *infer_batches;
    /* --eval, --predict, --bench: batch-invariant inference
     * (dl_model_set_batch_invariant): 1 on, 0 off, -1 as model.json's
     * "serving" block says, else DL_BATCH_INVARIANT_DEFAULT, as the daemon. */
    int         batch_invariant;
    /* --train: called with each dl_train_event (may be NULL) */
    void      (*on_event)(void *ctx, const dl_train_event *e);
    void       *event_ctx;
} dl_run_opts;

/* Fills o with the "use the model's defaults" values. */
void dl_run_opts_init(dl_run_opts *o);

/* Trains and writes MODEL_DIR/<next version>/{model.safetensors,
 * metrics.csv, curves.svg}; prints progress on stderr and one JSON
 * summary line on stdout. Under an MPI launcher every rank runs this: the
 * job trains as o->dist says and rank 0 prints and writes. */
dl_status dl_train_run(const dl_run_opts *o, dl_err *err);

/* Evaluates a version on the test split; prints one JSON line. */
dl_status dl_eval_run(const dl_run_opts *o, dl_err *err);

/* Predicts the samples of o->input (IDX images, gzip'd or not, or CSV of
 * features, one sample a line); prints one JSON line per sample. */
dl_status dl_predict_run(const dl_run_opts *o, dl_err *err);

/* Measures training samples/s (o->steps steps of o->batch_size after a
 * warm-up) and inference samples/s at batch 256; prints one JSON line. */
dl_status dl_bench_run(const dl_run_opts *o, dl_err *err);

/* --bench with --infer-batch: inference samples/s of fresh weights on
 * input already in backend memory (the test set, repeated to fill a
 * batch), for each batch size: "eager" runs the forward pass op by op,
 * "graph" (CUDA only) replays it as a CUDA graph. Prints one JSON line
 * per batch size and mode. */
dl_status dl_bench_infer_run(const dl_run_opts *o, dl_err *err);

/* --generate's options; negative numbers (NULL strings) leave the
 * decoding parameters' defaults (dl_gen_params_init). */
#define DL_GEN_RUN_SEQS 32      /* sequences decoded at once by default */

typedef struct dl_gen_run_opts {
    const char *prompt;         /* --prompt TEXT, or */
    const char *prompts;        /* --prompts FILE: a prompt a line ("-": stdin) */
    int64_t     max_tokens, top_k, beam_width;
    double      temperature, top_p, length_penalty;
    const char *stop[DL_GEN_MAX_STOP];
    int         nstop;
    int64_t     max_seqs;       /* sequences at once; <= 0: DL_GEN_RUN_SEQS */
    bool        recompute;      /* every step recomputes the whole prefix */
    bool        ids;            /* answers carry the generated ids */
} dl_gen_run_opts;

/* Fills g with "the defaults" values. */
void dl_gen_run_opts_init(dl_gen_run_opts *g);

/* Generates for each prompt with a version of a model whose model.json
 * has a "generate" block (o->version, else the newest; o->seed, when
 * given, seeds sampling), all prompts running together as the decoder
 * has room; prints one JSON line an answer, in the prompts' order
 * (docs/generation.md). Errors: no generate block, bad parameters, a
 * prompt too long (naming its line). */
dl_status dl_gen_run(const dl_run_opts *o, const dl_gen_run_opts *g, dl_err *err);

#ifdef __cplusplus
}
#endif
#endif /* DL_TRAIN_H */
