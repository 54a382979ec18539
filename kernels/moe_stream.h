/* kernels/moe_stream.h - the routed experts' decode down projection with its weights streamed
 * through bulk copies (kernels/moe_stream.cu), as kernels/moe.cu's launcher calls it. */
#ifndef G4_MOE_STREAM_H
#define G4_MOE_STREAM_H

#include "kernels/kernels.h"

#include <cuda_runtime.h>

/* The kernel's shared-memory carve-out, before any graph capture (k_moe_setup). */
int k_moe_stream_setup(void);

/* The down projection of a k_moe_experts call of at most INBLOCK_MAX_ITEMS items (ys from h,
 * which the up kernel launched just before writes), on buckets it finds from a->idx itself, with
 * moe.cu's down kernel's bits. slots: the grid rows (possible active experts). */
int k_moe_stream_down(const k_moe_experts_args *a, const bf16_t *h, float *ys, unsigned slots,
                      cudaStream_t s);

#endif
