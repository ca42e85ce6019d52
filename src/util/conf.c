/* conf.c: option tables: defaults, INI files (inih), DLSERVE_* environment
 * overrides, bounds checks, the INI printout and the Markdown reference.
 *
 * Values: integers are whole decimal strings with an optional binary
 * suffix k/K (x1024), m/M (x1024^2) or g/G (x1024^3); doubles are strict
 * strtod; bools are true/false/yes/no/on/off/1/0 (any case); strings must
 * fit their buffer with the NUL; enumerations are one of their words,
 * exactly, stored as the word's value; custom options are whatever their
 * parse function accepts. An INT or DOUBLE option whose min and max are
 * both 0 is unbounded.
 *
 * File syntax is inih's, with three changes made by our line reader:
 * leading blanks are dropped (so there are no continuation lines), lines
 * longer than inih's 200-byte buffer are an error instead of being split,
 * and a header naming an unknown section is an error on its own line.
 * Comments start a line with ';' or '#', or follow a value as " ;", so a
 * value in a file cannot contain " ;" nor start or end with blanks.
 *
 * Any value, in a file or a DLSERVE_* variable, may hold ${env:NAME} (the
 * variable's value) and ${file:PATH} (a regular file's one line, its
 * trailing newline dropped): secrets stay out of the file. The printout shows the values
 * of secret keys (dl_conf_secret_key) as ***.
 *
 * Loading a file or the environment fills a copy of the table's part of
 * the struct and commits it only on success, so a failed SIGHUP reload
 * changes nothing; `raw` calls already made cannot be undone, so a raw
 * callback should collect into something the caller drops on failure. */
#define _POSIX_C_SOURCE 200809L
#include "util/dl_util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Without inih the tables still work (defaults, environment, --set,
 * printouts); only reading a file needs it. */
#ifdef DL_HAVE_INIH
#include <ini.h>
#endif

/* "path:line" or a variable name; paths are at most a few hundred bytes. */
#define ORIGIN_MAX 1280

/* The characters of a file line: inih's buffer less the '\n' and the NUL. */
#ifdef INI_MAX_LINE
#define LINE_TEXT_MAX (INI_MAX_LINE - 2)
#else
#define LINE_TEXT_MAX 198
#endif

/* ---- values -------------------------------------------------------------- */

static size_t opt_size(const dl_opt *o)
{
    switch (o->type) {
    case DL_OPT_INT:    return sizeof(int64_t);
    case DL_OPT_DOUBLE: return sizeof(double);
    case DL_OPT_BOOL:   return sizeof(bool);
    case DL_OPT_STRING: return o->size;
    case DL_OPT_ENUM:   return sizeof(int);
    case DL_OPT_CUSTOM: return o->size;
    }
    return 0;
}

/* Bytes of the config struct that the table covers: what a copy must hold. */
static size_t conf_extent(const dl_opt *opts)
{
    size_t n = 0;
    for (const dl_opt *o = opts; o->key; o++)
        if (o->offset + opt_size(o) > n)
            n = o->offset + opt_size(o);
    return n;
}

static bool bounded(const dl_opt *o) { return o->min != 0 || o->max != 0; }

static bool parse_int(const char *s, int64_t *out)
{
    if (!*s || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE)
        return false;
    int64_t mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = INT64_C(1) << 10; end++; break;
    case 'm': case 'M': mult = INT64_C(1) << 20; end++; break;
    case 'g': case 'G': mult = INT64_C(1) << 30; end++; break;
    default: break;
    }
    if (*end || v > INT64_MAX / mult || v < INT64_MIN / mult)
        return false;
    *out = (int64_t)v * mult;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    if (!*s || isspace((unsigned char)*s))
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++) {
        if (!strcasecmp(s, yes[i]) || !strcasecmp(s, no[i])) {
            *out = !strcasecmp(s, yes[i]);
            return true;
        }
    }
    return false;
}

/* ---- words and names ------------------------------------------------------ */

void dl_opt_words_str(const dl_opt_word *words, char *buf, size_t len)
{
    size_t n = 0, off = 0;
    while (words[n].word)
        n++;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i < n && off < len; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        int w = snprintf(buf + off, len - off, "%s%s", sep, words[i].word);
        if (w < 0)
            break;
        off += (size_t)w;
    }
}

bool dl_opt_word_value(const dl_opt_word *words, const char *word, int *value)
{
    for (const dl_opt_word *w = words; w->word; w++) {
        if (strcmp(w->word, word) == 0) {
            *value = w->value;
            return true;
        }
    }
    return false;
}

