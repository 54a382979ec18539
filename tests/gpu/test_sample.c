/* tests/gpu/test_sample.c - GPU gate: the device's greedy pick (kernels/sample.cu, k_argmax)
 * against its CPU twin ref_argmax on fresh random logits at the real vocabulary (262,144) and
 * at a small odd one, with rows built to stress the rule: a tie at the maximum between ids far
 * apart (the lower must win), the maximum at id 0 and at the last id, NaN entries (read as
 * -inf), a row all -inf and a row all NaN (both pick id 0). The id output is poisoned first.
 * Pass: every row's id identical (exact rule: both sides apply one total order). */
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state = 777;

static uint32_t rnd_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

#define N_ROWS 9

static void make_rows(bf16_t *lg, int n) {
    for (int r = 0; r < N_ROWS; r++) {
        bf16_t *row = lg + (size_t)r * (size_t)n;
        for (int i = 0; i < n; i++) /* quarters in [-16, 16): many exact ties below the top */
            row[i] = ref_f32_to_bf16((float)((int)(rnd_u32() % 128) - 64) / 4.0f);
        switch (r) {
        case 1: /* tie at the top, far apart */
            row[n - 3] = row[n / 3] = row[17 % n] = ref_f32_to_bf16(30.0f);
            break;
        case 2:
            row[0] = ref_f32_to_bf16(31.0f);
            break;
        case 3:
            row[n - 1] = ref_f32_to_bf16(31.0f);
            break;
        case 4: /* NaN above everything: must not win */
            for (int i = 0; i < n; i += 97)
                row[i] = 0x7fc0;
            break;
        case 5:
            for (int i = 0; i < n; i++)
                row[i] = 0xff80; /* -inf */
            break;
        case 6:
            for (int i = 0; i < n; i++)
                row[i] = 0x7fc0;
            break;
        case 7:
            row[n / 2] = 0x7f80;
            break; /* +inf wins */
        default:
            break;
        }
    }
}

static void check(int n) {
    char gate[64];
    snprintf(gate, sizeof gate, "op_vs_ref[argmax vocab %d rows %d]", n, N_ROWS);
    size_t nl = (size_t)N_ROWS * (size_t)n;
    bf16_t *lg = malloc(nl * 2);
    int32_t got[N_ROWS], want[N_ROWS];
    make_rows(lg, n);
    for (int r = 0; r < N_ROWS; r++)
        got[r] = -7;
    void *d_lg = k_device_alloc(nl * 2), *d_id = k_device_alloc(sizeof got);
    int rc = !d_lg || !d_id ? K_ERR_NO_MEMORY : 0;
    if (!rc) rc = k_copy_to_device(d_lg, lg, nl * 2) | k_copy_to_device(d_id, got, sizeof got);
    k_argmax_args a = {.id = d_id, .logits = d_lg, .rows = N_ROWS, .n_vocab = n};
    if (!rc) rc = k_argmax(&a, NULL) | k_sync() | k_copy_to_host(got, d_id, sizeof got);
    k_argmax_args ra = {.id = want, .logits = lg, .rows = N_ROWS, .n_vocab = n};
    int rrc = ref_argmax(&ra, NULL);
    int diff = 0, first = -1;
    for (int r = 0; r < N_ROWS; r++)
        if (got[r] != want[r]) {
            diff++;
            if (first < 0) first = r;
        }
    TEST_CHECK(gate, rc == 0 && rrc == 0 && diff == 0,
               "%d of %d rows differ (exact rule)%s; row 1 tie -> %d, all -inf -> %d, all NaN -> "
               "%d; rc %d/%d",
               diff, N_ROWS, first >= 0 ? ", see the first below" : "", want[1], want[5], want[6],
               rc, rrc);
    if (first >= 0) printf("# row %d: gpu %d ref %d\n", first, got[first], want[first]);
    k_device_free(d_lg);
    k_device_free(d_id);
    free(lg);
}

int main(void) {
    char desc[256];
    if (k_device_init(desc, sizeof desc) != 0) {
        test_skip("op_vs_ref[argmax]", "no GPU (%s)", desc);
        return 0;
    }
    check(262144);
    check(1001);
    return harness_exit();
}
