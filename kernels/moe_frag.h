/* kernels/moe_frag.h - where the experts' ring kernels put an item row's words in a stage when
 * serve.moe_item_frags is on (kernels/moe.cu, FRAG): plain arithmetic, shared by the kernels and
 * their CPU unit test (tests/unit/test_moe_frag.c).
 *
 * The tensor-core instruction's A operand is four registers holding rows g, g + 8, g, g + 8 of
 * a 16-row tile (lane 4 g + q; words 4 q + 2 s and 4 q + 2 s + 1 of the lane's 16 bytes of a
 * 32-k block for the block's mma s = 0, 1). Loaded as two rows, the operand is assembled by
 * register moves (docs/perf-notes.md, forty-ninth session); laid out so, it is one 16-byte load.
 * Item tile T (rows 16 T .. 16 T + 15) takes a 32-k block's bytes MOE_FRAG_TILE T on; the lane's
 * operand for mma s is the 16 bytes at MOE_FRAG_MMA s + 16 (4 g + q) of it. */
#ifndef G4_MOE_FRAG_H
#define G4_MOE_FRAG_H

#ifdef __CUDACC__
#define MOE_FRAG_FN static __host__ __device__ __forceinline__
#else
#define MOE_FRAG_FN static inline
#endif

enum {
    MOE_FRAG_TILE = 1024, /* an item tile's bytes of a 32-k block: 16 rows x 64 */
    MOE_FRAG_MMA = 512    /* the second mma's operands after the first's */
};

/* Where word 4 q + u (u < 4; k 8 q + 2 u and the next of a 32-k block) of item row `row` lands,
 * in bytes from the block's start: the part fixed by the row and q, plus moe_frag_word(u). */
MOE_FRAG_FN int moe_frag_at(int row, int q) {
    return row / 16 * MOE_FRAG_TILE + (row % 8 * 4 + q) * 16 + row / 8 % 2 * 4;
}
MOE_FRAG_FN int moe_frag_word(int u) { return u / 2 * MOE_FRAG_MMA + u % 2 * 8; }

#endif
