/* runtime/text/chat.c - see chat.h. The template is built from control-token ids and plain-text
 * segments: each segment between control tokens is encoded on its own with no control-token
 * matching, which is what Hugging Face's tokenizer does with the rendered template string
 * (it splits on added tokens, then encodes the pieces between them) except that a control
 * token written inside a message stays text. */
#include "runtime/text/chat.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

int chat_is_stop_token(int32_t id) {
    return id == CHAT_EOS || id == CHAT_TURN_CLOSE || id == CHAT_TOOL_RESPONSE;
}

typedef struct id_buf {
    int32_t *ids;
    int n, cap;
} id_buf;

static int push_id(id_buf *b, int32_t id) {
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 256;
        int32_t *p = realloc(b->ids, sizeof *p * (size_t)cap);
        if (!p) return -1;
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return 0;
}

/* Encodes text as plain text (no control tokens matched) and appends the ids. */
static int push_text(id_buf *b, const tokenizer *t, const char *text) {
    int32_t *ids = NULL;
    int n = tokenizer_encode(t, text, strlen(text), 0, &ids);
    int rc = n < 0 ? -1 : 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = push_id(b, ids[i]);
    free(ids);
    return rc;
}

/* One turn: <|turn>{role}\n[<|think|>]{content}<turn|>\n. Without <|think|>, "{role}\n{content}"
 * is one segment, as in the rendered template HF tokenizes (BPE may merge across the
 * newline). */
static int push_turn(id_buf *b, const tokenizer *t, const char *role, const char *content,
                     int think) {
    size_t lr = strlen(role), lc = strlen(content);
    char *seg = malloc(lr + lc + 2);
    if (!seg) return -1;
    memcpy(seg, role, lr);
    seg[lr] = '\n';
    seg[lr + 1] = '\0';
    int rc = push_id(b, CHAT_TURN_OPEN);
    if (rc == 0 && think) rc = push_text(b, t, seg) || push_id(b, CHAT_THINK);
    if (rc == 0 && think) seg[0] = '\0';
    if (rc == 0) {
        size_t at = strlen(seg);
        memcpy(seg + at, content, lc + 1);
        if (seg[0]) rc = push_text(b, t, seg);
    }
    free(seg);
    if (rc == 0) rc = push_id(b, CHAT_TURN_CLOSE) || push_text(b, t, "\n");
    return rc ? -1 : 0;
}

int chat_render(const tokenizer *t, const chat_message *msgs, int n, int thinking, int32_t **ids,
                char *err, size_t err_len) {
    id_buf b = {0};
    *ids = NULL;
    int rc = push_id(&b, CHAT_BOS);
    int has_system = n > 0 && strcmp(msgs[0].role, "system") == 0;
    if (rc == 0 && thinking && !has_system) rc = push_turn(&b, t, "system", "", 1);
    for (int i = 0; i < n && rc == 0; i++) {
        const char *role = msgs[i].role;
        if (strcmp(role, "system") == 0 && i > 0) {
            snprintf(err, err_len, "messages[%d]: a system message must come first", i);
            free(b.ids);
            return -1;
        }
        if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 &&
            strcmp(role, "model") != 0) {
            snprintf(err, err_len, "messages[%d].role: unknown role \"%s\"", i, role);
            free(b.ids);
            return -1;
        }
        rc = push_turn(&b, t, role, msgs[i].content, thinking && i == 0 && has_system);
    }
    if (rc == 0) rc = push_id(&b, CHAT_TURN_OPEN);
    if (rc == 0) rc = push_text(&b, t, "model\n");
    if (rc != 0) {
        snprintf(err, err_len, "out of memory rendering the chat template");
        free(b.ids);
        return -1;
    }
    *ids = b.ids;
    return b.n;
}

int chat_stream_route(chat_stream *cs, int32_t id, const char *bytes, size_t len, size_t *skip) {
    *skip = 0;
    if (id == CHAT_CHANNEL_OPEN) {
        cs->in_channel = 1;
        cs->name_done = 0;
        return 1;
    }
    if (id == CHAT_CHANNEL_CLOSE) {
        cs->in_channel = 0;
        return 1;
    }
    if (!cs->in_channel) return 0;
    if (!cs->name_done) {
        /* the channel's name ("thought") runs to the first newline */
        const char *nl = memchr(bytes, '\n', len);
        if (!nl) {
            *skip = len;
            return 1;
        }
        *skip = (size_t)(nl - bytes) + 1;
        cs->name_done = 1;
    }
    return 1;
}
