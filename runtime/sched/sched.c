/* runtime/sched/sched.c - see sched.h. Requests live in two places: a FIFO queue until admitted,
 * then the running list in admission order (which fixes the order of rows in a step and of answer
 * lines within a step). Each running request holds one engine sequence slot. */
#include "runtime/sched/sched.h"

#include "runtime/sched/answer.h"
#include "runtime/engine/kv_pool.h"
#include "runtime/base/log.h"
#include "runtime/text/par.h"
#include "runtime/text/sampler.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SCHED_AUTO_DRAW_THREADS 32 /* serve.sample_threads = 0 on a many-core host */
/* a long prompt's prefill is logged at most this often: a line a user watching a 30,000-token
 * prompt sees move, few enough not to flood a log */
#define SCHED_PROGRESS_MS 2000.0

typedef struct sreq {
    proto_request req;
    int32_t *ids; /* [n_prompt + max_tokens] prompt, then the answer */
    int n_prompt, n_ids, n_written;
    int slot;          /* engine sequence slot, -1 while queued */
    int begin;         /* the first of its rows in the current step */
    double t_progress; /* when its prefill was last logged (sched_note_prefill) */
    int worst[2];      /* KV pages committed per family at admission */
    answer ans;        /* its text and lines; ans.n_out counts the answer's tokens */
    double t_arrive, t_admit, t_first, t_last;
    struct sreq *next; /* queue link */
} sreq;

struct sched {
    engine *e;
    const tokenizer *tk;
    g4_config cfg;
    FILE *out;
    answer_sink sink;
    int has_sink; /* --text: answers go to sink, not to out */
    sreq *q_head, *q_tail;
    int n_queued;
    sreq **running; /* [max_batch] in admission order */
    int n_running;
    unsigned char *slot_used;
    kv_pool *pool;    /* the KV budget: made from engine_kv_shape, handed over with each step */
    int committed[2]; /* pages of each family promised to the running requests' worst cases */
    /* step buffers */
    int32_t *ids, *pos, *seq, *out_src;
    uint8_t *prompt;      /* [rows] 1: a prompt token, 0: a generated one (engine_batch) */
    int32_t *argmax;      /* [max_batch] each out row's greedy token, from the engine */
    int32_t *nonfinite;   /* [max_batch] 1: the out row's logits are not finite */
    sreq **in_step;       /* [max_batch] the requests with rows in the step */
    uint8_t *need_logits; /* [max_batch] 0: the row's greedy token or candidates suffice */
    int32_t *topk;        /* [max_batch] candidates a sampled top-k row asks for (0: none) */
    int32_t *topk_ids;    /* [max_batch, K_TOPK_MAX] */
    bf16_t *topk_vals;    /* [max_batch, K_TOPK_MAX] */
    sreq **out_req;
    bf16_t *logits;
    sampler_work *work; /* sampler_pick_candidates', for K_TOPK_MAX candidates */
    /* host draws (rows sampled from their whole logits row, or with logprobs): made side by
     * side before the step's tokens are taken, one work buffer per worker */
    int draw_threads;
    sampler_work **draw_work; /* [draw_threads], each for n_vocab ids */
    int32_t *draw_tok;        /* [max_batch] */
    proto_logprob *draw_lp;   /* [max_batch] */
    /* stats */
    long steps, tokens_out, last_rows;
    double t_first_step;
};

double sched_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

