/* log.c: leveled logging to stderr, with journald's "<N>" priority
 * prefixes when journald reads it and an ISO-8601 time and level word
 * otherwise,
 * a level for all subsystems and a list of subsystems turned up to debug,
 * as text lines or JSON objects with the ids of the thread's request.
 * Ranks other than 0 tag their lines with "[rN]". */
#define _POSIX_C_SOURCE 200809L
#include "util/dl_util.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int dl_log_level = DL_LOG_INFO;
int dl_log_rank = 0;

const dl_opt_word dl_log_level_words[] = {
    {"err", DL_LOG_ERR}, {"warning", DL_LOG_WARNING}, {"notice", DL_LOG_NOTICE},
    {"info", DL_LOG_INFO}, {"debug", DL_LOG_DEBUG}, {NULL, 0},
};

const dl_opt_word dl_log_format_words[] = {
    {"text", DL_LOG_FORMAT_TEXT}, {"json", DL_LOG_FORMAT_JSON}, {NULL, 0},
};

static atomic_int log_format = DL_LOG_FORMAT_TEXT;
/* Whether stderr is journald's stream: 1 yes, 0 no, -1 not looked at yet.
 * Lines then start with "<N>" (journald takes the priority from it and
 * stamps the time itself); else text lines start with the time. */
static atomic_int journal = -1;

static _Thread_local const dl_log_ids *thread_ids;

#define TAG_SIZE 16   /* longest tag + 1 */

/* The level of every subsystem not in the debug list. */
static atomic_int base_level = DL_LOG_INFO;

/* Tags ever named by dl_log_set. A slot is written once, before ntags
 * (released) counts it, and never changes after: readers that load ntags
 * (acquire) read the slots below it without a lock. debug_mask says which
 * slots log at debug level now. */
static char tags[DL_LOG_TAGS_MAX][TAG_SIZE];
static atomic_int ntags;
static atomic_uint_least32_t debug_mask;

static bool tag_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* The next tag of a debug list at *p into tag; advances *p past it and its
 * comma. False when the list is malformed there. */
static bool next_tag(const char **p, char tag[TAG_SIZE])
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = 0;
    while (tag_char(s[n]))
        n++;
    if (n == 0 || n >= TAG_SIZE)
        return false;
    memcpy(tag, s, n);
    tag[n] = '\0';
    s += n;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == ',' && s[1] == '\0')
        return false;   /* a trailing comma names an empty tag */
    if (*s != ',' && *s != '\0')
        return false;
    *p = *s == ',' ? s + 1 : s;
    return true;
}

bool dl_log_debug_valid(const char *debug)
{
    char tag[TAG_SIZE];
    for (const char *p = debug ? debug : ""; *p;)
        if (!next_tag(&p, tag))
            return false;
    return true;
}

/* The slot of tag, added when new; -1 when the slots are full. */
static int tag_slot(const char *tag)
{
    int n = atomic_load_explicit(&ntags, memory_order_relaxed);   /* only we write it */
    for (int i = 0; i < n; i++)
        if (strcmp(tags[i], tag) == 0)
            return i;
    if (n == DL_LOG_TAGS_MAX)
        return -1;
    snprintf(tags[n], TAG_SIZE, "%s", tag);
    atomic_store_explicit(&ntags, n + 1, memory_order_release);
    return n;
}

dl_status dl_log_set(int level, const char *debug, dl_err *err)
{
    if (!dl_log_debug_valid(debug))
        return dl_err_set(err, DL_ERR_INVALID, "log debug list '%.60s': expected tags "
                          "(a-z, 0-9, _ or -, at most %d characters) separated by commas",
                          debug, TAG_SIZE - 1);
    uint_least32_t mask = 0;
    char tag[TAG_SIZE];
    for (const char *p = debug ? debug : ""; *p;) {
        next_tag(&p, tag);
        int slot = tag_slot(tag);
        if (slot < 0)
            return dl_err_set(err, DL_ERR_INVALID, "log debug list: more than %d "
                              "subsystems named since start", DL_LOG_TAGS_MAX);
        mask |= (uint_least32_t)1 << slot;
    }
    atomic_store_explicit(&base_level, level, memory_order_relaxed);
    atomic_store_explicit(&debug_mask, mask, memory_order_relaxed);
    dl_log_level = mask && level < DL_LOG_DEBUG ? DL_LOG_DEBUG : level;
    return DL_OK;
}

