/* tests/unit/test_attn_split_choice.c - the attention launcher's splits-a-block choice
 * (kernels/attn_split_choice.h): the measured shapes get the counts that measured fastest on
 * the H200 (docs/perf-notes.md, "Attention"), the CUDA-core kernels keep their old counts, and
 * every choice is a power of two within its bounds that fills the asked waves. The choice moves
 * no bit (test_attn's `splits per block` gates); this pins which speed the launcher picks. */
#include "kernels/attn_split_choice.h"
#include "tests/harness.h"

/* The H200 of record: 132 SMs; the tensor-core passes hold 3 blocks an SM at head dim 256 and 2
 * at 512 (their shared memory, ncu's occupancy), the CUDA-core kernels 4. */
enum { SMS = 132, MMA_SLOTS_256 = 3 * SMS, MMA_SLOTS_512 = 2 * SMS, CORE_SLOTS = 4 * SMS };
enum { WINDOW_WAVES = 15, GLOBAL_WAVES = 9, CORE_WAVES = 9, MAX_SPB = 16 };

struct shape {
    const char *what;
    int max_split;
    long long pairs, slots;
    int waves_x10, want;
};

int main(void) {
    /* decode at ~1,024 keys: 16 splits a windowed row (1,024-key window, 64-key tiles), 17 a
     * global one; pairs = rows x KV heads (the 26B-A4B 8 windowed and 2 global, the 31B 16 and 4)
     */
    static const struct shape shapes[] = {
        {"26B-A4B 16 rows, windowed", 16, 16 * 8, MMA_SLOTS_256, WINDOW_WAVES, 2},
        {"26B-A4B 16 rows, global", 17, 16 * 2, MMA_SLOTS_512, GLOBAL_WAVES, 2},
        {"31B 16 rows, windowed", 16, 16 * 16, MMA_SLOTS_256, WINDOW_WAVES, 4},
        {"31B 16 rows, global", 17, 16 * 4, MMA_SLOTS_512, GLOBAL_WAVES, 4},
        {"26B-A4B 4 rows, windowed", 16, 4 * 8, MMA_SLOTS_256, WINDOW_WAVES, 1},
        {"26B-A4B 4 rows, global", 17, 4 * 2, MMA_SLOTS_512, GLOBAL_WAVES, 1},
        {"26B-A4B 1 row, windowed", 16, 8, MMA_SLOTS_256, WINDOW_WAVES, 1},
        {"31B 1 row, global", 17, 4, MMA_SLOTS_512, GLOBAL_WAVES, 1},
        /* the CUDA-core kernels' old counts at 16 26B-A4B rows */
        {"CUDA-core 16 rows, windowed", 16, 16 * 8, CORE_SLOTS, CORE_WAVES, 4},
        {"CUDA-core 16 rows, global", 17, 16 * 2, CORE_SLOTS, CORE_WAVES, 1},
        /* a 1,024-row prefill chunk: as many as a block may take */
        {"prefill chunk, windowed", 16, 1024 * 8, MMA_SLOTS_256, WINDOW_WAVES, 16},
        /* never more than the row has splits */
        {"3 splits, many rows", 3, 100000, MMA_SLOTS_256, WINDOW_WAVES, 2},
        {"1 split", 1, 100000, MMA_SLOTS_256, WINDOW_WAVES, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const struct shape *s = &shapes[i];
        int got = attn_split_choice(s->max_split, s->pairs, s->slots, s->waves_x10, MAX_SPB);
        TEST_CHECK("attn_split_choice.measured", got == s->want, "%s: %d splits a block, want %d",
                   s->what, got, s->want);
    }
    /* over a sweep of shapes: a power of two within its bounds; its grid fills the asked waves
     * unless it is 1; one more doubling would not */
    long bad = 0;
    for (int max_split = 1; max_split <= 32; max_split++)
        for (long long pairs = 1; pairs <= 70000; pairs = pairs * 3 + 1)
            for (int w = 5; w <= 30; w += 5) {
                int spb = attn_split_choice(max_split, pairs, MMA_SLOTS_256, w, MAX_SPB);
                long long blocks = pairs * ((max_split + spb - 1) / spb);
                long long next = pairs * ((max_split + 2 * spb - 1) / (2 * spb));
                int pow2 = spb > 0 && (spb & (spb - 1)) == 0;
                int bounded = spb <= MAX_SPB && (spb == 1 || spb <= max_split);
                int fills = spb == 1 || blocks * 10 >= (long long)MMA_SLOTS_256 * w;
                int largest = 2 * spb > MAX_SPB || 2 * spb > max_split ||
                              next * 10 < (long long)MMA_SLOTS_256 * w;
                bad += !(pow2 && bounded && fills && largest);
            }
    TEST_CHECK("attn_split_choice.bounds", bad == 0,
               "%ld shapes whose choice is not the largest power of two within bounds that fills "
               "the asked waves",
               bad);
    return harness_exit();
}