sched *sched_create(engine *e, const tokenizer *tk, const g4_config *cfg, FILE *out) {
    sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->e = e;
    s->tk = tk;
    s->cfg = *cfg;
    s->out = out;
    int rows = engine_max_rows(e), mb = cfg->serve.max_batch, V = engine_model(e)->n_vocab;
    kv_pool_shape shape;
    engine_kv_shape(e, &shape);
    s->pool = kv_pool_create_shape(&shape);
    s->running = calloc((size_t)mb, sizeof(sreq *));
    s->slot_used = calloc((size_t)mb, 1);
    s->ids = calloc((size_t)rows, sizeof *s->ids);
    s->pos = calloc((size_t)rows, sizeof *s->pos);
    s->seq = calloc((size_t)rows, sizeof *s->seq);
    s->prompt = calloc((size_t)rows, sizeof *s->prompt);
    s->out_src = calloc((size_t)mb, sizeof *s->out_src);
    s->out_req = calloc((size_t)mb, sizeof(sreq *));
    s->argmax = calloc((size_t)mb, sizeof *s->argmax);
    s->nonfinite = calloc((size_t)mb, sizeof *s->nonfinite);
    s->in_step = calloc((size_t)mb, sizeof(sreq *));
    s->need_logits = calloc((size_t)mb, sizeof *s->need_logits);
    s->topk = calloc((size_t)mb, sizeof *s->topk);
    s->topk_ids = calloc((size_t)mb * K_TOPK_MAX, sizeof *s->topk_ids);
    s->topk_vals = calloc((size_t)mb * K_TOPK_MAX, sizeof *s->topk_vals);
    s->logits = calloc((size_t)mb * (size_t)V, sizeof *s->logits);
    s->work = sampler_work_new(K_TOPK_MAX);
    /* serve.sample_threads, 0: a thread per CPU up to SCHED_AUTO_DRAW_THREADS (each holds a
     * sampler work buffer, 4.8 MB at 262,144 ids); never more than batch rows */
    int t = cfg->serve.sample_threads > 0 ? cfg->serve.sample_threads : par_cpus();
    if (cfg->serve.sample_threads == 0 && t > SCHED_AUTO_DRAW_THREADS) t = SCHED_AUTO_DRAW_THREADS;
    s->draw_threads = t < mb ? t : mb;
    s->draw_work = calloc((size_t)s->draw_threads, sizeof(sampler_work *));
    s->draw_tok = calloc((size_t)mb, sizeof *s->draw_tok);
    s->draw_lp = calloc((size_t)mb, sizeof *s->draw_lp);
    int draws_ok = s->draw_work && s->draw_tok && s->draw_lp;
    for (int w = 0; draws_ok && w < s->draw_threads; w++)
        draws_ok = (s->draw_work[w] = sampler_work_new(V)) != NULL;
    if (!s->pool || !s->running || !s->slot_used || !s->ids || !s->pos || !s->seq || !s->prompt ||
        !s->out_src || !s->out_req || !s->logits || !s->work || !s->argmax || !s->nonfinite ||
        !s->in_step || !s->need_logits || !s->topk || !s->topk_ids || !s->topk_vals || !draws_ok) {
        sched_destroy(s);
        return NULL;
    }
    return s;
}

void sched_set_sink(sched *s, const answer_sink *sink) {
    s->sink = *sink;
    s->has_sink = 1;
}

static void sreq_free(sreq *r) {
    answer_free(&r->ans);
    proto_request_free(&r->req);
    free(r->ids);
    free(r);
}

void sched_destroy(sched *s) {
    if (!s) return;
    while (s->q_head) {
        sreq *r = s->q_head;
        s->q_head = r->next;
        sreq_free(r);
    }
    for (int i = 0; i < s->n_running; i++)
        sreq_free(s->running[i]);
    free(s->running);
    free(s->slot_used);
    free(s->ids);
    free(s->pos);
    free(s->seq);
    free(s->out_src);
    free(s->out_req);
    free(s->argmax);
    free(s->nonfinite);
    free(s->in_step);
    free(s->need_logits);
    free(s->prompt);
    free(s->topk);
    free(s->topk_ids);
    free(s->topk_vals);
    free(s->logits);
    sampler_work_free(s->work);
    for (int w = 0; s->draw_work && w < s->draw_threads; w++)
        sampler_work_free(s->draw_work[w]);
    free(s->draw_work);
    free(s->draw_tok);
    free(s->draw_lp);
    kv_pool_destroy(s->pool);
    free(s);
}

int sched_submit(sched *s, proto_request *req, int32_t *prompt, int n_prompt, double t_arrive) {
    sreq *r = calloc(1, sizeof *r);
    int cap = n_prompt + req->max_tokens;
    int32_t *ids = r ? calloc((size_t)cap, sizeof *ids) : NULL;
    if (!ids) {
        answer a; /* no answer to hold yet, but its terminal line goes where answers go */
        answer_init(&a, req, s->tk, n_prompt, s->cfg.serve.max_context, s->out,
                    s->has_sink ? &s->sink : NULL);
        answer_fail(&a, "out of memory");
        proto_request_free(req);
        free(r);
        free(prompt);
        return -1;
    }
    r->req = *req;
    memset(req, 0, sizeof *req);
    memcpy(ids, prompt, sizeof *ids * (size_t)n_prompt);
    free(prompt);
    r->ids = ids;
    r->n_prompt = r->n_ids = n_prompt;
    answer_init(&r->ans, &r->req, s->tk, n_prompt, s->cfg.serve.max_context, s->out,
                s->has_sink ? &s->sink : NULL);
    r->slot = -1;
    r->t_arrive = t_arrive;
    if (s->q_tail)
        s->q_tail->next = r;
    else
        s->q_head = r;
    s->q_tail = r;
    s->n_queued++;
    return 0;
}

