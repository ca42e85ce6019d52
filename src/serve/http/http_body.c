/* http_body.c: content codings over HTTP: request bodies sent with
 * Content-Encoding gzip or deflate, inflated as they arrive into a buffer
 * no larger than http.max_body_bytes + 1 (a body that inflates past the
 * limit is refused without inflating the rest), and answers compressed
 * with gzip when Accept-Encoding asks for it and the answer is worth it. */
#define _GNU_SOURCE   /* strncasecmp; microhttpd.h's socket types */
#include "serve/http/http_int.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* zlib's windowBits: 15 (32 KiB window), + 16 for a gzip wrapper. */
#define ZWIN_GZIP (15 + 16)
#define ZWIN_ZLIB 15
/* The first output buffer of an inflated body (it doubles from there). */
#define INFLATE_FIRST 16384

/* ---- request bodies ------------------------------------------------------ */

/* Whether `coding` (one token, n bytes) names what s holds. */
static bool token_is(const char *s, size_t n, const char *coding)
{
    return strlen(coding) == n && strncasecmp(s, coding, n) == 0;
}

/* The coding's token of a header value, trimmed: *s and *n. */
static void trim(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

bool http_body_coding(request *rq, const char *ce)
{
    if (!ce)
        return true;
    const char *s = ce;
    size_t n = strlen(ce);
    trim(&s, &n);
    if (n == 0 || token_is(s, n, "identity"))
        return true;
    int bits = token_is(s, n, "gzip") || token_is(s, n, "x-gzip") ? ZWIN_GZIP
               : token_is(s, n, "deflate")                         ? ZWIN_ZLIB
                                                                   : 0;
    if (!bits)
        return false;   /* another coding, or several: 415 */
    rq->coding = bits == ZWIN_GZIP ? "gzip" : "deflate";
    rq->z = calloc(1, sizeof(*rq->z));
    if (!rq->z || inflateInit2(rq->z, bits) != Z_OK) {
        free(rq->z);
        rq->z = NULL;
        rq->nomem = true;
    }
    return true;
}

/* Room for more output: the buffer doubled, up to limit + 1 bytes (the
 * byte past the limit tells a body that is too large). */
static bool grow(request *rq, size_t max)
{
    size_t cap = rq->cap ? 2 * rq->cap : INFLATE_FIRST;
    if (cap > max + 1 || cap < rq->cap)
        cap = max + 1;
    char *p = realloc(rq->body, cap);
    if (!p) {
        rq->nomem = true;
        return false;
    }
    rq->body = p;
    rq->cap = cap;
    return true;
}

/* Marks the body bad: the decoder's message kept, the output freed. */
static void bad_body(request *rq, const char *msg)
{
    snprintf(rq->coding_err, sizeof(rq->coding_err), "%s", msg ? msg : "corrupt data");
    rq->bad_coding = true;
}

void http_body_inflate(request *rq, const char *data, size_t n, size_t max)
{
    z_stream *z = rq->z;
    z->next_in = (Bytef *)data;
    z->avail_in = (uInt)n;
    while (z->avail_in > 0 && !rq->too_big && !rq->nomem && !rq->bad_coding) {
        if (rq->z_end) {
            /* gzip allows members one after another; zlib's format does not */
            if (strcmp(rq->coding, "gzip") != 0 || inflateReset(z) != Z_OK) {
                bad_body(rq, "data after the end of the stream");
                break;
            }
            rq->z_end = false;
        }
        if (rq->len == rq->cap && !grow(rq, max))
            break;
        z->next_out = (Bytef *)rq->body + rq->len;
        z->avail_out = (uInt)(rq->cap - rq->len);
        int r = inflate(z, Z_NO_FLUSH);
        rq->len = rq->cap - z->avail_out;
        if (rq->len > max)
            rq->too_big = true;
        else if (r == Z_STREAM_END)
            rq->z_end = true;
        else if (r == Z_MEM_ERROR)
            rq->nomem = true;
        else if (r != Z_OK && r != Z_BUF_ERROR)
            bad_body(rq, z->msg);
    }
    if (rq->too_big || rq->bad_coding || rq->nomem) {
        free(rq->body);
        rq->body = NULL;
        rq->len = rq->cap = 0;
    }
}

bool http_body_error(request *rq, answer *a)
{
    if (!rq->z || rq->too_big || rq->nomem)
        return false;
    if (!rq->bad_coding && !rq->z_end && (rq->len > 0 || rq->z->total_in > 0))
        bad_body(rq, "the stream ends early");
    if (!rq->bad_coding)
        return false;
    *a = http_status_answer(DL_ERR_INVALID, "the body is not valid %s (Content-Encoding): %s",
                            rq->coding, rq->coding_err);
    return true;
}

void http_body_fini(request *rq)
{
    if (!rq->z)
        return;
    inflateEnd(rq->z);
    free(rq->z);
    rq->z = NULL;
}

/* ---- answers --------------------------------------------------------------- */

/* Whether one item of Accept-Encoding (s, n bytes) accepts gzip: "gzip"
 * or "*", without q=0. */
static bool item_accepts_gzip(const char *s, size_t n)
{
    const char *semi = memchr(s, ';', n);
    size_t tn = semi ? (size_t)(semi - s) : n;
    trim(&s, &tn);
    if (!token_is(s, tn, "gzip") && !token_is(s, tn, "x-gzip") && !token_is(s, tn, "*"))
        return false;
    if (!semi)
        return true;
    const char *q = semi + 1, *end = s + n;
    while (q < end && (*q == ' ' || *q == '\t'))
        q++;
    if (end - q < 2 || strncasecmp(q, "q=", 2) != 0)
        return true;
    return strtod(q + 2, NULL) > 0.0;
}

static bool accepts_gzip(const char *ae)
{
    for (const char *s = ae; s && *s;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        if (item_accepts_gzip(s, n))
            return true;
        s = comma ? comma + 1 : NULL;
    }
    return false;
}

/* src (n bytes) as a gzip member in *out (new) and *outlen; false when it
 * does not get smaller or memory runs short. */
static bool gzip_bytes(const char *src, size_t n, char **out, size_t *outlen)
{
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, ZWIN_GZIP, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK)
        return false;
    size_t cap = deflateBound(&z, (uLong)n);
    char *buf = malloc(cap);
    z.next_in = (Bytef *)src;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)cap;
    int r = buf ? deflate(&z, Z_FINISH) : Z_MEM_ERROR;
    size_t len = cap - z.avail_out;
    deflateEnd(&z);
    if (r != Z_STREAM_END || len >= n) {
        free(buf);
        return false;
    }
    *out = buf;
    *outlen = len;
    return true;
}

bool http_answer_compress(struct MHD_Connection *c, answer *a)
{
    size_t len = a->len ? a->len : a->body ? strlen(a->body) : 0;
    if (!a->body || a->code >= 300 || len < HTTP_GZIP_MIN || len > UINT32_MAX)
        return false;
    /* the answer depends on Accept-Encoding from here on */
    if (!accepts_gzip(MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_ACCEPT_ENCODING)))
        return true;
    char *z;
    size_t zlen;
    if (!gzip_bytes(a->body, len, &z, &zlen))
        return true;
    if (!a->page)
        free(a->body);
    a->body = z;
    a->len = zlen;
    a->gzip = true;
    return true;
}
