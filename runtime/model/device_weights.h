/* runtime/model/device_weights.h - a model's weights in device memory: uploaded from a checkpoint,
 * or seeded random at the real geometry (model.weights = dummy), plus the cuBLASLt plans of
 * every projection, built once here so that every batch size runs one algorithm per weight.
 *
 * Does not own: which tensors a model has (runtime/model/weights.c walks them), the forward pass.
 */
#ifndef G4_DEVICE_WEIGHTS_H
#define G4_DEVICE_WEIGHTS_H

#include "graph/schedule.h"
#include "runtime/model/loader.h"

#include <stddef.h>
#include <stdint.h>

typedef struct device_weights device_weights;

/* Fills w with device pointers for every tensor model m needs: copies of ld's tensors (each
 * checked for dtype and shape first), or with ld NULL seeded random values: norm weights and
 * scales in [0.9, 1.1], matrices uniform with std 1/sqrt(fan_in). The [1] layer_scalar
 * tensors are read on the host (1.0 for dummy weights). Returns 0 and *out (free with
 * device_weights_free), or -1 after logging the tensor that failed. */
int device_weights_bind(loader *ld, const g4_model_desc *m, uint64_t seed, g4_weights *w,
                        device_weights **out);

/* Builds the plan of every projection in w: max_rows rows for the layers, max_out_rows for the
 * LM head. Returns 0 or -1 after logging. */
int device_weights_plans(device_weights *dw, const g4_model_desc *m, g4_weights *w, int max_rows,
                         int max_out_rows);

/* Device bytes the weights occupy. */
size_t device_weights_bytes(const device_weights *dw);

/* Frees the device copies and the plans; NULL is fine. */
void device_weights_free(device_weights *dw);

#endif