/* True when subsys is in the debug list. */
static bool debug_on(const char *subsys)
{
    uint_least32_t mask = atomic_load_explicit(&debug_mask, memory_order_relaxed);
    if (!mask)
        return false;
    int n = atomic_load_explicit(&ntags, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if ((mask >> i & 1) && strcmp(tags[i], subsys) == 0)
            return true;
    return false;
}

/* True when stderr is the stream journald reads: $JOURNAL_STREAM names
 * its device and inode ("dev:ino"), as systemd sets it. */
static bool stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void dl_log_set_format(int format)
{
    atomic_store(&journal, stderr_is_journal());
    atomic_store(&log_format, format);
}

static bool to_journal(void)
{
    int j = atomic_load_explicit(&journal, memory_order_relaxed);
    if (j < 0) {
        j = stderr_is_journal();
        atomic_store_explicit(&journal, j, memory_order_relaxed);
    }
    return j == 1;
}

/* "2026-12-01T05:52:49.123456Z" (UTC, microseconds) into buf; its length. */
static size_t iso_time(char *buf, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(buf + n, cap - n, ".%06ldZ", ts.tv_nsec / 1000);
    return n < cap ? n : cap - 1;
}

const dl_log_ids *dl_log_ids_push(const dl_log_ids *ids)
{
    const dl_log_ids *prev = thread_ids;
    thread_ids = ids;
    return prev;
}

void dl_log_ids_pop(const dl_log_ids *prev)
{
    thread_ids = prev;
}

/* Appends s as a JSON string (quoted) to buf[*n..cap), cut to fit; bytes
 * that are not UTF-8 become U+FFFD. Leaves room for the closing brace. */
static void json_str(char *buf, size_t *n, size_t cap, const char *s)
{
    size_t i = *n;
    const size_t end = cap - 8;   /* room for an escape, the quote, "}\n" */
    buf[i++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && i < end;) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            buf[i++] = '\\';
            buf[i++] = (char)c;
            p++;
        } else if (c < 0x20) {
            i += (size_t)snprintf(buf + i, cap - i, "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            buf[i++] = (char)c;
            p++;
        } else {
            size_t len = dl_utf8_len(p);
            const char *src = len ? (const char *)p : "\xEF\xBF\xBD";
            size_t m = len ? len : 3;
            if (i + m >= end)
                break;
            memcpy(buf + i, src, m);
            i += m;
            p += len ? len : 1;
        }
    }
    buf[i++] = '"';
    *n = i;
}

/* ,"key":"value" when value is known. */
static void json_member(char *buf, size_t *n, size_t cap, const char *key, const char *value)
{
    if (!value || *n + strlen(key) + 16 >= cap)
        return;
    *n += (size_t)snprintf(buf + *n, cap - *n, ",\"%s\":", key);
    json_str(buf, n, cap, value);
}

static const char *level_name(int level)
{
    for (const dl_opt_word *w = dl_log_level_words; w->word; w++)
        if (w->value == level)
            return w->word;
    return level < DL_LOG_ERR ? "err" : "debug";
}

/* One JSON object a line: {"time","level","priority","subsystem",
 * "rank"?,"message","request_id"?,"model"?,"trace_id"?}. */
static void write_json(int level, const char *subsys, const char *msg)
{
    char line[4096];
    size_t n = 0;
    if (to_journal())
        n += (size_t)snprintf(line, sizeof(line), "<%d>", level);
    n += (size_t)snprintf(line + n, sizeof(line) - n, "{\"time\":\"");
    n += iso_time(line + n, sizeof(line) - n);
    n += (size_t)snprintf(line + n, sizeof(line) - n,
                          "\",\"level\":\"%s\",\"priority\":%d,\"subsystem\":", level_name(level),
                          level);
    json_str(line, &n, sizeof(line), subsys);
    if (dl_log_rank > 0)
        n += (size_t)snprintf(line + n, sizeof(line) - n, ",\"rank\":%d", dl_log_rank);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ",\"message\":");
    json_str(line, &n, sizeof(line), msg);
    const dl_log_ids *ids = thread_ids;
    if (ids) {
        json_member(line, &n, sizeof(line), "request_id", ids->request_id);
        json_member(line, &n, sizeof(line), "model", ids->model);
        json_member(line, &n, sizeof(line), "trace_id", ids->trace_id);
    }
    line[n++] = '}';
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}

/* " (id=..., trace=...)" for a text line, or "" when no id is known. */
static void text_ids(char *buf, size_t cap)
{
    const dl_log_ids *ids = thread_ids;
    buf[0] = '\0';
    if (!ids || (!ids->request_id && !ids->trace_id))
        return;
    snprintf(buf, cap, " (%s%.200s%s%s%.40s)", ids->request_id ? "id=" : "",
             ids->request_id ? ids->request_id : "",
             ids->request_id && ids->trace_id ? ", " : "", ids->trace_id ? "trace=" : "",
             ids->trace_id ? ids->trace_id : "");
}

void dl_log_write(int level, const char *subsys, const char *fmt, ...)
{
    if (level > atomic_load_explicit(&base_level, memory_order_relaxed) && !debug_on(subsys))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (atomic_load_explicit(&log_format, memory_order_relaxed) == DL_LOG_FORMAT_JSON) {
        write_json(level, subsys, line);
        return;
    }
    char ids[280], head[64], rank[16] = "";
    text_ids(ids, sizeof(ids));
    if (to_journal()) {
        snprintf(head, sizeof(head), "<%d>", level);
    } else {
        size_t n = iso_time(head, sizeof(head));
        snprintf(head + n, sizeof(head) - n, " %s ", level_name(level));
    }
    if (dl_log_rank > 0)
        snprintf(rank, sizeof(rank), "[r%d] ", dl_log_rank);
    fprintf(stderr, "%s%s%s: %s%s\n", head, rank, subsys, line, ids);
}
