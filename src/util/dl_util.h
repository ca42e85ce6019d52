/* dl_util.h: errors, logging, time, random numbers, files and the CPU
 * thread pool shared by every dlserve module. Depends on nothing else. */
#ifndef DL_UTIL_H
#define DL_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DL_VERSION_STRING "0.1.0"

/* ---- errors ---------------------------------------------------------- */

/* What went wrong, as far as a caller must tell failures apart: whether to
 * retry, and (in serve/) which HTTP code answers; err->msg says the rest. */
typedef enum dl_status {
    DL_OK = 0,
    DL_ERR_NOMEM,       /* an allocation failed (host or device memory) */
    DL_ERR_INVALID,     /* bad argument or malformed input: do not retry */
    DL_ERR_IO,          /* a file or socket operation failed (errno's text) */
    DL_ERR_BACKEND,     /* OpenBLAS, cuBLAS or cuDNN reported a failure */
    DL_ERR_UNAVAILABLE, /* not ready, stopping, or a peer, broker or device
                           unreachable: retry later */
    DL_ERR_NOT_FOUND,   /* no such model, version or name: do not retry as is */
    DL_ERR_BUSY,        /* a queue is full: retry soon */
    DL_ERR_TOO_LARGE,   /* over a configured size limit: do not retry as is */
    DL_ERR_TIMEOUT,     /* a deadline passed before the work was done: retry later */
} dl_status;

typedef struct dl_err {
    dl_status code;
    char msg[256];
} dl_err;

/* Fills *err (which may be NULL) with code and the formatted message and
 * returns code. Every error message is written through this function (or
 * dl_err_setv, dl_err_prefix), never into err->msg directly. */
