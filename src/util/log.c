/* log.c: leveled logging to stderr with journald "<N>" priority prefixes.
 * Ranks other than 0 tag their lines with "[rN]". */
#include "util/dl_util.h"

#include <stdio.h>

int dl_log_level = DL_LOG_INFO;
int dl_log_rank = 0;

void dl_log_write(int level, const char *subsys, const char *fmt, ...)
{
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
