/* tests/unit/test_ref_fp8.c - the e4m3 conversion and the fp8 layout gates of docs/gates.md
 * on the CPU reference: the fp8 prep writes exactly the e4m3 bytes of a round-to-nearest-even,
 * saturating (+-448) conversion of the bf16 value the bf16 pool would store; an fp8 window
 * read equals the bf16 read when every stored value is exactly representable in e4m3. Both
 * rules are exact, so both checks compare bits. */
#include "kernels/ref/ref.h"
#include "tests/harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 99;
static float rnd(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void gate_conversion(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) { /* every finite code reads back to itself */
        float v = ref_e4m3_to_f32((uint8_t)b);
        if (isnan(v)) continue;
        uint8_t r = ref_f32_to_e4m3(v);
        if (r != b && !(v == 0.0f && (r & 0x7f) == 0)) bad++;
    }
    int ties = ref_f32_to_e4m3(1.0625f) == 0x38 && ref_f32_to_e4m3(1.1875f) == 0x3a &&
               ref_f32_to_e4m3(-1.0625f) == 0xb8;
    int sat = ref_f32_to_e4m3(448.0f) == 0x7e && ref_f32_to_e4m3(1e6f) == 0x7e &&
              ref_f32_to_e4m3(-INFINITY) == 0xfe && ref_f32_to_e4m3(464.0f) == 0x7e;
    int sub = ref_f32_to_e4m3(0.001953125f) == 0x01 && ref_f32_to_e4m3(0.0009765625f) == 0x00 &&
              ref_e4m3_to_f32(0x08) == 0.015625f;
    TEST_CHECK("e4m3_conversion", bad == 0 && ties && sat && sub,
               "%d codes fail to round-trip; ties to even %s; saturation at 448 %s; subnormals %s",
               bad, ties ? "ok" : "WRONG", sat ? "ok" : "WRONG", sub ? "ok" : "WRONG");
}

enum { D = 256, NKV = 2, NH = 4, PT = 4, PAGES = 8, ROWS = 7 };

static k_kv_view view(void *base, int elem_bytes, const int32_t *tables) {
    return (k_kv_view){.base = base,
                       .page_tokens = PT,
                       .n_layer = 1,
                       .n_kv_head = NKV,
                       .head_dim = D,
                       .elem_bytes = elem_bytes,
                       .tables = tables,
                       .max_pages = PAGES};
}

/* The same prep into a bf16 and an fp8 store: each fp8 byte is e4m3(the bf16 element). */
static void gate_layout(void) {
    int32_t tables[PAGES] = {3, 1, 4, 2, 5, 6, 7, 0};
    int32_t pos[ROWS], seq[ROWS] = {0};
    size_t n_store = (size_t)PAGES * 2 * PT * NKV * D;
    bf16_t *s16 = calloc(n_store, 2), *q16 = malloc(ROWS * NH * D * 2),
           *q8 = malloc(ROWS * NH * D * 2);
    uint8_t *s8 = calloc(n_store, 1);
    bf16_t *k = malloc(ROWS * NKV * D * 2), *v = malloc(ROWS * NKV * D * 2), *w = malloc(D * 2);
    for (int i = 0; i < ROWS; i++)
        pos[i] = 9 + i;
    for (int i = 0; i < ROWS * NKV * D; i++)
        k[i] = ref_f32_to_bf16(rnd() * 40.0f);
    for (int i = 0; i < ROWS * NKV * D; i++)
        v[i] = ref_f32_to_bf16(rnd() * 3.0f);
    for (int i = 0; i < ROWS * NH * D; i++)
        q16[i] = q8[i] = ref_f32_to_bf16(rnd());
    for (int i = 0; i < D; i++)
        w[i] = ref_f32_to_bf16(1.0f + 900.0f * rnd() * rnd() * rnd());
    k_attn_prep_args a = {.q = q16,
                          .k_raw = k,
                          .v_raw = v,
                          .q_norm = w,
                          .k_norm = w,
                          .pos = pos,
                          .seq = seq,
                          .kv = view(s16, 2, tables),
                          .rows = ROWS,
                          .n_head = NH,
                          .write_kv = 1,
                          .n_rot = D / 2,
                          .rope_base = 10000.0f,
                          .eps = 1e-6f};
    int rc = ref_attn_prep(&a, NULL);
    a.q = q8;
    a.kv = view(s8, 1, tables);
    rc |= ref_attn_prep(&a, NULL);
    size_t differ = 0, saturated = 0;
    for (size_t i = 0; i < n_store; i++) {
        differ += s8[i] != ref_f32_to_e4m3(ref_bf16_to_f32(s16[i]));
        saturated += (s8[i] & 0x7f) == 0x7e;
    }
    TEST_CHECK("fp8_layout_prep", rc == 0 && differ == 0 && memcmp(q16, q8, ROWS * NH * D * 2) == 0,
               "%zu of %zu stored bytes differ from e4m3(bf16 store) (%zu saturated at 448); "
               "queries identical",
               differ, n_store, saturated);
    /* window read: put e4m3-exact values in both stores, then attend from both */
    for (size_t i = 0; i < n_store; i++) {
        uint8_t code = (uint8_t)(rng >> 33) % 0x7e;
        rnd();
        if (rng & 1) code |= 0x80;
        s8[i] = code;
        s16[i] = ref_f32_to_bf16(ref_e4m3_to_f32(code));
    }
    bf16_t *o16 = malloc(ROWS * NH * D * 2), *o8 = malloc(ROWS * NH * D * 2);
    k_attention_args at = {.out = o16,
                           .q = q16,
                           .pos = pos,
                           .seq = seq,
                           .kv = view(s16, 2, tables),
                           .rows = ROWS,
                           .n_head = NH,
                           .window = 8};
    rc = ref_attention(&at, NULL);
    at.out = o8;
    at.kv = view(s8, 1, tables);
    rc |= ref_attention(&at, NULL);
    TEST_CHECK("fp8_layout_read", rc == 0 && memcmp(o16, o8, ROWS * NH * D * 2) == 0,
               "window-8 attention over e4m3-exact K/V: fp8 and bf16 reads give identical bits");
    free(s16), free(s8), free(q16), free(q8), free(k), free(v), free(w), free(o16), free(o8);
}

int main(void) {
    gate_conversion();
    gate_layout();
    return harness_exit();
}
