/* err.c: dl_err helpers and the assertion handler.
 * Errors carry a status code and one human-readable line. */
#include "util/dl_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dl_status dl_err_setv(dl_err *err, dl_status code, const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return code;
}

dl_status dl_err_set(dl_err *err, dl_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dl_err_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

dl_status dl_err_prefix(dl_err *err, const char *fmt, ...)
{
    if (!err)
        return DL_ERR_INVALID;
    char prefix[sizeof(err->msg)], old[sizeof(err->msg)];
    char joined[2 * sizeof(err->msg) + 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    snprintf(joined, sizeof(joined), "%s: %s", prefix, old);
    snprintf(err->msg, sizeof(err->msg), "%.*s", (int)sizeof(err->msg) - 1, joined);
    return err->code;
}

const char *dl_status_str(dl_status st)
{
    switch (st) {
    case DL_OK:              return "ok";
    case DL_ERR_NOMEM:       return "out of memory";
    case DL_ERR_INVALID:     return "invalid input";
    case DL_ERR_IO:          return "i/o error";
    case DL_ERR_BACKEND:     return "backend failure";
    case DL_ERR_UNAVAILABLE: return "unavailable";
    case DL_ERR_NOT_FOUND:   return "not found";
    case DL_ERR_BUSY:        return "busy";
    case DL_ERR_TOO_LARGE:   return "too large";
    case DL_ERR_TIMEOUT:     return "timed out";
    }
    return "unknown status";
}

void dl_assert_fail(const char *what, const char *file, int line)
{
    fprintf(stderr, "<2>assert: %s failed at %s:%d\n", what, file, line);
    abort();
}
