/* tests/musl/fortify_shim.c - the glibc _FORTIFY_SOURCE entry points that Debian's static
 * libjansson.a references, for the musl test build only (musl has no __*_chk functions).
 * Each forwards to the plain function after the bound check glibc would do; a failed check
 * aborts, as glibc's __chk_fail does. Never linked into the glibc build. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap);
int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, ...);
char *__strncpy_chk(char *dst, const char *src, size_t n, size_t dstlen);

int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap) {
    (void)flag;
    if (maxlen > slen) abort();
    return vsnprintf(s, maxlen, fmt, ap);
}

int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = __vsnprintf_chk(s, maxlen, flag, slen, fmt, ap);
    va_end(ap);
    return n;
}

char *__strncpy_chk(char *dst, const char *src, size_t n, size_t dstlen) {
    if (n > dstlen) abort();
    return strncpy(dst, src, n);
}
