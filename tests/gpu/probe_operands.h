/* tests/gpu/probe_operands.h - the tensor-core order probes' operands (probe_tc_order.cu,
 * probe_lt_order.cu): bf16 from and to float on the host, and random values whose exponents
 * spread, so that the order in which a sum rounds shows in its low bits. */
#ifndef G4_PROBE_OPERANDS_H
#define G4_PROBE_OPERANDS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint16_t bf16_bits(float f) { /* round to nearest even; the operands are finite */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x's nx values, then w's nw, from rand(): normal-ish values times 2^(-6..6), products of many
 * magnitudes */
static void probe_fill(uint16_t *x, size_t nx, uint16_t *w, size_t nw) {
    for (size_t i = 0; i < nx + nw; i++) {
        const float u = ((float)rand() / RAND_MAX - 0.5f) * 2.0f;
        const float v = ldexpf(u, rand() % 13 - 6);
        (i < nx ? x[i] : w[i - nx]) = bf16_bits(v);
    }
}

#endif
