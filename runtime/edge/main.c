/* runtime/edge/main.c - the g4pipe command line.
 *
 * Owns: argument parsing (-c FILE, --set section.key=value, --model DIR, --text, --check,
 * --help, --version), applying the configuration, opening the engine and the tokenizer, and
 * handing stdin to the line-protocol server (docs/protocol.md) or to --text.
 * Does not own: configuration rules (config.c), checkpoint checks (engine.c), the protocol
 * (proto.c, serve.c). stdout carries only answers; every log line goes to stderr. */
#include "runtime/base/config.h"
#include "runtime/engine/engine.h"
#include "runtime/base/log.h"
#include "runtime/edge/serve.h"
#include "runtime/text/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define G4PIPE_VERSION "0.1.0"

static void usage(FILE *f) {
    fputs("usage: g4pipe [-c FILE] [--set section.key=value]... [--model DIR] [--text | --check]\n"
          "  -c FILE        INI configuration (relative paths resolve against its folder)\n"
          "  --set K=V      override one key, e.g. --set kv.page_tokens=32\n"
          "  --model DIR    short for --set model.path=DIR\n"
          "  --text         read all of stdin as one user message; write only the answer text\n"
          "  --max-tokens N --text's answer limit (serve.text_max_tokens, default 512)\n"
          "  --check        load and validate the checkpoint, then exit\n"
          "  --version      print the version and exit; -h, --help: this text\n"
          "Without --text or --check, g4pipe answers JSON request lines from stdin on stdout\n"
          "(docs/protocol.md). Logs go to stderr.\n",
          f);
}

typedef struct cli {
    const char *ini;
    int check, text;
} cli;

/* Reads the arguments into c and cfg; returns 0, 1 for --help/--version, -1 on error. */
static int parse_args(int argc, char **argv, cli *c, g4_config *cfg) {
    static char model_set[G4_CONFIG_PATH_MAX + 16], max_tokens_set[64];
    const char *sets[256];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!a) break;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "-c") || !strcmp(a, "--set") || !strcmp(a, "--model") ||
                    !strcmp(a, "--max-tokens");
        if (takes && !val) {
            log_msg(LOG_ERROR, "main", "%s needs a value", a);
            return -1;
        }
        if (takes && n_sets == 256) {
            log_msg(LOG_ERROR, "main", "more than 256 --set/--model");
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
        } else if (!strcmp(a, "--set")) {
            sets[n_sets++] = val;
        } else if (!strcmp(a, "--model")) {
            snprintf(model_set, sizeof model_set, "model.path=%s", val);
            sets[n_sets++] = model_set;
        } else if (!strcmp(a, "--max-tokens")) {
            snprintf(max_tokens_set, sizeof max_tokens_set, "serve.text_max_tokens=%s", val);
            sets[n_sets++] = max_tokens_set;
        } else if (!strcmp(a, "--check")) {
            c->check = 1;
        } else if (!strcmp(a, "--text")) {
            c->text = 1;
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

/* The tokenizer of model.tokenizer; NULL (with a warning) when no such file exists, so token
 * requests still work (dummy weights ship no tokenizer). One that exists but cannot be opened
 * (permissions, a path through a file, an I/O error) or is bad is an error, *failed set: a
 * user who ships one expects text requests to work. */
static tokenizer *open_tokenizer(const g4_config *cfg, int *failed) {
    *failed = 0;
    struct stat st;
    if (!cfg->model.tokenizer[0] || (stat(cfg->model.tokenizer, &st) != 0 && errno == ENOENT)) {
        log_msg(LOG_WARN, "main", "no tokenizer at \"%s\": only \"tokens\" requests will run",
                cfg->model.tokenizer);
        return NULL;
    }
    tokenizer *t = NULL;
    if (tokenizer_load(cfg->model.tokenizer, &t) != 0) *failed = 1;
    return t;
}

int main(int argc, char **argv) {
    g4_config cfg;
    config_defaults(&cfg);
    cli c = {0};
    int rc = parse_args(argc, argv, &c, &cfg);
    if (rc != 0) {
        if (rc < 0) usage(stderr);
        return rc > 0 ? 0 : 2;
    }
    log_set_level(cfg.log.level);
    serve_catch_signals();
    engine *e = NULL;
    if (engine_open(&cfg, 0, &e) != 0) return 1;
    int tk_failed = 0;
    tokenizer *tk = c.check ? NULL : open_tokenizer(&cfg, &tk_failed);
    if (tk_failed)
        rc = 1;
    else if (c.check)
        log_msg(LOG_INFO, "main", "checkpoint %s is valid", cfg.model.path);
    else if (c.text)
        rc = serve_text(e, tk, &cfg, STDIN_FILENO, stdout);
    else
        rc = serve_run(e, tk, &cfg, STDIN_FILENO, stdout);
    tokenizer_free(tk);
    engine_close(e);
    return rc;
}
