/* tests/e2e/fixture_dump.h - the Hugging Face reference dumps of a fixture (hf_eager.txt,
 * hf_sdpa.txt), in the line format tests/fixtures/make_fixtures.py documents. */
#ifndef G4_FIXTURE_DUMP_H
#define G4_FIXTURE_DUMP_H

#include <stdint.h>

#define FX_TOP_K 8
#define FX_MAX_CASES 32

typedef struct fx_pos {
    float top1, top2;      /* HF's two largest bf16 logits */
    int32_t ids[FX_TOP_K]; /* HF's top-k ids, best first */
    float lp[FX_TOP_K];    /* their fp32 logprobs */
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
