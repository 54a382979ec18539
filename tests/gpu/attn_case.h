/* tests/gpu/attn_case.h - test_attn's cases: the configs, the row sets (positions and
 * sequences of a launch's rows), the paged KV store with shuffled page tables and NaN outside
 * every row's window, random inputs on host and device, the reference's arguments for a launch,
 * and the launch and comparison helpers its gates share (tests/gpu/attn_case.c). The gates
 * themselves are test_attn.c's; nothing here reports a gate (harness.h's counters are that
 * file's). */
#ifndef G4_TESTS_GPU_ATTN_CASE_H
#define G4_TESTS_GPU_ATTN_CASE_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

#define PAGE_TOKENS 16
#define N_LAYER 2
#define KV_LAYER 1
#define N_SEQ 3
#define SPARE_PAGES 3
#define BF16_NAN 0x7fc0u

typedef struct cfg {
    int d, n_rot, n_head, n_kv, k_eq_v;
    float base;
} cfg;

/* The current row set (test_attn.c's make_rows and the gates' own sets fill it). */
#define MAX_ROWS 2200 /* the strided tiles' prompt chunks; the reference's sets stay <= 102 */
extern int n_rows;
extern int32_t row_pos[MAX_ROWS], row_seq[MAX_ROWS];
extern int seq_len[N_SEQ]; /* positions 0..len-1 exist */
/* the row set's bound on positions for the launches' max_pos (0: the cases' own rule), and the
 * words its gates' names end with */
extern int rows_max_pos;
extern const char *rows_name;
/* serve.attn_mma as this run has set it: the tensor-core passes (attn_mma.cuh) take every
 * attention launch, and the gates' names say so */
extern int attn_mma;

/* The paged store of one test: tables (host copy), element counts and strides. */
typedef struct store {
    int32_t *tables;
    int max_pages, n_phys;
    size_t per_slot, per_kv, per_page, elems;
    int lo[N_SEQ]; /* earliest position any row of the sequence reads */
} store;

/* Norm-ratio comparison of n bf16 values; counts NaN left in out where ref is a number, and
 * elements written by one side only (NaN in exactly one of them). */
typedef struct cmp {
    double num, den;
    long unwritten, stray;
} cmp;

/* One attention case: its random inputs on the host and the device, and a launch over them. */
typedef struct attn_case {
    store s;
    size_t qn, tb, rb, kv_bytes; /* q's elements; the tables', rows' and K/V's bytes */
    bf16_t *q, *kv;
    void *dq, *dout, *dkv, *dt, *dpos, *dseq; /* dout left unwritten */
    k_attention_args a;                       /* max_pos 0: a gate sets the bound it tests */
} attn_case;

void add_row(int seq, int pos);
int window_start(int pos, int window);
void make_store(store *s, const cfg *c, int window);
k_kv_view view_of(const store *s, const cfg *c, void *base, const int32_t *tables);
void compare(cmp *m, const bf16_t *out, const bf16_t *ref, size_t n);
double rel_of(const cmp *m);
const char *tag_of(const cfg *c, char *buf, size_t len);
void fill_store(bf16_t *kv, const store *s, const cfg *c);
int attn_case_setup(attn_case *t, const cfg *c, int window, int fp8, uint64_t seed);
void attn_case_free(attn_case *t);
k_attention_args ref_args_of(const attn_case *t, const cfg *c, const k_attention_args *a,
                             bf16_t *ref);
/* ref_attention over ra's rows in slices, one thread a slice (each row is computed alone from
 * its own position, sequence and query, so the same bits as one call) */
int ref_attention_rows(const k_attention_args *ra);
long strided_run(const k_attention_args *a, int spb, void *dout, bf16_t *got, const bf16_t *want,
                 size_t qn, int *rc);
long one_row_bits(const k_attention_args *a, void *dout, bf16_t *want, size_t qn, int *rc);

#endif
