/* fixture.h: set-up shared by the Criterion suites: temporary files and
 * folders, whole files written and read, paths in the source tree, the CPU
 * backend, a small classifier's model configuration and a repository
 * model folder.
 *
 * Every helper asserts (cr_assert) on failure, so a test stops at a broken
 * fixture rather than at a confusing later check; teardown helpers only
 * report. Results in static buffers stay valid while the test runs (each
 * Criterion test is its own process); none of this is thread-safe.
 * Include after the test's feature macro (_POSIX_C_SOURCE 200809L or
 * _XOPEN_SOURCE 700: mkdtemp, mkstemp) and <criterion/criterion.h>. */
#ifndef DL_TEST_FIXTURE_H
#define DL_TEST_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/dl_nn.h"

/* ---- temporary files and folders ----------------------------------------- */

/* Creates a new empty folder /tmp/dl_test_<tag>.XXXXXX and writes its path
 * into dir (size bytes). Remove it with fx_rmtree. */
static inline void fx_tmpdir(char *dir, size_t size, const char *tag)
{
    int n = snprintf(dir, size, "/tmp/dl_test_%s.XXXXXX", tag);
    cr_assert(n > 0 && (size_t)n < size, "fx_tmpdir: buffer too small for %s", tag);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

/* Creates a new empty file /tmp/dl_test_<tag>.XXXXXX and writes its path
 * into path (size bytes). The caller unlinks it. */
static inline void fx_tmpfile(char *path, size_t size, const char *tag)
{
    int n = snprintf(path, size, "/tmp/dl_test_%s.XXXXXX", tag);
    cr_assert(n > 0 && (size_t)n < size, "fx_tmpfile: buffer too small for %s", tag);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp %s", path);
    close(fd);
}

/* Removes path and, if it is a folder, everything under it (links are
 * removed, not followed). For teardowns: failures are printed, not
 * asserted, and a missing path is not a failure. */
static inline void fx_rmtree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            char sub[1024];
            for (struct dirent *e; (e = readdir(d));) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                int n = snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
                if (n > 0 && (size_t)n < sizeof(sub))
                    fx_rmtree(sub);
            }
            closedir(d);
        }
    }
    if (remove(path) != 0)
        fprintf(stderr, "fixture: could not remove %s\n", path);
}

/* "dir/name", in one of 8 rotating buffers, so that several paths can be
 * live in one expression. Borrowed: overwritten 8 calls later. */
static inline const char *fx_join(const char *dir, const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    int n = snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
    cr_assert(n > 0 && (size_t)n < sizeof(bufs[0]), "fx_join: path too long");
    return b;
}

/* ---- whole files ----------------------------------------------------------- */

/* Writes len bytes of buf to path, replacing what was there. */
static inline void fx_write(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    cr_assert_eq(fwrite(buf, 1, len, f), len, "short write to %s", path);
    cr_assert_eq(fclose(f), 0, "cannot close %s", path);
}

/* Writes the string text to path, replacing what was there. */
static inline void fx_write_text(const char *path, const char *text)
{
    fx_write(path, text, strlen(text));
}

/* Reads the whole of path. The result is new (free), NUL-terminated; its
 * length goes to *len when len is not NULL. */
static inline char *fx_read(const char *path, size_t *len)
{
    char *text = NULL;
    size_t n = 0;
    dl_err err = {0};
    cr_assert_eq(dl_file_read(path, &text, &n, &err), DL_OK, "%s", err.msg);
    if (len)
        *len = n;
    return text;
}

/* ---- the source tree --------------------------------------------------------- */

/* "<source root>/rel": meson passes the root in DLSERVE_SOURCE_ROOT. In one
 * of 4 rotating buffers; borrowed: overwritten 4 calls later. */