const char *dl_opt_word_name(const dl_opt_word *words, int value)
{
    for (const dl_opt_word *w = words; w->word; w++)
        if (w->value == value)
            return w->word;
    return "?";
}

bool dl_parse_name_num(const char *s, char *name, size_t len, int64_t *n)
{
    const char *colon = strchr(s, ':');
    size_t nlen = colon ? (size_t)(colon - s) : strlen(s);
    if (len > 0) {
        size_t copy = nlen < len - 1 ? nlen : len - 1;
        memcpy(name, s, copy);
        name[copy] = '\0';
    }
    *n = -1;
    if (!colon)
        return true;
    /* 18 digits stay below INT64_MAX (about 9.2e18), so no overflow check. */
    int64_t v = 0;
    size_t digits = 0;
    for (const char *p = colon + 1; *p; p++, digits++) {
        if (!isdigit((unsigned char)*p) || digits == 18)
            return false;
        v = v * 10 + (*p - '0');
    }
    if (digits == 0)
        return false;
    *n = v;
    return true;
}

/* ---- setting values -------------------------------------------------------- */

/* "origin: [section] key 'value' is invalid: expected a, b or c". */
static dl_status invalid_word(const dl_opt *o, const char *value, const char *origin,
                              dl_err *err)
{
    char words[160];
    dl_opt_words_str(o->words, words, sizeof(words));
    return dl_err_set(err, DL_ERR_INVALID, "%s: [%s] %s '%.60s' is invalid: expected %s",
                      origin, o->section, o->key, value, words);
}

/* Stores text into o's field, or leaves it alone and fails: errors read
 * "origin: [section] key: ...", or invalid_word's for a word that an
 * enumeration or custom option refuses. */
static dl_status set_value(const dl_opt *o, void *conf, const char *value,
                           const char *origin, dl_err *err)
{
    char *field = (char *)conf + o->offset;
#define FAIL(...)                                                             \
    do {                                                                      \
        char why_[160];                                                       \
        snprintf(why_, sizeof(why_), __VA_ARGS__);                            \
        return dl_err_set(err, DL_ERR_INVALID, "%s: [%s] %s: %s", origin,     \
                          o->section, o->key, why_);                          \
    } while (0)

    switch (o->type) {
    case DL_OPT_INT: {
        int64_t v;
        if (!parse_int(value, &v))
            FAIL("'%.40s' is not an integer", value);
        if (bounded(o) && ((double)v < o->min || (double)v > o->max))
            FAIL("%.40s is out of range [%.0f, %.0f]", value, o->min, o->max);
        memcpy(field, &v, sizeof(v));
        break;
    }
    case DL_OPT_DOUBLE: {
        double v;
        if (!parse_double(value, &v))
            FAIL("'%.40s' is not a number", value);
        if (bounded(o) && (v < o->min || v > o->max))
            FAIL("%.40s is out of range [%g, %g]", value, o->min, o->max);
        memcpy(field, &v, sizeof(v));
        break;
    }
    case DL_OPT_BOOL: {
        bool v;
        if (!parse_bool(value, &v))
            FAIL("'%.40s' is not a boolean (true/false, yes/no, on/off, 1/0)", value);
        memcpy(field, &v, sizeof(v));
        break;
    }
    case DL_OPT_STRING: {
        size_t len = strlen(value);
        if (len >= o->size)
            FAIL("value is too long (%zu characters, at most %zu)", len, o->size - 1);
        /* Zero the tail too, so equal configs compare equal byte for byte. */
        memset(field, 0, o->size);
        memcpy(field, value, len);
        break;
    }
    case DL_OPT_ENUM: {
        int v;
        if (!dl_opt_word_value(o->words, value, &v))
            return invalid_word(o, value, origin, err);
        memcpy(field, &v, sizeof(v));
        break;
    }
    case DL_OPT_CUSTOM: {
        char why[160] = "";
        if (!o->parse(value, field, why, sizeof(why))) {
            if (!why[0])
                return invalid_word(o, value, origin, err);
            FAIL("%s", why);
        }
        break;
    }
    }
#undef FAIL
    return DL_OK;
}

static bool section_known(const dl_opt *opts, const char *section)
{
    for (const dl_opt *o = opts; o->key; o++)
        if (!strcmp(o->section, section))
            return true;
    return false;
}

