/* kernels/gemm_wgmma.h - the wgmma form of the mma projections (kernels/gemm_wgmma.cu), for
 * kernels/gemm_lt.cu's k_gemm, which chooses it (serve.gemm_wgmma). */
#ifndef G4_GEMM_WGMMA_H
#define G4_GEMM_WGMMA_H

#include "kernels/kernels.h"

/* raise the kernels' shared-memory limits (96 and 192 KB): once, before any graph capture */
int gemm_wgmma_allow(void);
/* the blocks of 128 x 128 a launch of m rows and n outputs takes, and its row tiles (grid.y) */
long long gemm_wgmma_blocks(long long m, long long n);
long long gemm_wgmma_row_tiles(long long m);
/* y[m, n] (row stride ldy) = bf16(x[m, k] w[n, k]^T) with the tile form's bits; kb: 32-k blocks a
 * load chunk, 2 or 4. Needs k % 32 == 0 and 16-byte aligned x and w (k_gemm checks). */
int gemm_wgmma_launch(bf16_t *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, int ldy,
                      int kb, g4_stream st);

#endif
