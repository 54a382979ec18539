/* runtime/model/weights.h - a checkpoint's tensors bound to a compiled-in model's weight map. */
#ifndef G4_WEIGHTS_H
#define G4_WEIGHTS_H

#include "graph/schedule.h"
#include "runtime/model/loader.h"

/* Fills w with pointers into ld's mappings for every text tensor model m needs, each checked
 * for dtype bf16 and its exact shape; layer_scalar is read into a float. Then accounts for the
 * tensors left over (vision/audio, k/v of KV-shared layers, a tied lm_head: skipped and
 * counted in one log line; anything else is an error). Returns 0, or -1 after logging the
 * first tensor that is missing or differs. Plans are left NULL. */
int weights_bind(loader *ld, const g4_model_desc *m, g4_weights *w);

/* Where tensors come from: get returns the tensor with short name name (e.g.
 * "layers.3.self_attn.q_proj.weight") and exactly this bf16 shape, or NULL after logging why.
 * The [1] tensors (layer_scalar) are read on the host, so get must return host memory for
 * them. */
typedef struct weights_source {
    const void *(*get)(void *ctx, const char *name, int ndim, const int64_t *shape);
    void *ctx;
} weights_source;

/* The same walk over every tensor model m needs, from any source (the loader, or the GPU
 * backend's seeded random weights). No leftover accounting. Returns 0 or -1. */
int weights_bind_source(const weights_source *src, const g4_model_desc *m, g4_weights *w);

#endif
