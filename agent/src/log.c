/* Agent logging (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int log_level = AGT_LOG_WARN;
static int64_t log_rank = -1;

void agt_log_setup(int level, int64_t rank)
{
    log_level = level;
    log_rank = rank;
}

void agt_log(int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level > log_level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (log_rank >= 0)
        fprintf(stderr, "mkscope-agent[%lld]: %s: %s\n", (long long)log_rank, names[level], line);
    else
        fprintf(stderr, "mkscope-agent: %s: %s\n", names[level], line);
}