dl_status dl_err_set(dl_err *err, dl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* dl_err_set with a va_list, for helpers that take a format themselves. */
dl_status dl_err_setv(dl_err *err, dl_status code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Prepends "prefix: " to err->msg (e.g. a file name); returns err->code. */
dl_status dl_err_prefix(dl_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Static name of a status ("invalid input", "not found", ...). */
const char *dl_status_str(dl_status st);

/* Aborts with file:line. For bugs only, never for bad input. */
#define DL_ASSERT(cond)                                                     \
    do {                                                                    \
        if (!(cond))                                                        \
            dl_assert_fail(#cond, __FILE__, __LINE__);                      \
    } while (0)
_Noreturn void dl_assert_fail(const char *what, const char *file, int line);

/* ---- logging --------------------------------------------------------- */

/* One word an enumerated option (DL_OPT_ENUM, below) accepts and the value
 * it stores. A list ends with a NULL word. For DL_OPT_CUSTOM the words only
 * describe the accepted forms ("cuda:N") in errors and printouts. */
typedef struct dl_opt_word {
    const char *word;
    int         value;
} dl_opt_word;

/* Levels are syslog priorities. */
enum { DL_LOG_ERR = 3, DL_LOG_WARNING = 4, DL_LOG_NOTICE = 5,
       DL_LOG_INFO = 6, DL_LOG_DEBUG = 7 };

/* The most verbose level any subsystem logs at: DL_LOG does not format
 * messages above it. Read-only: set through dl_log_set. */
extern int dl_log_level;
extern int dl_log_rank;    /* MPI rank, or 0; ranks > 0 prefix "[rN]" */

/* The levels by name (err, warning, notice, info, debug), for option
 * tables. */
extern const dl_opt_word dl_log_level_words[];

/* Distinct subsystem tags that dl_log_set accepts over a process's life. */
#define DL_LOG_TAGS_MAX 32

/* Sets the level of every subsystem, and the subsystems that log at debug
 * level whatever that level is: a comma-separated list of tags ("kafka,http";
 * blanks around tags are ignored; "" or NULL: none), each 1-15 of a-z, 0-9,
 * '_', '-'. DL_ERR_INVALID, changing nothing, for a malformed list or once
 * more than DL_LOG_TAGS_MAX distinct tags were named. Call from one thread at
 * a time; other threads may log meanwhile (a message at a switch sees the
 * old setting or the new one). */
dl_status dl_log_set(int level, const char *debug, dl_err *err);

/* True when a debug list is well formed for dl_log_set. */
bool dl_log_debug_valid(const char *debug);

/* How lines are written: text ("<N>subsys: message", journald's priority
 * prefix first) or JSON (one object a line: time, level, priority,
 * subsystem, message and the ids below where known; when stderr is
 * journald's stream, the "<N>" prefix still leads, so the journal keeps
 * the priority and stores the object as the message). */
enum { DL_LOG_FORMAT_TEXT = 0, DL_LOG_FORMAT_JSON = 1 };

/* The formats by name (text, json), for option tables. */
extern const dl_opt_word dl_log_format_words[];

/* Sets the line format (DL_LOG_FORMAT_*). Same threading rule as dl_log_set. */
void dl_log_set_format(int format);

/* Ids of what the calling thread is working on, added to its log lines:
 * JSON lines get "request_id", "model" and "trace_id" members, text lines
 * " (id=..., trace=...)". Each member may be NULL (not known). */
typedef struct dl_log_ids {
    const char *request_id;
    const char *model;
    const char *trace_id;
} dl_log_ids;

/* Makes ids (borrowed: it must live until popped) the calling thread's
 * and returns the ones it replaces, for dl_log_ids_pop. */
const dl_log_ids *dl_log_ids_push(const dl_log_ids *ids);
void dl_log_ids_pop(const dl_log_ids *prev);

/* Writes "<level>subsys: message\n" to stderr (journald keeps the level),
 * unless level is above subsys's own: DL_LOG's test lets through what the
 * most verbose subsystem logs, and this drops the rest before formatting
 * (a few string compares, only for messages above the common level). */
void dl_log_write(int level, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define DL_LOG(level, subsys, ...)                                          \
    do {                                                                    \
        if ((level) <= dl_log_level)                                        \
            dl_log_write((level), (subsys), __VA_ARGS__);                   \
    } while (0)

/* Logs on rank 0 only. */
#define DL_LOG0(level, subsys, ...)                                         \
    do {                                                                    \
        if (dl_log_rank == 0)                                               \
            DL_LOG(level, subsys, __VA_ARGS__);                             \
    } while (0)

/* ---- time ------------------------------------------------------------ */

/* Monotonic seconds. */
double dl_time_now(void);

/* ---- random numbers (xoshiro128+-style, deterministic for a seed) ---- */

typedef struct dl_rng {
    uint64_t s[2];
} dl_rng;

void     dl_rng_seed(dl_rng *rng, uint64_t seed);
uint64_t dl_rng_next(dl_rng *rng);
/* Uniform in [0, 1). */
float    dl_rng_uniform(dl_rng *rng);
/* Standard normal (Box-Muller). */
float    dl_rng_normal(dl_rng *rng);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t dl_rng_below(dl_rng *rng, uint64_t n);

/* ---- files ----------------------------------------------------------- */

/* Reads a whole file. *out is new (NUL-terminated, caller frees). */
dl_status dl_file_read(const char *path, char **out, size_t *len, dl_err *err);

/* Writes the concatenation of parts[0..nparts) to path atomically: a
 * temporary file in the same folder, fsync, rename, fsync of the folder. */
dl_status dl_file_write_atomic(const char *path, const void *const *parts,
                               const size_t *lens, int nparts, dl_err *err);

/* mkdir -p for one level; succeeds if the folder exists. */
dl_status dl_mkdir(const char *path, dl_err *err);

/* ---- text buffers ------------------------------------------------------ */

/* A growable NUL-terminated string; zero-initialise it. s is owned (NULL
 * until the first append); oom is sticky: once an allocation fails,
 * appends do nothing, so callers check it once at the end. */
typedef struct dl_sbuf {
    char  *s;
    size_t len, cap;
    bool   oom;
} dl_sbuf;

/* Copies src into dst of cap bytes (cap >= 1), cut to cap - 1 bytes and
 * NUL-terminated, as snprintf "%s" does without its format parsing (hot
 * paths copy model names). */
void dl_strlcpy(char *dst, const char *src, size_t cap);

void dl_sbuf_add(dl_sbuf *b, const char *s, size_t n);
void dl_sbuf_putc(dl_sbuf *b, char c);
void dl_sbuf_printf(dl_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees the text and resets the buffer. */
void dl_sbuf_free(dl_sbuf *b);

/* Appends s (valid UTF-8) as a JSON string: quotes, backslashes and
 * control characters escaped, runs of plain bytes copied whole. */
void dl_sbuf_json_string(dl_sbuf *b, const char *s);

/* Appends the decimal text of v (no printf: hot paths write many). */
void dl_sbuf_int(dl_sbuf *b, int64_t v);

/* The shortest decimal text that reads back (strtof) as exactly v: at
 * most 9 significant digits, plain notation for 1e-5 <= |v| < 1e15 and
 * exponent notation ("1.5e-07") beyond, "null" for NaN and infinities (a
 * JSON value either way). Writes at most DL_FLOAT_CHARS bytes including
 * the NUL; returns the length. No printf: a few integer and double
 * operations. Thread-safe. */
#define DL_FLOAT_CHARS 24
size_t dl_fmt_float(char *buf, float v);

/* The index of the first of n float32 values at p (host order, any
 * alignment) that is Inf or NaN, or n when all are finite. One pass
 * without branches over all n (vectorized), the culprit looked for after. */
size_t dl_first_nonfinite(const void *p, size_t n);

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when the bytes
 * there are not one (overlong, surrogate, past U+10FFFF, truncated by a
 * NUL). */
size_t dl_utf8_len(const unsigned char *p);

/* ---- Prometheus text exposition (util/prom.c) --------------------------
 * A scrape is one dl_sbuf: each family's dl_prom_family, then all its
 * samples together (the format wants a family's lines contiguous and its
 * HELP and TYPE once). Label names are the caller's constants, written as
 * they are; label values are escaped. Any thread, one buffer per thread. */

/* Appends value as a Prometheus label value (text exposition format):
 * backslash, double quote and newline escaped as \\, \" and \n. The
 * format is UTF-8 and Prometheus rejects a whole scrape over one bad byte,
 * so each byte that does not start a valid UTF-8 sequence becomes U+FFFD.
 * The surrounding quotes are the caller's. */
void dl_prom_label(dl_sbuf *b, const char *value);

/* Appends "# HELP <name> <help>\n# TYPE <name> <type>\n" (type: counter,
 * gauge, histogram, summary or untyped); backslashes and newlines in help
 * are escaped. Call it once per family, before the family's samples. */
void dl_prom_family(dl_sbuf *b, const char *name, const char *type, const char *help);

/* Appends one sample line, `name{k1="v1",k2="v2"} value\n`, or `name
 * value\n` without labels. The variable arguments are label (name, value)
 * string pairs ended by one NULL; a NULL value is written as "". Values
 * as dl_prom_fmt_value writes them. Example:
 *   dl_prom_sample(b, "dlserve_redis_up", 1, "role", "sink", NULL); */
void dl_prom_sample(dl_sbuf *b, const char *name, double value, ...)
    __attribute__((sentinel));

/* A sample value as text into buf (at least DL_PROM_VALUE_CHARS bytes,
 * NUL-terminated); returns the length. NaN, +Inf and -Inf are spelled
 * so; whole numbers below 2^53 in magnitude as integers ("1000000000000000",
 * "0" for -0); others as the shortest of 15, 16 and 17 significant digits
 * (printf's %g) that strtod reads back exactly ("4e-05", not
 * "3.9999999999999996e-05"). Counters past 2^53 lose their last digits. */
#define DL_PROM_VALUE_CHARS 32
size_t dl_prom_fmt_value(char *buf, double v);

/* ---- CPU parallelism ------------------------------------------------- */

/* A task body: processes items [begin, end) of a parallel loop. */
typedef void (*dl_task_fn)(void *ctx, int64_t begin, int64_t end);

/* Sets the number of threads the pool uses (>= 1). Not thread-safe: call
 * at start-up. Threads block on a condition variable when idle, so they
 * never spin against OpenBLAS's threads. */
void dl_pool_set_threads(int n);
int  dl_pool_threads(void);

/* How long idle threads poll for the next loop before they sleep (in
 * polls, a few nanoseconds each). Training runs loops back to back and
 * gains from polling; a server whose cores also run connection threads
 * sets 0. */
void dl_pool_set_spin(int polls);

/* Another owner for the pool's loops: runs fn over [0, n) in `chunks`
 * contiguous chunks (chunk c is [n c / chunks, n (c + 1) / chunks)) on its
 * own threads and returns when all are done. With a runner set, the pool
 * starts no workers of its own: the CPU backend with oneDNN hands every
 * loop to oneDNN's OpenMP team, so one team owns the cores (OpenMP's idle
 * threads spin, and would starve a second set of workers). Process-wide;
 * not thread-safe: call at start-up, before dl_pool_set_threads. NULL
 * gives the loops back to the pool. */
typedef void (*dl_pool_runner)(int chunks, int64_t n, dl_task_fn fn, void *ctx);
void dl_pool_set_runner(dl_pool_runner run);

/* Runs fn over [0, n) split in contiguous chunks, one per thread, and
 * returns when all are done. Runs inline when n < grain * 2 or with one
 * thread. Calls from inside a task, or while another thread's loop holds
 * the workers, run the same chunks inline, one after the other: the split
 * depends on n, grain and the thread count only. */
void dl_parallel_for(int64_t n, int64_t grain, dl_task_fn fn, void *ctx);

/* ---- configuration tables ----------------------------------------------
 * Each component describes its options in one table; the table drives
 * defaults, parsing of INI files (inih), DLSERVE_<SECTION>_<KEY>
 * environment overrides, command-line overrides, bounds checks, the
 * effective-config printout and the reference in docs/configuration.md.
 * Tables are constant and may be read from any thread; the functions below
 * touch only the config struct they are given. */

typedef enum dl_opt_type {
    DL_OPT_INT,      /* int64_t, bounds min..max */
    DL_OPT_DOUBLE,   /* double, bounds min..max */
    DL_OPT_BOOL,     /* bool: true/false/yes/no/on/off/1/0 */
    DL_OPT_STRING,   /* char[size] */
    DL_OPT_ENUM,     /* int: the value of one of `words` (exact, case-sensitive) */
    DL_OPT_CUSTOM,   /* size bytes, read by `parse` and written by `format` */
} dl_opt_type;

typedef struct dl_opt {
    const char *section;   /* "http" */
    const char *key;       /* "port" */
    dl_opt_type type;
    size_t      offset;    /* offsetof(config struct, field) */
    size_t      size;      /* DL_OPT_STRING: buffer size; DL_OPT_CUSTOM: field size */
    const char *def;       /* default, as text */
    double      min, max;  /* DL_OPT_INT, DL_OPT_DOUBLE */
    const char *doc;       /* one line */
    const dl_opt_word *words;   /* DL_OPT_ENUM, DL_OPT_CUSTOM */
    /* DL_OPT_CUSTOM: stores text into field. False, leaving field alone,
     * when the text is not a valid value: with why[0] == '\0' the error
     * lists the words, else it gives why. */
    bool      (*parse)(const char *text, void *field, char *why, size_t whylen);
    /* DL_OPT_CUSTOM: the field as text that parse reads back. */
    void      (*format)(const void *field, char *buf, size_t len);
} dl_opt;

/* A table ends with an entry whose key is NULL. */

/* Sets every option to its default. */
dl_status dl_conf_defaults(const dl_opt *opts, void *conf, dl_err *err);

/* Sets one option from text; `origin` names where the value came from in
 * errors ("dlserve.conf:12", "DLSERVE_HTTP_PORT", "--http-port"). */
dl_status dl_conf_set(const dl_opt *opts, void *conf, const char *section,
                      const char *key, const char *value, const char *origin,
                      dl_err *err);

/* Reads an INI file over conf. Unknown sections or keys and bad values
 * fail with "path:line: ...". Sections listed in `passthrough` (NULL-
 * terminated, may be NULL) accept any key: each is handed to `raw`
 * (which may be NULL) with its origin. In a build without inih this
 * fails with DL_ERR_UNAVAILABLE. */
typedef dl_status (*dl_conf_raw_fn)(void *ctx, const char *section, const char *key,
                                    const char *value, const char *origin, dl_err *err);
dl_status dl_conf_load_file(const dl_opt *opts, void *conf, const char *path,
                            const char *const *passthrough, dl_conf_raw_fn raw,
                            void *raw_ctx, dl_err *err);

/* Applies DLSERVE_<SECTION>_<KEY> variables (upper case, '.' -> '_'). */
dl_status dl_conf_apply_env(const dl_opt *opts, void *conf, dl_err *err);

/* The longest value, as written or once expanded, with its NUL. */
#define DL_CONF_VALUE_MAX 4096

/* Writes value into out (size bytes) with each ${env:NAME} replaced by the
 * variable's value and each ${file:PATH} by the file's contents less one
 * trailing newline (a regular file; line breaks or NULs in what is read
 * are refused, so that values stay one line); other text is kept. Loading files and DLSERVE_*
 * variables expands every value so. Fails (DL_ERR_INVALID, DL_ERR_IO)
 * naming the variable, or the path and errno's text; the caller adds the
 * origin. The message never holds a value read. */
dl_status dl_conf_expand(const char *value, char *out, size_t size, dl_err *err);

/* Whether key holds a secret that printouts and logs show as
 * DL_CONF_REDACTED: *password*, *secret*, *token*, ssl.key.* and
 * sasl.jaas.config (case-insensitive). */
bool dl_conf_secret_key(const char *key);
#define DL_CONF_REDACTED "***"

/* One option's value in conf as the printout writes it (secrets too),
 * into buf (truncated to size): what SIGHUP compares, option by option. */
void dl_conf_format(const dl_opt *o, const void *conf, char *buf, size_t size);

/* Copies one option's value from the config struct src to dst. */
void dl_conf_copy(const dl_opt *o, void *dst, const void *src);

/* Writes the effective configuration as an INI file, with each option's
 * doc (and an enumeration's words) as a comment; secrets show as ***. */
void dl_conf_print(const dl_opt *opts, const void *conf, FILE *f);

/* The values an option takes, as the reference says them ("1..65535",
 * "true/false", an enumeration's words, ...), into buf. */
void dl_conf_range_str(const dl_opt *o, char *buf, size_t len);

/* Writes the reference as a Markdown table (section, key, default,
 * range, meaning); an enumeration's range is its words. */
void dl_conf_print_markdown(const dl_opt *opts, FILE *f);

/* Writes " text |": one cell of a Markdown table row, '|' escaped. */
void dl_md_cell(FILE *f, const char *text);

/* Writes the words of a list as "a, b or c" into buf (truncated to len). */
void dl_opt_words_str(const dl_opt_word *words, char *buf, size_t len);

/* The value of word in words; false when it is none of them. */
bool dl_opt_word_value(const dl_opt_word *words, const char *word, int *value);

/* The word of value in words (static), or "?" when none has it. */
const char *dl_opt_word_name(const dl_opt_word *words, int value);

/* Splits "NAME" or "NAME:N" (N decimal digits only, at most 18): copies
 * NAME into name (truncated to len-1) and sets *n to N, or to -1 when
 * there is no ":N". False when ':' is followed by anything but 1-18
 * digits; name is filled in either case. */
bool dl_parse_name_num(const char *s, char *name, size_t len, int64_t *n);

/* ---- SHA-256 ----------------------------------------------------------- */

/* Streaming SHA-256 (FIPS 180-4): init, update any number of times, final.
 * A context is used by one thread at a time. */
typedef struct dl_sha256_ctx {
    uint32_t h[8];
    uint64_t nbytes;       /* message bytes so far */
    uint8_t  buf[64];      /* partial block */
    size_t   nbuf;
} dl_sha256_ctx;

void dl_sha256_init(dl_sha256_ctx *ctx);
void dl_sha256_update(dl_sha256_ctx *ctx, const void *data, size_t n);
/* Writes the 32-byte digest; init again before reuse. */
void dl_sha256_final(dl_sha256_ctx *ctx, uint8_t out[32]);

/* The digest of data[0..n) in one call. */
void dl_sha256(const void *data, size_t n, uint8_t out[32]);

/* Lower-case hex of a digest, NUL-terminated. */
void dl_sha256_hex(const uint8_t digest[32], char hex[65]);

/* The lower-case hex digest of a file's contents, read in 64 KiB chunks.
 * DL_ERR_IO when it cannot be opened or read (hex is then ""). */
dl_status dl_sha256_file(const char *path, char hex[65], dl_err *err);

#ifdef __cplusplus
}
#endif
#endif /* DL_UTIL_H */
