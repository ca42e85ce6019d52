/* http_answer.c: the answers the HTTP files build: JSON with its code, and
 * {"error": message} with the code of a failure's kind (oip_http_code) or
 * a code of its own. */
#define _GNU_SOURCE   /* microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <stdio.h>

answer http_json_answer(int code, json_t *j)
{
    answer a = {.code = code, .ctype = CT_JSON};
    a.body = j ? oip_dump(j) : NULL;
    json_decref(j);
    if (!a.body)
        a.code = 500;
    return a;
}

static answer error_answer_v(int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static answer error_answer_v(int code, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    return http_json_answer(code, oip_error("%s", msg));
}

answer http_error_answer(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    answer a = error_answer_v(code, fmt, ap);
    va_end(ap);
    return a;
}

answer http_status_answer(dl_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    answer a = error_answer_v(oip_http_code(st), fmt, ap);
    va_end(ap);
    return a;
}
