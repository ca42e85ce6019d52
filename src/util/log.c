/* log.c: leveled logging to stderr with journald "<N>" priority prefixes,
 * a level for all subsystems and a list of subsystems turned up to debug.
 * Ranks other than 0 tag their lines with "[rN]". */
#include "util/dl_util.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

int dl_log_level = DL_LOG_INFO;
int dl_log_rank = 0;

const dl_opt_word dl_log_level_words[] = {
    {"err", DL_LOG_ERR}, {"warning", DL_LOG_WARNING}, {"notice", DL_LOG_NOTICE},
    {"info", DL_LOG_INFO}, {"debug", DL_LOG_DEBUG}, {NULL, 0},
};

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

void dl_log_write(int level, const char *subsys, const char *fmt, ...)
{
    if (level > atomic_load_explicit(&base_level, memory_order_relaxed) && !debug_on(subsys))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (dl_log_rank > 0)
        fprintf(stderr, "<%d>[r%d] %s: %s\n", level, dl_log_rank, subsys, line);
    else
        fprintf(stderr, "<%d>%s: %s\n", level, subsys, line);
}
