/* file.c: whole-file reads and atomic writes (temporary file, fsync,
 * rename, fsync of the folder), so readers never see half a file. */
#define _POSIX_C_SOURCE 200809L
#include "util/dl_util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dl_status dl_file_read(const char *path, char **out, size_t *len, dl_err *err)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
        }
    }
    if (!buf) {
        fclose(f);
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    }
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        free(buf);
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(e));
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return DL_OK;
}

static dl_status write_all(int fd, const void *p, size_t n, const char *path,
                           dl_err *err)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
        }
        c += w;
        n -= (size_t)w;
    }
    return DL_OK;
}

dl_status dl_file_write_atomic(const char *path, const void *const *parts,
                               const size_t *lens, int nparts, dl_err *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    char *dir = strdup(path);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    dl_status st = DL_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = dl_err_set(err, DL_ERR_IO, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    for (int i = 0; i < nparts && st == DL_OK; i++)
        st = write_all(fd, parts[i], lens[i], tmp, err);
    if (st == DL_OK && fchmod(fd, 0644) != 0)
        st = dl_err_set(err, DL_ERR_IO, "%s: %s", tmp, strerror(errno));
    if (st == DL_OK && fsync(fd) != 0)
        st = dl_err_set(err, DL_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == DL_OK)
        st = dl_err_set(err, DL_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (st == DL_OK && rename(tmp, path) != 0)
        st = dl_err_set(err, DL_ERR_IO, "%s: rename: %s", path, strerror(errno));
    if (st != DL_OK) {
        unlink(tmp);
        goto out;
    }
    /* The rename is durable only once the folder itself is synced. */
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
out:
    free(tmp);
    free(dir);
    return st;
}

dl_status dl_mkdir(const char *path, dl_err *err)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return DL_OK;
    return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
}
