/* runtime/text/chat.h - Gemma 4's chat format: rendering messages into prompt ids, and splitting an
 * answer's stream into its text and its thought channel.
 *
 * Owns: the template of docs/gemma4-numerics.md section 3 (exactly one BOS, system / user /
 * model turns, the generation prompt, <|think|> for thinking) and the answer-side parser that
 * routes <|channel>thought ... <channel|> to reasoning. Message content is always plain text:
 * it is encoded with no control-token matching, so no message can forge a turn.
 * Does not own: tokenising (runtime/text/tokenizer.h), stop handling (runtime/sched/answer.c). */
#ifndef G4_CHAT_H
#define G4_CHAT_H

#include "runtime/text/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* Gemma 4's ids (docs/gemma4-numerics.md section 3). */
enum chat_token {
    CHAT_BOS = 2,
    CHAT_EOS = 1,
    CHAT_TOOL_RESPONSE = 50,
    CHAT_THINK = 98,
    CHAT_CHANNEL_OPEN = 100,
    CHAT_CHANNEL_CLOSE = 101,
    CHAT_TURN_OPEN = 105,
    CHAT_TURN_CLOSE = 106
};

/* 1 for the ids that end an answer: <eos> 1, <turn|> 106, <|tool_response> 50. */
int chat_is_stop_token(int32_t id);

typedef struct chat_message {
    const char *role; /* "system", "user" or "model" */
    const char *content;
} chat_message;

/* Renders messages as
 *   <bos>[<|turn>system\n[<|think|>]{system}<turn|>\n]{<|turn>{role}\n{content}<turn|>\n}...
 *   <|turn>model\n
 * A system message, if any, must come first; with thinking on and no system message, an empty
 * system turn carries <|think|>. Returns the number of ids with a malloc'ed array in *ids, or
 * -1 with a message in err (a system message that is not first, an unknown role). */
int chat_render(const tokenizer *t, const chat_message *msgs, int n, int thinking, int32_t **ids,
                char *err, size_t err_len);

/* Splits an answer's decoded stream: bytes inside <|channel> ... <channel|> (after the
 * channel's name line, "thought\n") are reasoning, the rest is text. Control tokens produce no
 * bytes. */
typedef struct chat_stream {
    int in_channel; /* inside <|channel> ... <channel|> */
    int name_done;  /* the channel's name line has been skipped */
} chat_stream;

/* Feeds one generated token and its decoded bytes; returns 1 when the bytes belong to the
 * reasoning, 0 when they are text. *skip is set to how many leading bytes are the channel's
 * name line and belong to neither. */
int chat_stream_route(chat_stream *cs, int32_t id, const char *bytes, size_t len, size_t *skip);

#endif
