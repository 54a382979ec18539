/* tests/gpu/gpu_rand.h - the GPU gates' random inputs, shared so every test program draws the
 * same way: one 64-bit LCG per program (Knuth's MMIX constants) that each case reseeds through
 * rng_state, so a case's inputs do not depend on which cases ran before it. Header-only
 * (static inline) because each test program is one file linked alone against the kernels. */
#ifndef G4_TESTS_GPU_RAND_H
#define G4_TESTS_GPU_RAND_H

#include "kernels/kernels.h"
#include "kernels/ref/ref.h"

#include <stddef.h>
#include <stdint.h>

static uint64_t rng_state;

/* The next 32 random bits: the high half of the state. */
static inline uint32_t rnd_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

/* Uniform on [-1, 1) in steps of 2^-23 (24 random bits). */
static inline float rnd(void) { return (float)(rnd_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* Uniform on [0, n), n > 0. */
static inline int rnd_int(int n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng_state >> 33) % (uint64_t)n);
}

/* p[i] = bf16(offset + U[-1, 1) * scale). */
static inline void fill_uniform(bf16_t *p, size_t n, float scale, float offset) {
    for (size_t i = 0; i < n; i++)
        p[i] = ref_f32_to_bf16(offset + rnd() * scale);
}

#endif