static inline const char *fx_source_path(const char *rel)
{
    static char bufs[4][1024];
    static int next;
    const char *root = getenv("DLSERVE_SOURCE_ROOT");
    cr_assert_not_null(root, "DLSERVE_SOURCE_ROOT is not set (meson sets it)");
    char *b = bufs[next++ % 4];
    int n = snprintf(b, sizeof(bufs[0]), "%s/%s", root, rel);
    cr_assert(n > 0 && (size_t)n < sizeof(bufs[0]), "fx_source_path: path too long");
    return b;
}

/* ---- JSON written in C strings --------------------------------------------- */

/* text with every ' turned into ", so that JSON cases read like the JSON
 * they are. Borrowed: one static buffer, overwritten by the next call. */
static inline const char *fx_dq(const char *text)
{
    static char buf[8192];
    cr_assert(strlen(text) < sizeof(buf), "fx_dq: text too long");
    if (text != buf)
        strcpy(buf, text);
    for (char *p = buf; *p; p++)
        if (*p == '\'')
            *p = '"';
    return buf;
}

/* ---- backend and models ------------------------------------------------------ */

/* A CPU backend with one thread, so that results do not depend on the
 * machine. New (dl_backend_free). */
static inline dl_backend *fx_cpu_backend(void)
{
    dl_backend *be = NULL;
    dl_err err = {0};
    cr_assert_eq(dl_backend_cpu_new(1, &be, &err), DL_OK, "%s", err.msg);
    return be;
}

/* Fills *conf as a small classifier named "tiny": samples [1, 2, 2] (4
 * values) on input "pixels", 3 classes with the given labels (borrowed)
 * on output "probs", no layers. The caller sets the input scaling. */
static inline void fx_tiny_classifier(dl_model_conf *conf, char **labels3)
{
    memset(conf, 0, sizeof(*conf));
    strcpy(conf->name, "tiny");
    strcpy(conf->input_name, "pixels");
    strcpy(conf->output_name, "probs");
    conf->in_ndim = 3;
    conf->in_shape[0] = 1, conf->in_shape[1] = 2, conf->in_shape[2] = 2;
    conf->nlabels = 3;
    conf->labels = labels3;
    /* inputs[0] and outputs[0], which the single-input fields mirror */
    static dl_input_conf in;
    static dl_output_conf out;
    in = (dl_input_conf){.ndim = 3, .shape = {1, 2, 2}, .dim = 4, .dtype = DL_IN_FP32,
                         .sc = {1.0f, 0.0f, 1.0f}};
    strcpy(in.name, "pixels");
    out = (dl_output_conf){.loss = DL_LOSS_XENT, .weight = 1, .nlabels = 3, .labels = labels3,
                           .dim = 3, .served = 3, .tcols = 1};
    strcpy(out.name, "probs");
    conf->ninputs = conf->noutputs = 1;
    conf->inputs = &in;
    conf->outputs = &out;
}

/* The model.json of fx_repo_model: 4 inputs, one dense layer, 3 classes. */
#define FX_REPO_MODEL_JSON                                                          \
    "{\"name\": \"%s\", \"input\": {\"shape\": [4]},"                               \
    " \"layers\": [{\"name\": \"fc\", \"type\": \"dense\", \"units\": 3}],"         \
    " \"loss\": \"softmax_cross_entropy\"}"

/* Writes a tiny classifier's folder into the model repository dir:
 * <dir>/<name>/model.json and, with weights, version 1's weights (seed 1)
 * on be. */
static inline void fx_repo_model(dl_backend *be, const char *dir, const char *name,
                                 bool weights)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s/model.json", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, FX_REPO_MODEL_JSON, name);
    fclose(f);
    if (!weights)
        return;
    dl_err err = {0};
    dl_model_conf *conf = NULL;
    dl_model *m = NULL;
    cr_assert_eq(dl_model_conf_load(path, &conf, &err), DL_OK, "%s", err.msg);
    cr_assert_eq(dl_model_new(be, conf, 1, &m, &err), DL_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/%s/1", dir, name);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s/1/model.safetensors", dir, name);
    cr_assert_eq(dl_model_save(m, path, NULL, &err), DL_OK, "%s", err.msg);
    dl_model_free(m);
    dl_model_conf_free(conf);
}

#endif
