/* repo.c: the layout of a model folder in the repository: numbered version
 * folders (listing, newest, next, version policies) and checkpoint files. */
#define _POSIX_C_SOURCE 200809L
#include "nn/dl_nn.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Longer digit strings are not numbers of ours (and might not fit int64). */
#define MAX_DIGITS 18

/* A model folder path (up to 4096 bytes), an entry name (up to 255) and
 * "/model.safetensors" or "/model.onnx". */
enum { PATH_CAP = 4400 };

#define CKPT_PREFIX "step-"
#define CKPT_SUFFIX ".safetensors"

/* The number spelt by s[0, len): decimal digits only, 1 to MAX_DIGITS of
 * them; -1 for anything else (signs, spaces, other characters). */
static int64_t number_of(const char *s, size_t len)
{
    if (len == 0 || len > MAX_DIGITS)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Whether v belongs among the newest `max` of out (n entries, newest first). */
static bool wanted(const int64_t *out, int n, int max, int64_t v)
{
    return n < max || (max > 0 && v > out[n - 1]);
}

/* Inserts v into out (n entries, newest first, room for max), dropping the
 * oldest when full; call only when wanted(). Returns the new count. */
static int insert_newest_first(int64_t *out, int n, int max, int64_t v)
{
    if (n == max)
        n--;
    int k = n;
    for (; k > 0 && out[k - 1] < v; k--)
        out[k] = out[k - 1];
    out[k] = v;
    return n + 1;
}

/* The newest `max` versions whose folder holds one of the regular files
 * files[0..nfiles) (nfiles 0: any entry with a version name). */
static int versions_with(const char *model_dir, const char *const *files, int nfiles,
                         int64_t *out, int max)
{
    DIR *d = opendir(model_dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t v = number_of(e->d_name, strlen(e->d_name));
        if (v <= 0 || !wanted(out, n, max, v))
            continue;
        char path[PATH_CAP];
        struct stat sb;
        bool found = false;
        for (int k = 0; k < (nfiles ? nfiles : 1) && !found; k++) {
            int len = snprintf(path, sizeof(path), "%s/%s%s%s", model_dir, e->d_name,
                               nfiles ? "/" : "", nfiles ? files[k] : "");
            found = len > 0 && (size_t)len < sizeof(path) && stat(path, &sb) == 0 &&
                    (!nfiles || S_ISREG(sb.st_mode));
        }
        if (found)
            n = insert_newest_first(out, n, max, v);
    }
    closedir(d);
    return n;
}

int dl_repo_versions(const char *model_dir, bool need_weights, int64_t *out, int max)
{
    static const char *const weights[] = {"model.safetensors"};
    return versions_with(model_dir, weights, need_weights ? 1 : 0, out, max);
}

int dl_repo_served_versions(const char *model_dir, int64_t *out, int max)
{
    static const char *const files[] = {"model.safetensors", "model.onnx"};
    return versions_with(model_dir, files, 2, out, max);
}

int64_t dl_repo_latest(const char *model_dir)
{
    int64_t v;
    return dl_repo_versions(model_dir, true, &v, 1) ? v : 0;
}

int64_t dl_repo_next(const char *model_dir)
{
    int64_t v;
    return dl_repo_versions(model_dir, false, &v, 1) ? v + 1 : 1;
}

/* Whether the comma-separated list (as in "versions:1,3") names version v.
 * strtoll stops at a comma, so each item is read where it starts. */
static bool listed(const char *list, int64_t v)
{
    for (const char *p = list;; p++) {
        if (strtoll(p, NULL, 10) == v)
            return true;
        p = strchr(p, ',');
        if (!p)
            return false;
    }
}

int dl_repo_select(const char *policy, const int64_t *have, int nhave, int64_t *out)
{
    int n = 0;
    if (strncmp(policy, "versions:", 9) == 0) {
        for (int i = 0; i < nhave; i++)
            if (listed(policy + 9, have[i]))
                out[n++] = have[i];
        return n;
    }
    long keep = strncmp(policy, "latest:", 7) == 0 ? strtol(policy + 7, NULL, 10) : 1;
    for (int i = 0; i < nhave && i < keep; i++)
        out[n++] = have[i];
    return n;
}

int dl_repo_checkpoints(const char *model_dir, int64_t *out, int max)
{
    char dir[PATH_CAP];
    int len = snprintf(dir, sizeof(dir), "%s/checkpoints", model_dir);
    DIR *d = len >= 0 && (size_t)len < sizeof(dir) ? opendir(dir) : NULL;
    if (!d)
        return 0;
    const size_t pre = strlen(CKPT_PREFIX), suf = strlen(CKPT_SUFFIX);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        size_t nlen = strlen(name);
        if (nlen <= pre + suf || strncmp(name, CKPT_PREFIX, pre) != 0 ||
            strcmp(name + nlen - suf, CKPT_SUFFIX) != 0)
            continue;
        int64_t step = number_of(name + pre, nlen - pre - suf);
        if (step >= 0 && wanted(out, n, max, step))
            n = insert_newest_first(out, n, max, step);
    }
    closedir(d);
    return n;
}

void dl_repo_checkpoint_path(const char *model_dir, int64_t step, char *out, size_t len)
{
    snprintf(out, len, "%s/checkpoints/" CKPT_PREFIX "%09lld" CKPT_SUFFIX, model_dir,
             (long long)step);
}
