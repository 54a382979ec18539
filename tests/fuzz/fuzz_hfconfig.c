/* tests/fuzz/fuzz_hfconfig.c - libFuzzer target for runtime/model/hfconfig: config.json read
 * (either layout) and matched against every compiled-in model.
 *
 * Owns: writing the input as a config.json, hfconfig_read, and when it reads, hfconfig_match
 * with no name and with each compiled-in model's name, so the comparison of every field runs
 * on whatever the fuzzer makes. A crash, leak or overflow under ASan/UBSan is a finding.
 * Seeds: tests/fuzz/corpus_hfconfig/ (the fixtures' config.json files, both layouts). */
#include "graph/model_desc.h"
#include "runtime/base/log.h"
#include "runtime/model/hfconfig.h"
#include "tests/fuzz/fuzz_files.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) log_set_level(LOG_ERROR), quiet = 1;
    char path[512];
    if (fuzz_write("config.json", data, size, path, sizeof path) != 0) return 0;
    g4_model_desc d;
    if (hfconfig_read(path, &d) != 0) return 0;
    char why[512];
    (void)hfconfig_match(&d, NULL, why, sizeof why);
    for (int i = 0; i < g4_n_models; i++)
        (void)hfconfig_match(&d, g4_models[i]->name, why, sizeof why);
    return 0;
}
