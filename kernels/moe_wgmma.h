/* kernels/moe_wgmma.h - the wgmma form of the prefill experts (kernels/moe_wgmma.cu), for
 * kernels/moe.cu's k_moe_experts, which chooses it (serve.moe_prefill_tiles = 4). */
#ifndef G4_MOE_WGMMA_H
#define G4_MOE_WGMMA_H

#include "kernels/kernels.h"

/* raise the kernels' shared-memory limit (120 KB): once, before any graph capture */
int moe_wgmma_allow(void);
/* gate|up into h, then down into ys, over the buckets k_moe_experts made (list, active,
 * n_active; slots: grid rows, one a possible active expert), with the tile kernels' bits. Needs
 * d_model and d_expert multiples of 32 (k_moe_experts' tensor-core path). */
int moe_wgmma_launch(const k_moe_experts_args *a, const int32_t *list, const int32_t *active,
                     const int32_t *n_active, bf16_t *h, float *ys, unsigned slots, g4_stream st);

#endif