dl_status dl_conf_set(const dl_opt *opts, void *conf, const char *section,
                      const char *key, const char *value, const char *origin,
                      dl_err *err)
{
    for (const dl_opt *o = opts; o->key; o++)
        if (!strcmp(o->section, section) && !strcmp(o->key, key))
            return set_value(o, conf, value, origin, err);
    if (!*section)
        return dl_err_set(err, DL_ERR_INVALID, "%s: key '%.60s' is outside any section",
                          origin, key);
    if (!section_known(opts, section))
        return dl_err_set(err, DL_ERR_INVALID, "%s: unknown section [%.60s]", origin,
                          section);
    return dl_err_set(err, DL_ERR_INVALID, "%s: [%s] unknown key '%.60s'", origin,
                      section, key);
}

dl_status dl_conf_defaults(const dl_opt *opts, void *conf, dl_err *err)
{
    for (const dl_opt *o = opts; o->key; o++) {
        dl_status st = set_value(o, conf, o->def, "default", err);
        if (st != DL_OK)
            return st;
    }
    return DL_OK;
}

/* A copy of the table's part of conf, so that a failed load changes nothing. */
static dl_status conf_copy(const dl_opt *opts, const void *conf, void **out, dl_err *err)
{
    size_t n = conf_extent(opts);
    *out = malloc(n ? n : 1);
    if (!*out)
        return dl_err_set(err, DL_ERR_NOMEM, "configuration copy");
    memcpy(*out, conf, n);
    return DL_OK;
}

/* ---- secrets: ${env:NAME} and ${file:PATH} --------------------------------- */

/* Appends len bytes to out (size bytes) at *n; false when they do not fit. */
static bool append(char *out, size_t size, size_t *n, const char *s, size_t len)
{
    if (*n + len >= size)
        return false;
    memcpy(out + *n, s, len);
    *n += len;
    out[*n] = '\0';
    return true;
}

/* The contents of path, less one trailing newline, appended to out. */
static dl_status file_text(const char *path, char *out, size_t size, size_t *n, dl_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_err_set(err, DL_ERR_IO, "${file:%s}: %s", path, strerror(errno));
    /* a FIFO or a device could block or never end */
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return dl_err_set(err, DL_ERR_INVALID, "${file:%s}: not a regular file", path);
    }
    size_t room = size - *n, got = fread(out + *n, 1, room, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (e)
        return dl_err_set(err, DL_ERR_IO, "${file:%s}: %s", path, strerror(e));
    if (got == room)
        return dl_err_set(err, DL_ERR_INVALID, "${file:%s}: the value is too long (at most "
                          "%zu bytes)", path, size - 1);
    if (got > 0 && out[*n + got - 1] == '\n')
        got--;
    if (got > 0 && out[*n + got - 1] == '\r')
        got--;
    if (memchr(out + *n, '\0', got) || memchr(out + *n, '\n', got) ||
        memchr(out + *n, '\r', got))
        return dl_err_set(err, DL_ERR_INVALID, "${file:%s}: the file holds more than one "
                          "line (or a NUL byte)", path);
    *n += got;
    out[*n] = '\0';
    return DL_OK;
}

/* One reference, name[0..len) after "${env:" or "${file:", appended to out. */
static dl_status reference(bool env, const char *name, size_t len, char *out, size_t size,
                           size_t *n, dl_err *err)
{
    char ref[DL_CONF_VALUE_MAX];
    if (len == 0 || len >= sizeof(ref))
        return dl_err_set(err, DL_ERR_INVALID, "${%s:...}: %s", env ? "env" : "file",
                          len ? "the name is too long" : "the name is empty");
    memcpy(ref, name, len);
    ref[len] = '\0';
    if (!env)
        return file_text(ref, out, size, n, err);
    const char *v = getenv(ref);
    if (!v)
        return dl_err_set(err, DL_ERR_INVALID, "environment variable %s is not set "
                          "(${env:%s})", ref, ref);
    if (strchr(v, '\n') || strchr(v, '\r'))
        return dl_err_set(err, DL_ERR_INVALID, "${env:%s}: the value holds a line break",
                          ref);
    if (!append(out, size, n, v, strlen(v)))
        return dl_err_set(err, DL_ERR_INVALID, "${env:%s}: the value is too long (at most "
                          "%zu bytes)", ref, size - 1);
    return DL_OK;
}

