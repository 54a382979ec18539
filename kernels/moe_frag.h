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

/* Who copies what: warp w copies item tile w, one word a lane and copy instruction. Lane l takes
 * part l % 4 (k 8 (l % 4) ..) of the rows moe_frag_copy_row(w, l, j), j < 4, and of each the
 * words moe_frag_copy_word(l, m), m < 2 (one for each mma). One instruction's 32 words then land
 * in 32 different banks: their places differ by 64 (l >> 3 & 1) + 16 (l % 4) + 8 (l >> 2 & 1) +
 * 4 (l >> 4), where lanes copying the four words of one row part (word u for u < 4 of part q of
 * row r) would put four lanes on each bank. Steps j and m move the place by the constants below
 * (the kernel adds them to one place a lane; tests/unit/test_moe_frag.c checks that they hold). */
enum {
    MOE_FRAG_COPY_ROWS = 128 /* from row r to r + 2 (j + 1): two rows of 4 parts of 16 bytes */
};
MOE_FRAG_FN int moe_frag_copy_row(int warp, int lane, int j) {
    return 16 * warp + (lane >> 3 & 1) + 8 * (lane >> 4) + 2 * j;
}
MOE_FRAG_FN int moe_frag_copy_word(int lane, int m) { return 2 * m + (lane >> 2 & 1); }
MOE_FRAG_FN int moe_frag_copy_to(int warp, int lane, int j, int m) {
    return moe_frag_at(moe_frag_copy_row(warp, lane, j), lane & 3) +
           moe_frag_word(moe_frag_copy_word(lane, m));
}

#endif
