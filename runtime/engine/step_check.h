/* runtime/engine/step_check.h - debug.check_finite: after every op of a step, the buffer that op
 * wrote is searched for a non-finite value over the step's rows, and the first op that makes
 * one fails the step, naming the layer, the op, the row, its sequence slot and position.
 *
 * Owns: the map from a schedule step's name to the state buffer it writes, and the search.
 * Does not own: the step (engine.c installs the hook), the buffers (g4_state). */
#ifndef G4_STEP_CHECK_H
#define G4_STEP_CHECK_H

#include "graph/schedule.h"

typedef struct step_check {
    const g4_model_desc *model;
    /* copies a buffer to the host (the backend's copy_to_host); NULL: host memory already */
    int (*copy_to_host)(void *dst, const void *src, size_t n, g4_stream st);
    const int32_t *pos; /* host copies of the step's rows, for the message */
    const int32_t *seq;
    const int32_t *out_src;
    uint16_t *host; /* [rows * widest buffer] staging for device buffers */
    size_t host_elems;
} step_check;

/* The hook (g4_state.hook) with s->hook_ctx = a step_check: 0, or K_ERR_NONFINITE after logging
 * the first non-finite value the op just wrote. */
int step_check_finite(g4_state *s, int layer, const char *step);

#endif