dl_status dl_conf_expand(const char *value, char *out, size_t size, dl_err *err)
{
    DL_ASSERT(size > 0);
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = value; *p;) {
        bool env = !strncmp(p, "${env:", 6), file = !strncmp(p, "${file:", 7);
        if (!env && !file) {
            if (!append(out, size, &n, p, 1))
                return dl_err_set(err, DL_ERR_INVALID, "the value is too long (at most "
                                  "%zu bytes)", size - 1);
            p++;
            continue;
        }
        const char *name = p + (env ? 6 : 7), *end = strchr(name, '}');
        if (!end)
            return dl_err_set(err, DL_ERR_INVALID, "'%.8s...' has no closing '}'", p);
        dl_status st = reference(env, name, (size_t)(end - name), out, size, &n, err);
        if (st != DL_OK)
            return st;
        p = end + 1;
    }
    return DL_OK;
}

/* Whether text matches pattern, where '*' stands for any run of characters. */
static bool glob_match(const char *pattern, const char *text)
{
    if (*pattern == '*')
        return glob_match(pattern + 1, text) || (*text && glob_match(pattern, text + 1));
    if (!*pattern)
        return !*text;
    return tolower((unsigned char)*pattern) == tolower((unsigned char)*text) &&
           glob_match(pattern + 1, text + 1);
}

bool dl_conf_secret_key(const char *key)
{
    static const char *const patterns[] = {"*password*", "*secret*", "*token*", "ssl.key.*",
                                           "sasl.jaas.config", NULL};
    for (int i = 0; patterns[i]; i++)
        if (glob_match(patterns[i], key))
            return true;
    return false;
}

#ifdef DL_HAVE_INIH
/* ---- INI files ------------------------------------------------------------ */

typedef struct parse_ctx {
    const dl_opt       *opts;
    void               *conf;        /* the copy being filled */
    const char         *path;
    const char *const  *passthrough;
    dl_conf_raw_fn      raw;
    void               *raw_ctx;
    dl_err             *err;
    FILE               *f;
    int                 lineno;      /* line last handed to inih */
    int                 fail_line;   /* 0: no error of ours yet */
    dl_status           st;
    char                value[DL_CONF_VALUE_MAX];   /* the value, expanded */
} parse_ctx;

static bool is_passthrough(const parse_ctx *pc, const char *section)
{
    for (const char *const *p = pc->passthrough; p && *p; p++)
        if (!strcmp(*p, section))
            return true;
    return false;
}

static void fail(parse_ctx *pc, dl_status st)
{
    pc->st = st;
    pc->fail_line = pc->lineno;
}

/* inih's line reader: counts lines, refuses over-long lines and unknown
 * section headers, and stops the parse (returns NULL) after our first error. */
static char *read_line(char *buf, int size, void *stream)
{
    parse_ctx *pc = stream;
    if (pc->fail_line || !fgets(buf, size, pc->f))
        return NULL;
    pc->lineno++;
    size_t len = strlen(buf);
    if (len == (size_t)size - 1 && buf[len - 1] != '\n') {
        int c = getc(pc->f);
        if (c != EOF) {
            fail(pc, dl_err_set(pc->err, DL_ERR_INVALID,
                                "%s:%d: line is too long (at most %d characters)",
                                pc->path, pc->lineno, size - 2));
            return NULL;
        }
    }
    size_t skip = 0;
    if (pc->lineno == 1 && !strncmp(buf, "\xEF\xBB\xBF", 3))
        skip = 3;
    while (buf[skip] && isspace((unsigned char)buf[skip]) && buf[skip] != '\n')
        skip++;
    memmove(buf, buf + skip, strlen(buf + skip) + 1);

    char *end = buf[0] == '[' ? strchr(buf, ']') : NULL;
    if (end) {
        *end = '\0';
        bool ok = section_known(pc->opts, buf + 1) || is_passthrough(pc, buf + 1);
        if (!ok)
            fail(pc, dl_err_set(pc->err, DL_ERR_INVALID, "%s:%d: unknown section [%.60s]",
                                pc->path, pc->lineno, buf + 1));
        *end = ']';
        if (!ok)
            return NULL;
    }
    return buf;
}

static int on_value(void *user, const char *section, const char *key, const char *value)
{
    parse_ctx *pc = user;
    char origin[ORIGIN_MAX];
    snprintf(origin, sizeof(origin), "%s:%d", pc->path, pc->lineno);
    dl_status st = dl_conf_expand(value, pc->value, sizeof(pc->value), pc->err);
    value = pc->value;
    if (st != DL_OK)
        dl_err_prefix(pc->err, "%s: [%s] %s", origin, section, key);
    else if (is_passthrough(pc, section)) {
        if (pc->raw)
            st = pc->raw(pc->raw_ctx, section, key, value, origin, pc->err);
        if (st != DL_OK)
            dl_err_prefix(pc->err, "%s: [%s] %s", origin, section, key);
    } else {
        st = dl_conf_set(pc->opts, pc->conf, section, key, value, origin, pc->err);
    }
    if (st != DL_OK) {
        fail(pc, st);
        return 0;
    }
    return 1;
}

