/* tests/unit/test_moe_frag.c - the fragment-order layout of the experts' ring
 * (serve.moe_item_frags, kernels/moe_frag.h) on the CPU: every word of a stage's 128 item rows of a
 * 32-k block gets a place of its own inside the block's 8 KB; each lane's 16-byte load at a tile's
 * operand place finds the four words the row-order kernel handed that mma (rows g, g + 8, g, g + 8;
 * the lane's words 4 q + 2 s and the next of its 16 bytes of each row); and the first 64 rows stay
 * in the block's first 4 KB, which the half tiles leave to items (their weight rows take the rest).
 * The copy map (moe_frag_copy_*): its 8 warps copy every word of the 128 rows once, warps 0..3 the
 * first 64 rows (what a half tile's items are), each copy instruction's 32 words land in 32
 * different banks, and the steps the kernel adds (a row pair, an mma) are the map's own.
 * The GPU gates (test_moe's `moe_item_frags`) compare the kernels' outputs; this pins the layout
 * where CI can run it. */
#include "kernels/moe_frag.h"
#include "tests/harness.h"

#include <stdint.h>
#include <string.h>

enum { ROWS = 128, WORDS = 16, BLOCK = ROWS * WORDS * 4 };

/* the word tag a place holds: row and word, +1 so that 0 is "nothing landed here" */
static uint32_t tag(int row, int w) { return (uint32_t)(row * WORDS + w + 1); }

int main(void) {
    test_plan(5);
    static uint32_t block[BLOCK / 4];
    memset(block, 0, sizeof block);
    /* the copies: thread (row, q) lands word 4 q + u of the row */
    int clashes = 0, outside = 0, misaligned = 0, half_out = 0;
    for (int row = 0; row < ROWS; row++)
        for (int q = 0; q < 4; q++)
            for (int u = 0; u < 4; u++) {
                const int at = moe_frag_at(row, q) + moe_frag_word(u);
                if (at < 0 || at + 4 > BLOCK) {
                    outside++;
                    continue;
                }
                if (at % 4) {
                    misaligned++;
                    continue;
                }
                if (block[at / 4]) clashes++;
                block[at / 4] = tag(row, 4 * q + u);
                /* the half tiles: rows 0..63 in the first 4 KB, 64..127 in the rest */
                if ((row < 64) != (at < BLOCK / 2)) half_out++;
            }
    TEST_CHECK("moe_frag.places", clashes == 0 && outside == 0 && misaligned == 0,
               "%d words of %d rows x %d: %d on a taken place, %d outside the block, %d misaligned",
               ROWS * WORDS, ROWS, WORDS, clashes, outside, misaligned);
    TEST_CHECK("moe_frag.half_tiles", half_out == 0,
               "%d words of rows 0..63 past the first 4 KB or of rows 64..127 inside it", half_out);
    /* the loads: lane 4 g + q of tile t, mma s, 16 bytes at t * TILE + s * MMA + 16 lane */
    int wrong = 0;
    for (int t = 0; t < ROWS / 16; t++)
        for (int lane = 0; lane < 32; lane++)
            for (int s = 0; s < 2; s++) {
                const int g = lane / 4, q = lane % 4, lo = 16 * t + g, hi = lo + 8;
                const int at = t * MOE_FRAG_TILE + s * MOE_FRAG_MMA + 16 * lane;
                const uint32_t want[4] = {tag(lo, 4 * q + 2 * s), tag(hi, 4 * q + 2 * s),
                                          tag(lo, 4 * q + 2 * s + 1), tag(hi, 4 * q + 2 * s + 1)};
                for (int j = 0; j < 4; j++)
                    if (at + 4 * j + 4 > BLOCK || block[at / 4 + j] != want[j]) wrong++;
            }
    TEST_CHECK("moe_frag.operands", wrong == 0,
               "%d of %d operand registers (8 tiles x 32 lanes x 2 mmas x 4) not the row-order "
               "kernel's",
               wrong, ROWS / 16 * 32 * 2 * 4);
    /* the copy map: coverage, the half tiles' rows, banks, the kernel's steps */
    static int copied[ROWS][WORDS];
    memset(copied, 0, sizeof copied);
    int twice = 0, half_rows = 0, bank_clashes = 0, steps = 0;
    for (int w = 0; w < ROWS / 16; w++)
        for (int j = 0; j < 4; j++)
            for (int m = 0; m < 2; m++) {
                unsigned banks = 0;
                for (int lane = 0; lane < 32; lane++) {
                    const int row = moe_frag_copy_row(w, lane, j);
                    const int u = moe_frag_copy_word(lane, m), at = moe_frag_copy_to(w, lane, j, m);
                    if (row < 0 || row >= ROWS || u < 0 || u >= 4) {
                        twice++;
                        continue;
                    }
                    if (copied[row][4 * (lane & 3) + u]++) twice++;
                    if ((row < 64) != (w < 4)) half_rows++;
                    if (at != moe_frag_at(row, lane & 3) + moe_frag_word(u)) steps++;
                    if (at != moe_frag_copy_to(w, lane, 0, 0) + j * MOE_FRAG_COPY_ROWS +
                                  m * MOE_FRAG_MMA ||
                        row != moe_frag_copy_row(w, lane, 0) + 2 * j ||
                        u != moe_frag_copy_word(lane, 0) + 2 * m)
                        steps++;
                    const unsigned bank = 1u << (at / 4 % 32);
                    if (banks & bank) bank_clashes++;
                    banks |= bank;
                }
            }
    int missed = 0;
    for (int row = 0; row < ROWS; row++)
        for (int wd = 0; wd < WORDS; wd++)
            if (!copied[row][wd]) missed++;
    TEST_CHECK("moe_frag.copy_map", twice == 0 && missed == 0 && half_rows == 0 && steps == 0,
               "%d words copied twice or out of range, %d never copied, %d rows on the wrong half "
               "of the warps, %d places or k off the kernel's steps",
               twice, missed, half_rows, steps);
    TEST_CHECK(
        "moe_frag.copy_banks", bank_clashes == 0,
        "%d lanes of 64 copy instructions (8 warps x 4 row pairs x 2 mmas) on a bank another "
        "lane of the instruction took",
        bank_clashes);
    return harness_exit();
}
