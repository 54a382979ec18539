/* tests/fuzz/fuzz_proto.c - libFuzzer target for runtime/proto's line parser.
 *
 * Owns: feeding arbitrary bytes to proto_parse_line as one line (any length, NUL and newline
 * bytes included), then freeing what it returned, and writing the resulting answer line to
 * a null stream so the writers see every message the parser can make. AddressSanitizer and
 * UBSan turn a crash, leak or overflow into a finding. Seeds: tests/fuzz/corpus_proto/.
 * Build and run (60 s):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. runtime/proto/proto.c runtime/base/log.c \
 *       tests/fuzz/fuzz_proto.c -ljansson -lm -o /tmp/fuzz_proto
 *   /tmp/fuzz_proto -max_total_time=60 tests/fuzz/corpus_proto */
#include "runtime/proto/proto.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    proto_request req;
    proto_error err;
    if (proto_parse_line((const char *)data, size, (long)size, &req, &err) == 0) {
        if (sink) (void)proto_write_error(sink, req.id_json, PROTO_OK, "parsed");
        proto_request_free(&req);
    } else {
        if (sink) (void)proto_write_error(sink, err.id_json, err.code, err.message);
        proto_error_free(&err);
    }
    return 0;
}