dl_status dl_conf_load_file(const dl_opt *opts, void *conf, const char *path,
                            const char *const *passthrough, dl_conf_raw_fn raw,
                            void *raw_ctx, dl_err *err)
{
    parse_ctx pc = {.opts = opts, .path = path, .passthrough = passthrough,
                    .raw = raw, .raw_ctx = raw_ctx, .err = err};
    pc.f = fopen(path, "r");
    if (!pc.f)
        return dl_err_set(err, DL_ERR_IO, "%s: %s", path, strerror(errno));
    dl_status st = conf_copy(opts, conf, &pc.conf, err);
    if (st != DL_OK) {
        fclose(pc.f);
        return st;
    }

    int ret = ini_parse_stream(read_line, &pc, on_value, &pc);
    if (ret == -2)
        st = dl_err_set(err, DL_ERR_NOMEM, "%s: out of memory", path);
    else if (ret > 0 && (!pc.fail_line || ret < pc.fail_line))
        st = dl_err_set(err, DL_ERR_INVALID,
                        "%s:%d: syntax error (expected [section] or key = value)", path, ret);
    else if (pc.fail_line)
        st = pc.st;
    else if (ferror(pc.f))
        st = dl_err_set(err, DL_ERR_IO, "%s: read error", path);

    if (st == DL_OK)
        memcpy(conf, pc.conf, conf_extent(opts));
    free(pc.conf);
    fclose(pc.f);
    return st;
}
#else
dl_status dl_conf_load_file(const dl_opt *opts, void *conf, const char *path,
                            const char *const *passthrough, dl_conf_raw_fn raw,
                            void *raw_ctx, dl_err *err)
{
    (void)opts;
    (void)conf;
    (void)passthrough;
    (void)raw;
    (void)raw_ctx;
    return dl_err_set(err, DL_ERR_UNAVAILABLE, "%s: this dlserve was built without inih "
                      "and cannot read configuration files", path);
}
#endif /* DL_HAVE_INIH */

/* ---- environment ---------------------------------------------------------- */

/* DLSERVE_<SECTION>_<KEY>, upper case, '.' and '-' -> '_'. */
static void env_name(const dl_opt *o, char *buf, size_t size)
{
    int n = snprintf(buf, size, "DLSERVE_%s_%s", o->section, o->key);
    DL_ASSERT(n > 0 && (size_t)n < size);
    for (char *p = buf; *p; p++)
        *p = (*p == '.' || *p == '-') ? '_' : (char)toupper((unsigned char)*p);
}

dl_status dl_conf_apply_env(const dl_opt *opts, void *conf, dl_err *err)
{
    void *tmp;
    dl_status st = conf_copy(opts, conf, &tmp, err);
    for (const dl_opt *o = opts; st == DL_OK && o->key; o++) {
        char name[ORIGIN_MAX];
        env_name(o, name, sizeof(name));
        const char *value = getenv(name);
        char expanded[DL_CONF_VALUE_MAX];
        if (value && (st = dl_conf_expand(value, expanded, sizeof(expanded), err)) != DL_OK)
            dl_err_prefix(err, "%s", name);
        else if (value)
            st = set_value(o, tmp, expanded, name, err);
    }
    if (st == DL_OK)
        memcpy(conf, tmp, conf_extent(opts));
    free(tmp);
    return st;
}

/* ---- printing ------------------------------------------------------------- */

void dl_conf_format(const dl_opt *o, const void *conf, char *buf, size_t size)
{
    const char *field = (const char *)conf + o->offset;
    switch (o->type) {
    case DL_OPT_INT: {
        int64_t v;
        memcpy(&v, field, sizeof(v));
        snprintf(buf, size, "%" PRId64, v);
        break;
    }
    case DL_OPT_DOUBLE: {
        double v;
        memcpy(&v, field, sizeof(v));
        /* The shortest of %.15g / %.17g that reads back exactly. */
        snprintf(buf, size, "%.15g", v);
        if (strtod(buf, NULL) != v)
            snprintf(buf, size, "%.17g", v);
        break;
    }
    case DL_OPT_BOOL: {
        bool v;
        memcpy(&v, field, sizeof(v));
        snprintf(buf, size, "%s", v ? "true" : "false");
        break;
    }
    case DL_OPT_STRING:
        snprintf(buf, size, "%.*s", (int)o->size, field);
        break;
    case DL_OPT_ENUM: {
        int v;
        memcpy(&v, field, sizeof(v));
        snprintf(buf, size, "%s", dl_opt_word_name(o->words, v));
        break;
    }
    case DL_OPT_CUSTOM:
        o->format(field, buf, size);
        break;
    }
}

