/* runtime/serve.h - the line-protocol server: stdin in, stdout out, until EOF or shutdown.
 *
 * Owns: reading stdin as lines (at most 8 MiB each) without blocking a running batch, the
 * backpressure of serve.max_queue (stdin is read only while fewer requests wait), turning each
 * request into prompt ids (prompt: BOS + text with control tokens recognised; messages: the
 * chat template; tokens: as given), the checks that need the prompt's length (max_context,
 * the empty KV budget, the vocabulary), and the control commands. Does not own: parsing
 * (runtime/proto.c), scheduling (runtime/sched.c). */
#ifndef G4_SERVE_H
#define G4_SERVE_H

#include "runtime/engine.h"
#include "runtime/tokenizer.h"

#include <stdio.h>

/* Serves fd in_fd until EOF (running and queued requests finish) or a shutdown command
 * (queued requests end cancelled, running ones finish). A failed engine step ends the
 * requests in it with an error line and serving goes on. Returns 0, or 1 when any step
 * failed. tk may be NULL: then only token requests run. */
int serve_run(engine *e, const tokenizer *tk, const g4_config *cfg, int in_fd, FILE *out);

/* --text: the whole of in_fd is one user message (chat template applied); only the answer
 * text is written to out, as it is generated, then a newline. Greedy. Returns 0 or 1. */
int serve_text(engine *e, const tokenizer *tk, const g4_config *cfg, int in_fd, FILE *out);

#endif
