/* runtime/base/log.c - see log.h. One formatted buffer and one fputs per event, so lines from
 * different places never interleave mid-line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum log_level log_threshold = LOG_INFO;

static const char *const log_names[] = {"error", "warn", "info", "debug"};

void log_set_level(enum log_level level) { log_threshold = level; }

void log_msg(enum log_level level, const char *module, const char *fmt, ...) {
    if (level > log_threshold) return;
    char line[2048];
    int n = snprintf(line, sizeof line, "g4pipe: %s %s: ", log_names[level], module);
    if (n < 0) return;
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
}

double log_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