int sched_in_flight(const sched *s, const char *id_json) {
    for (const sreq *r = s->q_head; r; r = r->next)
        if (strcmp(r->req.id_json, id_json) == 0) return 1;
    for (int i = 0; i < s->n_running; i++)
        if (strcmp(s->running[i]->req.id_json, id_json) == 0) return 1;
    return 0;
}

int sched_could_ever_fit(const sched *s, int n_tokens) {
    return kv_pool_could_ever_fit(s->pool, n_tokens, s->cfg.serve.prefill_chunk);
}

const kv_pool *sched_kv_pool(const sched *s) { return s->pool; }

int sched_pages_all_free(const sched *s) {
    for (int f = 0; f < 2; f++)
        if (kv_pool_free_pages(s->pool, (enum kv_family)f) !=
            kv_pool_usable_pages(s->pool, (enum kv_family)f))
            return 0;
    return 1;
}

int sched_queued(const sched *s) { return s->n_queued; }
long sched_last_step_rows(const sched *s) { return s->last_rows; }
int sched_running(const sched *s) { return s->n_running; }

/* ---- ending requests ------------------------------------------------------------------ */

/* Gives back r's slot and pages, takes it off the running list and frees it. */
static void release(sched *s, sreq *r) {
    if (r->slot >= 0) {
        kv_pool_free_seq(s->pool, r->slot);
        s->slot_used[r->slot] = 0;
        s->committed[KV_LOCAL] -= r->worst[KV_LOCAL];
        s->committed[KV_GLOBAL] -= r->worst[KV_GLOBAL];
        int j = 0;
        for (int i = 0; i < s->n_running; i++)
            if (s->running[i] != r) s->running[j++] = s->running[i];
        s->n_running = j;
    }
    sreq_free(r);
}

/* Ends a running r with an error line as its terminal line (no done line follows). */
static void fail_request(sched *s, sreq *r, const char *message) {
    answer_fail(&r->ans, message);
    release(s, r);
}

/* Ends r for why with its done line (or, out of memory, an error line). */
static void finish(sched *s, sreq *r, enum answer_end why) {
    double now = sched_now_ms();
    int n_out = r->ans.n_out;
    answer_timing t = {
        .queue_ms = (r->t_admit > 0 ? r->t_admit : now) - r->t_arrive,
        .ttft_ms = r->t_first > 0 ? r->t_first - r->t_arrive : 0,
        .decode_ms_per_token = n_out > 1 ? (r->t_last - r->t_first) / (n_out - 1) : 0,
    };
    answer_finish(&r->ans, why, &t);
    release(s, r);
}

/* Greedy requests take the argmax, which the engine computes (on the device on the GPU
 * backend); sampler_pick's greedy rule is the same one (temperature 0 or top_k 1). */
static int is_greedy(const proto_request *q) { return !(q->temperature > 0) || q->top_k == 1; }

/* Sampled rows with a top-k of at most K_TOPK_MAX and no logprobs take their token from the
 * engine's top-k candidates (sampler_pick_candidates: the same token as from the whole row);
 * the number asked for, or 0. */
static int32_t candidates_wanted(const proto_request *q, int n_vocab) {
    if (is_greedy(q) || q->logprobs > 0 || q->top_k <= 0 || q->top_k > K_TOPK_MAX) return 0;
    return q->top_k < n_vocab ? q->top_k : n_vocab;
}

static sampler_params params_of(const sreq *r) {
    return (sampler_params){(float)r->req.temperature, r->req.top_k, (float)r->req.top_p,
                            (float)r->req.min_p, r->req.seed};
}

/* Out row o's draw from its whole logits row, and its logprobs when asked: each a pass over the
 * vocabulary (milliseconds at 262,144 ids), so the step's rows run side by side (draw_rows).
 * A row's result depends only on its own logits, request and index, never on the worker. */
