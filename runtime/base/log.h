/* runtime/base/log.h - one-line log events on stderr.
 *
 * stdout belongs to the line protocol; every diagnostic goes through log_msg to stderr, one
 * line per event, prefixed with the level and the module that speaks. */
#ifndef G4_LOG_H
#define G4_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Sets the most verbose level that is printed (default LOG_INFO). */
void log_set_level(enum log_level level);

/* Prints "g4pipe: <level> <module>: <message>\n" to stderr with a single write. */
void log_msg(enum log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Seconds on the monotonic clock, for the durations that progress and start-up lines report. */
double log_clock_s(void);

#endif
