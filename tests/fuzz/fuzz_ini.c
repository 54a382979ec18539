/* tests/fuzz/fuzz_ini.c - libFuzzer target for runtime/base/config: the INI file (through
 * inih) and the --set assignments.
 *
 * Owns: writing the input as an INI file for config_load and, when it loads, config_finish;
 * then each of the input's lines (up to 16) given to config_set as an assignment. A crash,
 * leak or overflow under ASan/UBSan is a finding; refusals are the point. Seeds:
 * tests/fuzz/corpus_ini/ (the shipped conf/*.ini files and a few bad ones). */
#include "runtime/base/config.h"
#include "runtime/base/log.h"
#include "tests/fuzz/fuzz_files.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) log_set_level(LOG_ERROR), quiet = 1;
    char path[512];
    if (fuzz_write("fuzz.ini", data, size, path, sizeof path) != 0) return 0;
    g4_config c;
    config_defaults(&c);
    if (config_load(&c, path) == 0) (void)config_finish(&c);
    config_defaults(&c);
    char line[1024];
    size_t at = 0;
    for (int k = 0; k < 16 && at < size; k++) {
        size_t n = 0;
        while (at < size && data[at] != '\n' && n + 1 < sizeof line)
            line[n++] = (char)data[at++];
        while (at < size && data[at] != '\n')
            at++; /* the rest of an overlong line */
        at++;
        line[n] = '\0';
        if (strlen(line) == n) (void)config_set(&c, line); /* an embedded NUL ends it early */
    }
    (void)config_finish(&c);
    return 0;
}