static void draw_row(void *ctx, int o, int worker) {
    sched *s = ctx;
    const sreq *r = s->out_req[o];
    if (!r || s->topk[o] > 0 || !s->need_logits[o]) return; /* ended, or take_token's */
    const int V = engine_model(s->e)->n_vocab;
    const bf16_t *logits = s->logits + (size_t)o * (size_t)V;
    sampler_params sp = params_of(r);
    s->draw_tok[o] = sampler_pick(&sp, logits, V, r->ans.n_out, s->draw_work[worker]);
    proto_logprob *lp = &s->draw_lp[o];
    memset(lp, 0, sizeof *lp);
    if (r->req.logprobs > 0) {
        lp->n = r->req.logprobs;
        sampler_logprobs(logits, V, lp->n, s->draw_tok[o], lp->ids, lp->lps, &lp->chosen,
                         s->draw_work[worker]);
    }
}

/* One generated token of r, handed to its answer. Out row o's token is the engine's argmax
 * (greedy), a draw from its candidates (s->topk[o] > 0) or from its logits (made by draw_row).
 * Returns 1 when r ended. */
static int take_token(sched *s, sreq *r, int o) {
    sampler_params sp = params_of(r);
    int32_t tok;
    proto_logprob lp = {0};
    if (s->topk[o] > 0) {
        tok = sampler_pick_candidates(&sp, s->topk_ids + (size_t)o * K_TOPK_MAX,
                                      s->topk_vals + (size_t)o * K_TOPK_MAX, s->topk[o],
                                      r->ans.n_out, s->work);
    } else if (!s->need_logits[o]) {
        tok = s->argmax[o];
    } else {
        tok = s->draw_tok[o];
        lp = s->draw_lp[o];
    }
    double now = sched_now_ms();
    if (r->t_first == 0) r->t_first = now;
    r->t_last = now;
    if (answer_is_stop_token(&r->ans, tok)) {
        finish(s, r, ANSWER_STOP);
        return 1;
    }
    r->ids[r->n_ids++] = tok;
    s->tokens_out++;
    enum answer_end end = answer_token(&r->ans, tok, &lp);
    if (end == ANSWER_MORE) return 0;
    if (end == ANSWER_FAILED) /* its error line is written: only the pages remain */
        release(s, r);
    else
        finish(s, r, end);
    return 1;
}

/* Starts queued requests in order while a slot is free and both KV families can hold the
 * head's worst case beside every running request's: the head waits, the rest wait behind it. */
static void admit(sched *s) {
    while (s->q_head && s->n_running < s->cfg.serve.max_batch) {
        sreq *r = s->q_head;
        int n = r->n_prompt + r->req.max_tokens;
        if (n > s->cfg.serve.max_context) n = s->cfg.serve.max_context;
        const int chunk = s->cfg.serve.prefill_chunk;
        const int w[2] = {kv_pool_pages_worst(s->pool, KV_LOCAL, n, chunk),
                          kv_pool_pages_worst(s->pool, KV_GLOBAL, n, chunk)};
        if (s->committed[KV_LOCAL] + w[KV_LOCAL] > kv_pool_usable_pages(s->pool, KV_LOCAL) ||
            s->committed[KV_GLOBAL] + w[KV_GLOBAL] > kv_pool_usable_pages(s->pool, KV_GLOBAL))
            return;
        int slot = 0;
        while (s->slot_used[slot])
            slot++;
        s->slot_used[slot] = 1;
        r->slot = slot;
        r->worst[KV_LOCAL] = w[KV_LOCAL];
        r->worst[KV_GLOBAL] = w[KV_GLOBAL];
        s->committed[KV_LOCAL] += w[KV_LOCAL];
        s->committed[KV_GLOBAL] += w[KV_GLOBAL];
        r->t_admit = r->t_progress = sched_now_ms();
        s->q_head = r->next;
        if (!s->q_head) s->q_tail = NULL;
        r->next = NULL;
        s->n_queued--;
        s->running[s->n_running++] = r;
    }
}

/* Adds rows [begin, end) of r to the step; the pages were committed at admission, so the
 * reservation cannot fail, nor r hold more than it was promised, unless the accounting is
 * wrong (then the request fails). */
