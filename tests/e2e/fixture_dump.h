/* tests/e2e/fixture_dump.h - the Hugging Face reference dumps of a fixture (hf_eager.txt,
 * hf_sdpa.txt, and a trained fixture's hf_trained.txt), in the line formats
 * tests/fixtures/make_fixtures.py and train_fixtures.py document. */
#ifndef G4_FIXTURE_DUMP_H
#define G4_FIXTURE_DUMP_H

#include <stdint.h>

#define FX_TOP_K 8      /* the random-weight fixtures' top-k */
#define FX_TOP_K_MAX 32 /* the trained fixtures' */
#define FX_MAX_CASES 32

/* A trained dump's other HF runs at one position (the hfalt record): argmax and the true next
 * token's logprob of HF sdpa, fp32 eager and eager with e4m3-stored sliding K/V, and the
 * KL(eager || variant) in nats of sdpa (eager's top-k plus a tail bucket) and e4m3 (full). */
typedef struct fx_alt {
    int32_t sdpa_top1, fp32_top1, e4m3_top1;
    float sdpa_tl, fp32_tl, e4m3_tl;
    double sdpa_kl, e4m3_kl;
} fx_alt;

typedef struct fx_pos {
    float top1, top2;          /* HF's two largest bf16 logits */
    int k;                     /* top-k pairs recorded: FX_TOP_K, or up to FX_TOP_K_MAX */
    int32_t ids[FX_TOP_K_MAX]; /* HF's top-k ids, best first */
    float lp[FX_TOP_K_MAX];    /* their fp32 logprobs */
    int has_tl;                /* a trained dump's tl and hfalt records at this position */
    float tl;                  /* the true next token's logprob (ids[pos + 1]) */
    fx_alt alt;
} fx_pos;

typedef struct fx_case {
    char name[32];
    int n;           /* prompt tokens */
    int32_t *ids;    /* [n] */
    fx_pos *pos;     /* [n]; positions before lp_from carry no record */
    int lp_from;     /* first position with an lp record (0, or n - tail for a waypoint) */
    int n_greedy;    /* greedy continuation (eager dump only) */
    int32_t *greedy; /* [n_greedy] */
    float *g_top1;   /* [n_greedy] */
    float *g_top2;   /* [n_greedy] */
    /* sdpa dump of a geometry fixture: sdpa's argmax at each of eager's greedy steps, fed
     * eager's tokens (the floor of the greedy gate on models where HF disagrees with itself) */
    int n_floor;
    int32_t *floor_greedy; /* [n_floor] */
} fx_case;

typedef struct fx_dump {
    int n_cases;
    fx_case cases[FX_MAX_CASES];
} fx_dump;

/* Reads path into d. Returns 0, or -1 after printing why to stderr. */
int fx_dump_read(const char *path, fx_dump *d);
void fx_dump_free(fx_dump *d);

/* 1 when a position is tie-exempt: its top-1/top-2 margin is under 2 bf16 ulps of top-1. */
int fx_tie_exempt(float top1, float top2);

#endif
