/* runtime/weights.h - a checkpoint's tensors bound to a compiled-in model's weight map. */
#ifndef G4_WEIGHTS_H
#define G4_WEIGHTS_H

#include "graph/schedule.h"
#include "runtime/loader.h"

/* Fills w with pointers into ld's mappings for every text tensor model m needs, each checked
 * for dtype bf16 and its exact shape; layer_scalar is read into a float. Then accounts for the
 * tensors left over (vision/audio, k/v of KV-shared layers, a tied lm_head: skipped and
 * counted in one log line; anything else is an error). Returns 0, or -1 after logging the
 * first tensor that is missing or differs. Plans are left NULL. */
int weights_bind(loader *ld, const g4_model_desc *m, g4_weights *w);

#endif
