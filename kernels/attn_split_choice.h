/* kernels/attn_split_choice.h - how many of a row's key splits one attention block takes in
 * turn: plain arithmetic, no CUDA, shared by the launcher (attn.cu) and its CPU unit test. */
#ifndef G4_ATTN_SPLIT_CHOICE_H
#define G4_ATTN_SPLIT_CHOICE_H

/* The largest power of two, at most max_spb and max_split, whose grid (pairs x ceil(max_split /
 * spb) blocks) still fills at least min_waves_x10 / 10 waves of the card's `slots` resident
 * blocks. Fewer, longer blocks pay a block's fixed costs (queries' load, barriers, the merge of
 * statistics) once for several splits; too few leave a last wave that idles most of the card.
 * Speed only: a split's arithmetic is the same whichever block takes it. */
static inline int attn_split_choice(int max_split, long long pairs, long long slots,
                                    int min_waves_x10, int max_spb) {
    int spb = 1;
    while (spb * 2 <= max_spb && spb * 2 <= max_split &&
           pairs * ((max_split + spb * 2 - 1) / (spb * 2)) * 10 >= slots * min_waves_x10)
        spb *= 2;
    return spb;
}

#endif
