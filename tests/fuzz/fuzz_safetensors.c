/* tests/fuzz/fuzz_safetensors.c - libFuzzer target for runtime/model/loader's safetensors
 * header and shard index readers.
 *
 * Owns: turning an input into a checkpoint directory: its first byte picks what the rest is,
 * a model.safetensors (even) or a model.safetensors.index.json (odd) beside one small valid
 * shard it may name; then loader_open, a lookup of every name the seeds use, and
 * loader_close. A crash, leak or overflow under ASan/UBSan is a finding; a refusal is fine.
 * Seeds: tests/fuzz/corpus_safetensors/ (the mode byte first). */
#include "runtime/base/log.h"
#include "runtime/model/loader.h"
#include "tests/fuzz/fuzz_files.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A shard with one [2, 2] BF16 tensor "a.weight", for the index to name. */
static int write_shard(void) {
    static const char header[] = "{\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],"
                                 "\"data_offsets\":[0,8]}}";
    uint8_t buf[8 + sizeof header - 1 + 8];
    uint64_t n = sizeof header - 1;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, header, (size_t)n);
    memset(buf + 8 + n, 0x3f, 8);
    char path[512];
    return fuzz_write("model-00001-of-00001.safetensors", buf, sizeof buf, path, sizeof path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        log_set_level(LOG_ERROR);
        ready = write_shard() == 0 ? 1 : -1;
    }
    if (ready < 0 || size < 1) return 0;
    char st[512], ix[512];
    int index = data[0] & 1;
    snprintf(st, sizeof st, "%s/model.safetensors", fuzz_dir());
    snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", fuzz_dir());
    (void)unlink(st);
    (void)unlink(ix);
    if (fuzz_write(index ? "model.safetensors.index.json" : "model.safetensors", data + 1, size - 1,
                   index ? ix : st, sizeof st) != 0)
        return 0;
    loader *ld = NULL;
    if (loader_open(fuzz_dir(), &ld) == 0) {
        static const int64_t shape[2] = {2, 2};
        (void)loader_has(ld, "a.weight");
        (void)loader_get(ld, "BF16", 2, shape, "%s", "a.weight");
        loader_close(ld);
    }
    return 0;
}
