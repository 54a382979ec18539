/* tests/gpu/test_fill.c - GPU gate: the seeded random fill (kernels/fill.cu) against its CPU
 * twin. Pass: every element identical, since both take the same integer hash and one fused
 * multiply-add rounded to nearest, then one round-to-nearest-even conversion. */
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/harness.h"

#include <stdlib.h>
#include <string.h>

int main(void) {
    char desc[256];
    if (k_device_init(desc, sizeof desc) != 0) {
        test_skip("op_vs_ref[fill_uniform]", "no GPU (%s)", desc);
        return 0;
    }
    size_t sizes[] = {1, 1000, 3000017};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        bf16_t *dev = k_device_alloc(n * 2), *got = malloc(n * 2), *want = malloc(n * 2);
        k_fill_args a = {.out = dev, .n = n, .seed = 42 + i, .lo = -0.03f, .hi = 0.05f};
        int rc = k_fill_uniform(&a, NULL) | k_sync() | k_copy_to_host(got, dev, n * 2);
        a.out = want;
        ref_fill_uniform(&a, NULL);
        size_t diff = 0;
        for (size_t j = 0; j < n; j++)
            diff += got[j] != want[j];
        char gate[64];
        snprintf(gate, sizeof gate, "op_vs_ref[fill_uniform n=%zu]", n);
        TEST_CHECK(gate, rc == 0 && diff == 0, "%zu of %zu elements differ (exact rule)", diff, n);
        k_device_free(dev);
        free(got);
        free(want);
    }
    return harness_exit();
}