void dl_conf_copy(const dl_opt *o, void *dst, const void *src)
{
    size_t size = o->type == DL_OPT_INT      ? sizeof(int64_t)
                  : o->type == DL_OPT_DOUBLE ? sizeof(double)
                  : o->type == DL_OPT_BOOL   ? sizeof(bool)
                  : o->type == DL_OPT_ENUM   ? sizeof(int)
                                             : o->size;   /* STRING, CUSTOM */
    memcpy((char *)dst + o->offset, (const char *)src + o->offset, size);
}

/* True if o is the first option of its section in the table. */
static bool first_of_section(const dl_opt *opts, const dl_opt *o)
{
    for (const dl_opt *p = opts; p != o; p++)
        if (!strcmp(p->section, o->section))
            return false;
    return true;
}

void dl_conf_print(const dl_opt *opts, const void *conf, FILE *f)
{
    bool first = true;
    for (const dl_opt *s = opts; s->key; s++) {
        if (!first_of_section(opts, s))
            continue;
        fprintf(f, "%s[%s]\n", first ? "" : "\n", s->section);
        first = false;
        for (const dl_opt *o = s; o->key; o++) {
            if (strcmp(o->section, s->section))
                continue;
            /* Large enough for any string field: they are paths at most. */
            char value[4096];
            dl_conf_format(o, conf, value, sizeof(value));
            if (*value && dl_conf_secret_key(o->key))
                snprintf(value, sizeof(value), "%s", DL_CONF_REDACTED);
            char words[160] = "";
            if (o->type == DL_OPT_ENUM || o->type == DL_OPT_CUSTOM)
                dl_opt_words_str(o->words, words, sizeof(words));
            /* A value read from a file line reads back the same: without
             * the blanks around '=' when they would make the line too long,
             * or turn a leading ';' into a comment's " ;". */
            bool tight = strlen(o->key) + 3 + strlen(value) > LINE_TEXT_MAX || *value == ';';
            fprintf(f, "# %s%s%s%s\n%s%s%s\n", o->doc, *words ? " (" : "", words,
                    *words ? ")" : "", o->key, tight ? "=" : *value ? " = " : " =", value);
        }
    }
}

void dl_md_cell(FILE *f, const char *text)
{
    fputs(" ", f);
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            fputc('\\', f);
        fputc(*p, f);
    }
    fputs(" |", f);
}

void dl_conf_range_str(const dl_opt *o, char *buf, size_t len)
{
    buf[0] = '\0';
    switch (o->type) {
    case DL_OPT_INT:
        if (bounded(o))
            snprintf(buf, len, "%.0f..%.0f", o->min, o->max);
        else
            snprintf(buf, len, "integer");
        break;
    case DL_OPT_DOUBLE:
        if (bounded(o))
            snprintf(buf, len, "%g..%g", o->min, o->max);
        else
            snprintf(buf, len, "number");
        break;
    case DL_OPT_BOOL:
        snprintf(buf, len, "true/false");
        break;
    case DL_OPT_STRING:
        snprintf(buf, len, "up to %zu characters", o->size - 1);
        break;
    case DL_OPT_ENUM:
    case DL_OPT_CUSTOM:
        dl_opt_words_str(o->words, buf, len);
        break;
    }
}

void dl_conf_print_markdown(const dl_opt *opts, FILE *f)
{
    fputs("| section | key | default | range | meaning |\n"
          "|---|---|---|---|---|\n", f);
    for (const dl_opt *o = opts; o->key; o++) {
        char def[160], range[160];
        if (*o->def)
            snprintf(def, sizeof(def), "`%s`", o->def);
        else
            snprintf(def, sizeof(def), "(empty)");
        dl_conf_range_str(o, range, sizeof(range));
        fputs("|", f);
        dl_md_cell(f, o->section);
        dl_md_cell(f, o->key);
        dl_md_cell(f, def);
        dl_md_cell(f, range);
        dl_md_cell(f, o->doc);
        fputc('\n', f);
    }
}
