/* run.c: `dlserve --eval` (accuracy of a version on the test split) and
 * `dlserve --predict` (class, label and score per input sample). */
#define _POSIX_C_SOURCE 200809L
#include "train/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

dl_status dl_eval_run(const dl_run_opts *o, dl_err *err)
{
    session s;
    dl_status st = session_open(&s, o, 1, err);
    if (st != DL_OK)
        return st;
    dl_dataset *test = NULL;
    st = session_load_weights(&s, o, err);
    if (st == DL_OK)
        st = session_data(&s, o, "test", &test, err);
    double loss = 0.0, acc = 0.0, t0 = dl_time_now();
    if (st == DL_OK)
        st = session_evaluate(&s, test, 256, &loss, &acc, err);
    if (st == DL_OK)
        printf("{\"model\":\"%s\",\"version\":%lld,\"accuracy\":%.4f,\"loss\":%.4f,"
               "\"samples\":%lld,\"samples_per_sec\":%.0f}\n",
               s.conf->name, (long long)s.version, acc, loss, (long long)test->n,
               (double)test->n / (dl_time_now() - t0));
    dl_dataset_free(test);
    session_close(&s);
    return st;
}

/* Standard input is copied to a temporary file so both readers apply. */
static dl_status stdin_to_file(char *path, size_t len, dl_err *err)
{
    snprintf(path, len, "/tmp/dlserve-predict-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return dl_err_set(err, DL_ERR_IO, "cannot create a temporary file");
    char buf[65536];
    size_t n;
    dl_status st = DL_OK;
    while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0)
        if (write(fd, buf, n) != (ssize_t)n)
            st = dl_err_set(err, DL_ERR_IO, "%s: short write", path);
    close(fd);
    return st;
}

/* IDX if the file starts like one (plain or gzip'd), CSV otherwise. */
static dl_status load_input(const char *path, const session *s, dl_dataset **out,
                            dl_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_err_set(err, DL_ERR_IO, "%s: cannot open", path);
    unsigned char head[4] = {0};
    size_t got = fread(head, 1, sizeof(head), f);
    fclose(f);
    bool idx = got >= 2 && ((head[0] == 0x1f && head[1] == 0x8b) ||
                            (got == 4 && head[0] == 0 && head[1] == 0 && head[2] == 0x08));
    int64_t dim = dl_model_in_dim(s->m);
    dl_status st = idx ? dl_dataset_load_idx(path, NULL, &s->sc, out, err)
                       : dl_dataset_load_csv(path, dim, false, &s->sc, out, err);
    if (st == DL_OK && (*out)->dim != dim) {
        st = dl_err_set(err, DL_ERR_INVALID, "%s: samples have %lld values, model '%s' takes %lld",
                        path, (long long)(*out)->dim, s->conf->name, (long long)dim);
        dl_dataset_free(*out);
        *out = NULL;
    }
    return st;
}

dl_status dl_predict_run(const dl_run_opts *o, dl_err *err)
{
    session s;
    dl_status st = session_open(&s, o, 1, err);
    if (st != DL_OK)
        return st;
    char tmp[64] = "";
    const char *path = o->input ? o->input : "-";
    dl_dataset *ds = NULL;
    float *out = NULL;
    st = session_load_weights(&s, o, err);
    if (st == DL_OK && strcmp(path, "-") == 0) {
        st = stdin_to_file(tmp, sizeof(tmp), err);
        path = tmp;
    }
    if (st == DL_OK)
        st = load_input(path, &s, &ds, err);
    if (st == DL_OK) {
        dl_dataset_truncate(ds, o->limit);
        int64_t k = dl_model_out_dim(s.m);
        out = malloc((size_t)(ds->n * k + 1) * sizeof(float));
        st = out ? dl_model_predict(s.m, ds->x, ds->n, 256, out, err)
                 : dl_err_set(err, DL_ERR_NOMEM, "predictions");
        for (int64_t i = 0; st == DL_OK && i < ds->n; i++) {
            const float *p = out + i * k;
            int64_t best = 0;
            for (int64_t j = 1; j < k; j++)
                if (p[j] > p[best])
                    best = j;
            printf("{\"index\":%lld,\"class\":%lld,\"label\":\"%s\",\"score\":%.4f}\n",
                   (long long)i, (long long)best,
                   best < s.conf->nlabels ? s.conf->labels[best] : "", p[best]);
        }
    }
    if (tmp[0])
        unlink(tmp);
    free(out);
    dl_dataset_free(ds);
    session_close(&s);
    return st;
}
