/* runtime/main.c - the g4pipe command line.
 *
 * Owns: argument parsing (-c FILE, --set section.key=value, --model DIR, --check, --tokens,
 * --max-tokens, --help, --version), applying the configuration, opening the engine, and the
 * one action this build offers: greedy generation from token ids, printed on stdout as one
 * line of space-separated ids. The JSON line protocol of design/PROTOCOL.md replaces that
 * action when it lands (issue 4); until then stdout carries only those ids.
 * Does not own: configuration rules (config.c), checkpoint checks (engine.c, loader.c). */
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/kv_pool.h"
#include "runtime/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G4PIPE_VERSION "0.1.0"
#define MAX_PROMPT 65536

static void usage(FILE *f) {
    fputs("usage: g4pipe -c FILE [--set section.key=value]... [--model DIR]\n"
          "              [--check | --tokens ID,ID,... [--max-tokens N]]\n"
          "  -c FILE          INI configuration (relative paths resolve against its folder)\n"
          "  --set K=V        override one key, e.g. --set kv.local=fp8\n"
          "  --model DIR      short for --set model.path=DIR\n"
          "  --check          load and validate the checkpoint, then exit\n"
          "  --tokens IDS     greedy generation from these token ids (BOS included)\n"
          "  --max-tokens N   new tokens at most (default 16)\n"
          "Logs go to stderr; stdout carries only answers.\n",
          f);
}

typedef struct cli {
    const char *ini;
    int check, max_tokens, n_ids;
    int32_t *ids;
} cli;

static int parse_ids(const char *text, cli *c) {
    free(c->ids);
    c->n_ids = 0;
    c->ids = calloc(MAX_PROMPT, sizeof *c->ids);
    if (!c->ids || !text) return -1;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || c->n_ids == MAX_PROMPT) {
            log_msg(LOG_ERROR, "main", "--tokens: bad id list at \"%.20s\"", p);
            return -1;
        }
        c->ids[c->n_ids++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            log_msg(LOG_ERROR, "main", "--tokens: expected ',' at \"%.20s\"", end);
            return -1;
        }
    }
    return c->n_ids > 0 ? 0 : -1;
}

/* Reads the arguments into cli and cfg; returns 0, 1 for --help/--version, -1 on error. */
static int parse_args(int argc, char **argv, cli *c, g4_config *cfg) {
    const char *sets[256];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!a) break;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "-c") || !strcmp(a, "--set") || !strcmp(a, "--model") ||
                    !strcmp(a, "--tokens") || !strcmp(a, "--max-tokens");
        if (takes && !val) {
            log_msg(LOG_ERROR, "main", "%s needs a value", a);
            return -1;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--version")) {
            printf("g4pipe %s\n", G4PIPE_VERSION);
            return 1;
        } else if (!strcmp(a, "-c")) {
            c->ini = val;
        } else if ((!strcmp(a, "--set") || !strcmp(a, "--model")) && n_sets < 256) {
            sets[n_sets++] = a[2] == 's' ? val : NULL;
            if (a[2] == 'm') {
                static char buf[G4_CONFIG_PATH_MAX + 16];
                snprintf(buf, sizeof buf, "model.path=%s", val);
                sets[n_sets - 1] = buf;
            }
        } else if (!strcmp(a, "--tokens")) {
            if (parse_ids(val, c) != 0) return -1;
        } else if (!strcmp(a, "--max-tokens")) {
            char *end;
            long v = strtol(val ? val : "", &end, 10);
            c->max_tokens = *end == '\0' && v >= 1 && v <= MAX_PROMPT ? (int)v : 0;
            if (c->max_tokens == 0) {
                log_msg(LOG_ERROR, "main", "--max-tokens must be 1..%d (got %s)", MAX_PROMPT, val);
                return -1;
            }
        } else if (!strcmp(a, "--check")) {
            c->check = 1;
            continue;
        } else {
            log_msg(LOG_ERROR, "main", "unknown argument %s (see --help)", a);
            return -1;
        }
        if (takes) i++;
    }
    if (c->ini && config_load(cfg, c->ini) != 0) return -1;
    for (int i = 0; i < n_sets; i++)
        if (config_set(cfg, sets[i]) != 0) return -1;
    return config_finish(cfg);
}

/* Greedy generation on slot 0: prefill in chunks, then one token per step. */
static int generate(engine *e, const g4_config *cfg, const cli *c) {
    const g4_model_desc *m = engine_model(e);
    int total = c->n_ids + c->max_tokens;
    if (total > cfg->serve.max_context) {
        log_msg(LOG_ERROR, "main", "%d prompt + %d new tokens exceed serve.max_context %d",
                c->n_ids, c->max_tokens, cfg->serve.max_context);
        return -1;
    }
    int32_t *ids = calloc((size_t)total, sizeof *ids), *pos = calloc((size_t)total, sizeof *pos);
    int32_t *seq = calloc((size_t)total, sizeof *seq);
    bf16_t *logits = malloc((size_t)m->n_vocab * sizeof *logits);
    int rc = ids && pos && seq && logits ? 0 : -1;
    for (int i = 0; i < c->n_ids && rc == 0; i++) {
        ids[i] = c->ids[i];
        if (ids[i] >= m->n_vocab) {
            log_msg(LOG_ERROR, "main", "token id %d is outside the vocabulary (%d)", ids[i],
                    m->n_vocab);
            rc = -1;
        }
    }
    for (int i = 0; i < total; i++)
        if (pos) pos[i] = i;
    int n = c->n_ids, begin = 0;
    while (rc == 0 && n < total) {
        int end = begin + cfg->serve.prefill_chunk < n ? begin + cfg->serve.prefill_chunk : n;
        engine_seq_release_front(e, 0, begin);
        if (engine_seq_reserve(e, 0, begin, end) != 0) {
            log_msg(LOG_ERROR, "main", "the KV budget cannot hold %d tokens", end);
            rc = -1;
            break;
        }
        int32_t last = end - begin - 1;
        engine_batch b = {end - begin, ids + begin, pos + begin, seq, 1, &last};
        rc = engine_step(e, &b, logits, NULL, NULL);
        begin = end;
        if (rc != 0 || end < n) continue;
        int best = 0; /* greedy: the first (lowest) id among equal logits */
        for (int v = 1; v < m->n_vocab; v++)
            if (ref_bf16_to_f32(logits[v]) > ref_bf16_to_f32(logits[best])) best = v;
        ids[n++] = best;
        printf("%s%d", n == c->n_ids + 1 ? "" : " ", best);
        fflush(stdout);
    }
    if (rc == 0) printf("\n");
    engine_seq_free(e, 0);
    free(ids);
    free(pos);
    free(seq);
    free(logits);
    return rc;
}

int main(int argc, char **argv) {
    g4_config cfg;
    config_defaults(&cfg);
    cli c = {.max_tokens = 16};
    int rc = parse_args(argc, argv, &c, &cfg);
    if (rc != 0) {
        free(c.ids);
        if (rc < 0) usage(stderr);
        return rc > 0 ? 0 : 2;
    }
    log_set_level(cfg.log.level);
    engine *e = NULL;
    if (engine_open(&cfg, 1, &e) != 0) {
        free(c.ids);
        return 1;
    }
    if (!c.check && c.n_ids == 0) log_msg(LOG_INFO, "main", "nothing to do: pass --tokens");
    if (c.check)
        log_msg(LOG_INFO, "main", "checkpoint %s is valid", cfg.model.path);
    else if (c.n_ids)
        rc = generate(e, &cfg, &c);
    engine_close(e);
    free(c.ids);
    return rc == 0 ? 0 : 1;
}
