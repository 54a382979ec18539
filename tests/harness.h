/* tests/harness.h - how every test program reports, so build.sh can count.
 *
 * Each gate or check prints exactly one line to stdout:
 *   PASS <gate>: <figures>      FAIL <gate>: <why>      SKIP <gate>: skipped: <why>
 * (INFO <name>: <figures> lines are shown, not counted) and the program exits non-zero when any
 * FAIL was printed. build.sh counts the lines and
 * ends with "N passed, N failed, N skipped". Figures (gaps, counts) go on the PASS line.
 * A program whose gates are known before it runs declares them first with test_plan(n) (a
 * "PLAN n" line): build.sh's run_test then counts a run that printed fewer PASS/FAIL/SKIP lines
 * as failed, so a gate that vanishes on some path cannot pass silently. */
#ifndef G4_TEST_HARNESS_H
#define G4_TEST_HARNESS_H

#include <stdarg.h>
#include <stdio.h>

static int harness_failures;

static void harness_line(const char *tag, const char *gate, const char *fmt, va_list ap) {
    printf("%s %s: ", tag, gate);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
}

__attribute__((format(printf, 2, 3), unused)) static void test_pass(const char *gate,
                                                                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    harness_line("PASS", gate, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 2, 3), unused)) static void test_fail(const char *gate,
                                                                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    harness_line("FAIL", gate, fmt, ap);
    va_end(ap);
    harness_failures++;
}

__attribute__((format(printf, 2, 3), unused)) static void test_skip(const char *gate,
                                                                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("SKIP %s: skipped: ", gate);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

/* A figure that asserts nothing (what a reference itself does, beside a gate): an INFO line,
 * which build.sh shows and does not count. */
__attribute__((format(printf, 2, 3), unused)) static void test_info(const char *what,
                                                                    const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    harness_line("INFO", what, fmt, ap);
    va_end(ap);
}

/* Declares that this run prints n gate lines (PASS, FAIL or SKIP) in all. */
__attribute__((unused)) static void test_plan(int n) {
    printf("PLAN %d\n", n);
    fflush(stdout);
}

/* One check: PASS or FAIL line with the same message. */
#define TEST_CHECK(gate, cond, ...)                                                                \
    do {                                                                                           \
        if (cond)                                                                                  \
            test_pass(gate, __VA_ARGS__);                                                          \
        else                                                                                       \
            test_fail(gate, __VA_ARGS__);                                                          \
    } while (0)

static int harness_exit(void) { return harness_failures ? 1 : 0; }

#endif