static int add_rows(sched *s, sreq *r, int begin, int end, int *rows) {
    kv_pool_release_front(s->pool, r->slot, begin);
    if (kv_pool_reserve(s->pool, r->slot, begin, end) != 0) return -1;
    for (int f = 0; f < 2; f++)
        if (kv_pool_seq_pages(s->pool, (enum kv_family)f, r->slot) > r->worst[f]) {
            log_msg(LOG_ERROR, "sched", "slot %d holds %d %s pages, more than the %d admitted",
                    r->slot, kv_pool_seq_pages(s->pool, (enum kv_family)f, r->slot),
                    f == KV_LOCAL ? "local" : "global", r->worst[f]);
            return -1;
        }
    for (int p = begin; p < end; p++) {
        s->ids[*rows] = r->ids[p];
        s->pos[*rows] = p;
        s->seq[*rows] = r->slot;
        s->prompt[*rows] = p < r->n_prompt;
        (*rows)++;
    }
    return 0;
}

/* Progress of a prompt that takes more than one step to prefill, on stderr at info level: every
 * SCHED_PROGRESS_MS while it runs, and once when it is done (the protocol has no line for it;
 * the first token line follows). Timing only: nothing here changes what is answered. */
static void note_prefill(sreq *r, double now) {
    if (r->begin >= r->n_prompt) return; /* a decode row */
    const int done = r->n_written < r->n_prompt ? r->n_written : r->n_prompt;
    const double secs = (now - r->t_admit) / 1e3;
    const double rate = secs > 0 ? done / secs : 0;
    if (done >= r->n_prompt) {
        if (r->begin > 0) /* more than one step */
            log_msg(LOG_INFO, "sched",
                    "request %s: prompt of %d tokens prefilled in %.1f s (%.0f tokens/s)",
                    r->req.id_json, r->n_prompt, secs, rate);
    } else if (now - r->t_progress >= SCHED_PROGRESS_MS) {
        log_msg(LOG_INFO, "sched", "request %s: prompt %d of %d tokens (%.0f%%), %.0f tokens/s",
                r->req.id_json, done, r->n_prompt, 100.0 * done / r->n_prompt, rate);
        r->t_progress = now;
    }
}

int sched_step(sched *s) {
    admit(s);
    if (s->n_running == 0) return 0;
    /* serve.step_tokens: every decode row rides in every step, prompt tokens fill the rest, at
     * most prefill_chunk of them (a row's bits do not depend on how its prompt is sliced). The
     * budget is there to keep decode rows' steps short: while no running request decodes (one
     * prompt alone, or a burst of prompts on an idle server) nobody waits on the step, and the
     * prompts go in whole chunks. */
    int rows = 0, n_out = 0, n_in = 0, budget = s->cfg.serve.prefill_chunk;
    if (s->cfg.serve.step_tokens > 0) {
        int decoding = 0;
        for (int i = 0; i < s->n_running; i++)
            decoding += s->running[i]->n_written >= s->running[i]->n_prompt;
        if (decoding > 0 && s->cfg.serve.step_tokens - decoding < budget)
            budget = s->cfg.serve.step_tokens - decoding;
    }
    for (int i = 0; i < s->n_running; i++) {
        sreq *r = s->running[i];
        int begin = r->n_written, end;
        if (begin < r->n_prompt) {
            end = begin + (r->n_prompt - begin < budget ? r->n_prompt - begin : budget);
            if (end == begin) continue;
            budget -= end - begin;
        } else {
            end = r->n_ids; /* the last sampled token, not yet in the KV */
        }
        if (add_rows(s, r, begin, end, &rows) != 0) {
            /* the pages were committed at admission: only a bug in the accounting gets here */
            log_msg(LOG_ERROR, "sched", "KV reservation failed for a running request");
            fail_request(s, r,
                         "its KV pages could not be reserved (an accounting bug, "
                         "logged); the other requests go on");
            i--;
            continue;
        }
        s->in_step[n_in++] = r;
        r->begin = begin;
        r->n_written = end;
        if (end == r->n_ids) {
            s->out_src[n_out] = rows - 1;
            s->topk[n_out] = candidates_wanted(&r->req, engine_model(s->e)->n_vocab);
            s->need_logits[n_out] =
                (!is_greedy(&r->req) || r->req.logprobs > 0) && s->topk[n_out] == 0;
            s->out_req[n_out++] = r;
        }
    }
    if (s->t_first_step == 0) s->t_first_step = sched_now_ms();
    engine_batch b = {.pool = s->pool,
                      .rows = rows,
                      .ids = s->ids,
                      .pos = s->pos,
                      .seq = s->seq,
                      .out_rows = n_out,
                      .out_src = s->out_src,
                      .prompt = s->prompt,
                      .need_logits = s->need_logits,
                      .argmax = s->argmax,
                      .nonfinite = s->nonfinite,
                      .topk = s->topk,
                      .topk_ids = s->topk_ids,
                      .topk_vals = s->topk_vals};
    int rc = engine_step(s->e, &b, s->logits, NULL, NULL);
    s->steps++;
    s->last_rows = rows;
    if (rc != 0) {
        /* no token of a failed step is sent: each request with rows in it ends with an error
         * naming the cause and gives its pages back; queued requests and prompts this step
         * left out go on */
        char msg[400];
        snprintf(msg, sizeof msg, "the engine step failed (%s); this request's answer ends here",
                 engine_last_error(s->e));
        for (int i = 0; i < n_in; i++)
            fail_request(s, s->in_step[i], msg);
        return -1;
    }
    const double now = sched_now_ms();
    for (int i = 0; i < n_in; i++)
        note_prefill(s->in_step[i], now);
    for (int i = 0; i < n_out; i++) { /* a row whose logits are not finite: its request ends */
        if (!s->nonfinite[i]) continue;
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the model's logits were not finite (NaN or infinity) at position %d: a failed "
                 "computation, so the answer ends here",
                 s->out_req[i]->n_ids - 1);
        fail_request(s, s->out_req[i], msg);
        s->out_req[i] = NULL;
    }
    int host = 0; /* rows drawn from their whole logits row */
    for (int i = 0; i < n_out; i++)
        host += s->out_req[i] && s->topk[i] <= 0 && s->need_logits[i];
    if (host > 0) par_for(n_out, host < s->draw_threads ? host : s->draw_threads, draw_row, s);
    for (int i = 0; i < n_out; i++)
        if (s->out_req[i]) take_token(s, s->out_req[i], i);
    return 1;
}

