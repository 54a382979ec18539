/* graph/schedules_none.c - the GPU schedule table of a build made without nvcc: empty. A GPU
 * build compiles build/gen/schedules.c with the k_ prefix instead, which fills it; this file
 * and kernels/no_gpu.c are never linked into one. */
#include "graph/schedule.h"

#include <stddef.h>

const g4_schedule *const k_schedules[] = {NULL};
const int k_n_schedules = 0;
