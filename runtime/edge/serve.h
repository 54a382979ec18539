/* runtime/edge/serve.h - the line-protocol server: stdin in, stdout out, until EOF or shutdown.
 *
 * Owns: reading stdin as lines (at most 8 MiB each) without blocking a running batch, the
 * backpressure of serve.max_queue (stdin is read only while fewer requests wait), turning each
 * request into prompt ids (prompt: BOS + text with control tokens recognised; messages: the
 * chat template; tokens: as given), the checks that need the prompt's length (max_context,
 * the empty KV budget, the vocabulary), the control commands, and --text's one request with
 * its plain output. Does not own: parsing (runtime/proto/proto.c), scheduling
 * (runtime/sched/sched.c), the answer's text (runtime/sched/answer.c). */
#ifndef G4_SERVE_H
#define G4_SERVE_H

#include "runtime/engine/engine.h"
#include "runtime/text/tokenizer.h"

#include <signal.h>
#include <stdio.h>

/* Serves fd in_fd until EOF (running and queued requests finish) or a shutdown command
 * (queued requests end cancelled, running ones finish). A failed engine step ends the
 * requests in it with an error line and serving goes on. Returns 0, or 1 when any step
 * failed. tk may be NULL: then only token requests run. */
int serve_run(engine *e, const tokenizer *tk, const g4_config *cfg, int in_fd, FILE *out);

/* --text: the whole of in_fd is one user message (chat template applied), run as one greedy
 * request of at most serve.text_max_tokens through the scheduler, the same path as a request
 * line; only the answer text is written to out, as it is generated, then a newline. Returns 0,
 * 1 on an error (logged), or 128 + the signal that ended the answer early. */
int serve_text(engine *e, const tokenizer *tk, const g4_config *cfg, int in_fd, FILE *out);

/* The last terminating signal serve_run saw (SIGTERM, SIGINT, SIGHUP), 0 if none. */
extern volatile sig_atomic_t serve_signal;

/* Installs the handlers serve_run answers (the process's edge, called once by main): SIGTERM,
 * SIGINT and SIGHUP stop the reading and cancel the queued requests while the running ones
 * finish, a second one cancels those too, then serve_run returns 128 + the signal; SIGPIPE is
 * ignored, so a closed stdout is a write error that serve_run logs and stops on. */
void serve_catch_signals(void);

#endif