int sched_cancel(sched *s, const char *id_json) {
    sreq *prev = NULL;
    for (sreq *r = s->q_head; r; prev = r, r = r->next) {
        if (strcmp(r->req.id_json, id_json) != 0) continue;
        if (prev)
            prev->next = r->next;
        else
            s->q_head = r->next;
        if (s->q_tail == r) s->q_tail = prev;
        s->n_queued--;
        finish(s, r, ANSWER_CANCELLED);
        return 0;
    }
    for (int i = 0; i < s->n_running; i++)
        if (strcmp(s->running[i]->req.id_json, id_json) == 0) {
            finish(s, s->running[i], ANSWER_CANCELLED);
            return 0;
        }
    return -1;
}

void sched_cancel_running(sched *s) {
    while (s->n_running)
        finish(s, s->running[0], ANSWER_CANCELLED);
}

void sched_cancel_queued(sched *s) {
    while (s->q_head) {
        sreq *r = s->q_head;
        s->q_head = r->next;
        s->n_queued--;
        finish(s, r, ANSWER_CANCELLED);
    }
    s->q_tail = NULL;
}

/* A family's KV store in MB (every page, the padding page included) and its element width. */
static double family_mb(const kv_pool *p, enum kv_family f) {
    return (double)(kv_pool_usable_pages(p, f) + 1) *
           (double)kv_layout_page_bytes(kv_pool_layout(p, f)) / 1e6;
}

void sched_write_stats(sched *s) {
    double secs = s->t_first_step > 0 ? (sched_now_ms() - s->t_first_step) / 1e3 : 0;
    proto_stats st = {
        .queued = s->n_queued,
        .running = s->n_running,
        .last_step_rows = s->last_rows,
        .steps = s->steps,
        .tokens_out = s->tokens_out,
        .tokens_per_s = secs > 0 ? (double)s->tokens_out / secs : 0.0,
    };
    for (int f = KV_LOCAL; f <= KV_GLOBAL; f++)
        st.kv[f] =
            (proto_kv_family){kv_pool_free_pages(s->pool, f), kv_pool_usable_pages(s->pool, f),
                              family_mb(s->pool, f), kv_pool_layout(s->pool, f)->elem_bytes};
    proto_write_stats(s->out, &st);
}
