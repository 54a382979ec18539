/* tests/e2e/fixture_dump.c - parser of the fixture dump format (see fixture_dump.h). One
 * record per line, whitespace-separated, so it stays a few lines of strtol/strtof. */
#include "tests/e2e/fixture_dump.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_case(char *line, fx_case *c) {
    char *save = NULL;
    strtok_r(line, " \n", &save); /* "case" */
    const char *name = strtok_r(NULL, " \n", &save);
    const char *n = strtok_r(NULL, " \n", &save);
    if (!name || !n) return -1;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->n = atoi(n);
    c->lp_from = c->n; /* lowered by each lp record */
    c->ids = calloc((size_t)c->n, sizeof *c->ids);
    c->pos = calloc((size_t)c->n, sizeof *c->pos);
    if (!c->ids || !c->pos) return -1;
    for (int i = 0; i < c->n; i++) {
        const char *t = strtok_r(NULL, " \n", &save);
        if (!t) return -1;
        c->ids[i] = (int32_t)atoi(t);
    }
    return 0;
}

static int parse_lp(char *line, fx_case *c) {
    char *save = NULL;
    strtok_r(line, " \n", &save); /* "lp" */
    const char *p = strtok_r(NULL, " \n", &save);
    const char *t1 = strtok_r(NULL, " \n", &save);
    const char *t2 = strtok_r(NULL, " \n", &save);
    if (!p || !t1 || !t2) return -1;
    int pos = atoi(p);
    if (pos < 0 || pos >= c->n) return -1;
    if (pos < c->lp_from) c->lp_from = pos;
    fx_pos *fp = &c->pos[pos];
    fp->top1 = strtof(t1, NULL);
    fp->top2 = strtof(t2, NULL);
    fp->k = 0;
    for (const char *pair; (pair = strtok_r(NULL, " \n", &save)) != NULL;) {
        if (fp->k == FX_TOP_K_MAX || !strchr(pair, ':')) return -1;
        fp->ids[fp->k] = (int32_t)atoi(pair);
        fp->lp[fp->k++] = strtof(strchr(pair, ':') + 1, NULL);
    }
    return fp->k >= FX_TOP_K ? 0 : -1; /* every dump records at least FX_TOP_K ids */
}

/* "tl <pos> <lp>" and "hfalt <pos> <9 fields>" of a trained dump (train_fixtures.py). */
static int parse_tl(char *line, fx_case *c) {
    int pos;
    float lp;
    if (sscanf(line, "tl %d %f", &pos, &lp) != 2 || pos < 0 || pos + 1 >= c->n) return -1;
    c->pos[pos].has_tl = 1;
    c->pos[pos].tl = lp;
    return 0;
}

static int parse_alt(char *line, fx_case *c) {
    int pos;
    fx_alt a;
    if (sscanf(line, "hfalt %d %d %f %lf %d %f %d %f %lf", &pos, &a.sdpa_top1, &a.sdpa_tl,
               &a.sdpa_kl, &a.fp32_top1, &a.fp32_tl, &a.e4m3_top1, &a.e4m3_tl, &a.e4m3_kl) != 9 ||
        pos < 0 || pos + 1 >= c->n || !c->pos[pos].has_tl)
        return -1;
    c->pos[pos].alt = a;
    return 0;
}

static int parse_greedy(char *line, fx_case *c) {
    char *save = NULL;
    strtok_r(line, " \n", &save); /* "greedy" */
    const char *n = strtok_r(NULL, " \n", &save);
    if (!n) return -1;
    c->n_greedy = atoi(n);
    c->greedy = calloc((size_t)c->n_greedy + 1, sizeof *c->greedy);
    c->g_top1 = calloc((size_t)c->n_greedy + 1, sizeof *c->g_top1);
    c->g_top2 = calloc((size_t)c->n_greedy + 1, sizeof *c->g_top2);
    if (!c->greedy || !c->g_top1 || !c->g_top2) return -1;
    for (int i = 0; i < c->n_greedy; i++) {
        char *t = strtok_r(NULL, " \n", &save);
        char *a = t ? strchr(t, ':') : NULL;
        char *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) return -1;
        c->greedy[i] = (int32_t)atoi(t);
        c->g_top1[i] = strtof(a + 1, NULL);
        c->g_top2[i] = strtof(b + 1, NULL);
    }
    return 0;
}

static int parse_greedy_floor(char *line, fx_case *c) {
    char *save = NULL;
    strtok_r(line, " \n", &save); /* "greedy_floor" */
    const char *n = strtok_r(NULL, " \n", &save);
    if (!n || atoi(n) < 0) return -1;
    c->n_floor = atoi(n);
    c->floor_greedy = calloc((size_t)c->n_floor + 1, sizeof *c->floor_greedy);
    if (!c->floor_greedy) return -1;
    for (int i = 0; i < c->n_floor; i++) {
        const char *t = strtok_r(NULL, " \n", &save);
        if (!t) return -1;
        c->floor_greedy[i] = (int32_t)atoi(t);
    }
    return 0;
}

int fx_dump_read(const char *path, fx_dump *d) {
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fixture_dump: cannot open %s\n", path);
        return -1;
    }
    static char line[1 << 20]; /* a 32K-token waypoint's case line is about 230 KB */
    int rc = 0, lineno = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        fx_case *cur = d->n_cases ? &d->cases[d->n_cases - 1] : NULL;
        if (strncmp(line, "case ", 5) == 0) {
            if (d->n_cases == FX_MAX_CASES)
                rc = -1;
            else
                rc = parse_case(line, &d->cases[d->n_cases++]);
        } else if (strncmp(line, "lp ", 3) == 0) {
            rc = cur ? parse_lp(line, cur) : -1;
        } else if (strncmp(line, "greedy ", 7) == 0) {
            rc = cur ? parse_greedy(line, cur) : -1;
        } else if (strncmp(line, "tl ", 3) == 0) {
            rc = cur ? parse_tl(line, cur) : -1;
        } else if (strncmp(line, "hfalt ", 6) == 0) {
            rc = cur ? parse_alt(line, cur) : -1;
        } else if (strncmp(line, "greedy_floor ", 13) == 0) {
            rc = cur ? parse_greedy_floor(line, cur) : -1;
        }
    }
    fclose(f);
    if (rc != 0) fprintf(stderr, "fixture_dump: %s:%d: malformed record\n", path, lineno);
    return rc;
}

void fx_dump_free(fx_dump *d) {
    for (int i = 0; i < d->n_cases; i++) {
        free(d->cases[i].ids);
        free(d->cases[i].pos);
        free(d->cases[i].greedy);
        free(d->cases[i].g_top1);
        free(d->cases[i].g_top2);
        free(d->cases[i].floor_greedy);
    }
    memset(d, 0, sizeof *d);
}

int fx_tie_exempt(float top1, float top2) {
    int e;
    (void)frexpf(fabsf(top1), &e); /* |top1| in [2^(e-1), 2^e): bf16 ulp is 2^(e-1-7) */
    float ulp = ldexpf(1.0f, e - 8);
    return top1 - top2 < 2.0f * ulp;
}
