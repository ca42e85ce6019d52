/* fuzz_json.c: the hot-path JSON scanner (src/serve/oip/json_scan.c) against
 * jansson: every document one accepts the other accepts, and the values
 * the scanner reads (strings, numbers, keys, float arrays) are those
 * jansson reads. */
#include "fuzz.h"
#include "serve/oip/json_scan.h"

#include <jansson.h>
#include <math.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_quiet();
    return 0;
}

/* Reads the next value of s and checks it against j (jansson's reading of
 * the same text). False when the scan failed (it must not: jansson took
 * the document). */
static bool same(json_scan *s, const json_t *j);

static bool same_array(json_scan *s, const json_t *j)
{
    js_iter it;
    if (!js_array(s, &it))
        return false;
    size_t n = json_array_size(j);
    /* The fast path first: the leading elements that are finite floats. */
    float x[64];
    size_t got = js_floats(s, &it, x, n < 64 ? n : 64, false);
    for (size_t i = 0; i < got; i++) {
        const json_t *e = json_array_get(j, i);
        FZ_CHECK(json_is_number(e), "element %zu read as a float is not a number", i);
        FZ_CHECK(x[i] == (float)json_number_value(e), "element %zu: %.9g vs %.9g", i,
                 (double)x[i], json_number_value(e));
    }
    size_t i = got;
    while (js_element(s, &it)) {
        FZ_CHECK(i < n, "more elements than jansson's %zu", n);
        if (!same(s, json_array_get(j, i++)))
            return false;
    }
    if (s->failed)
        return false;
    FZ_CHECK(i == n, "%zu elements, jansson %zu", i, n);
    return true;
}

static bool same_object(json_scan *s, const json_t *j)
{
    js_iter it;
    if (!js_object(s, &it))
        return false;
    const char *key;
    size_t klen, n = 0;
    while (js_member(s, &it, &key, &klen)) {
        FZ_CHECK(strlen(key) == klen, "key with a NUL inside");
        const json_t *v = json_object_get(j, key);
        FZ_CHECK(v != NULL, "key '%s' unknown to jansson", key);
        n++;
        if (!same(s, v))
            return false;
    }
    if (s->failed)
        return false;
    FZ_CHECK(n == json_object_size(j), "%zu members, jansson %zu", n, json_object_size(j));
    return true;
}

static bool same(json_scan *s, const json_t *j)
{
    switch (js_peek(s)) {
    case JS_OBJECT:
        FZ_CHECK(json_is_object(j), "object vs jansson type %d", json_typeof(j));
        return same_object(s, j);
    case JS_ARRAY:
        FZ_CHECK(json_is_array(j), "array vs jansson type %d", json_typeof(j));
        return same_array(s, j);
    case JS_STRING: {
        FZ_CHECK(json_is_string(j), "string vs jansson type %d", json_typeof(j));
        const char *str;
        size_t len;
        if (!js_string(s, &str, &len))
            return false;
        FZ_CHECK(len == json_string_length(j) && !memcmp(str, json_string_value(j), len),
                 "string '%s' vs jansson '%s'", str, json_string_value(j));
        return true;
    }
    case JS_NUMBER: {
        js_num n;
        if (!js_number(s, &n))
            return false;
        if (json_is_integer(j)) {
            json_int_t i = json_integer_value(j);
            FZ_CHECK(n.integer, "integer %lld read as a real", (long long)i);
            FZ_CHECK(n.fits ? n.i == i : n.v == (double)i, "integer %lld read as %lld / %.17g",
                     (long long)i, (long long)n.i, n.v);
        } else {
            FZ_CHECK(json_is_real(j), "number vs jansson type %d", json_typeof(j));
            FZ_CHECK(!n.integer && n.v == json_real_value(j), "real %.17g read as %.17g",
                     json_real_value(j), n.v);
        }
        return true;
    }
    case JS_TRUE:
    case JS_FALSE: {
        bool b;
        if (!js_bool(s, &b))
            return false;
        FZ_CHECK(json_is_boolean(j) && b == json_is_true(j), "boolean differs");
        return true;
    }
    case JS_NULL:
        FZ_CHECK(json_is_null(j), "null vs jansson type %d", json_typeof(j));
        return js_skip(s);
    case JS_NONE:
        break;
    }
    FZ_CHECK(false, "no value where jansson read type %d", json_typeof(j));
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    json_error_t jerr;
    json_t *j = json_loadb(text, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    json_scan s;
    js_init(&s, text, size);
    /* A NUL byte is never JSON; jansson takes a number followed by one. */
    bool nul = memchr(data, 0, size) != NULL;
    if (j && !nul) {
        bool ok = same(&s, j) && js_end(&s);
        dl_err err = {0};
        if (!ok)
            js_error(&s, &err);
        FZ_CHECK(ok, "jansson took the document, the scanner refused it: %s", err.msg);
    } else {
        bool ok = js_skip(&s) && js_end(&s);
        enum json_error_code code = j ? json_error_unknown : json_error_code(&jerr);
        /* jansson refuses numbers past its range; the scanner reads them as
         * +-HUGE_VAL or inexact doubles (the requests' checks refuse those). */
        FZ_CHECK(!ok || (!nul && code == json_error_numeric_overflow),
                 "the scanner took what jansson refused: %s", j ? "a NUL byte" : jerr.text);
        if (!ok) {
            dl_err err = {0};
            fz_check_failure(js_error(&s, &err), &err);
        }
    }
    js_fini(&s);
    json_decref(j);
    return 0;
}
