/* runtime/model/loader.h - a checkpoint's safetensors files, mapped read-only, looked up by name.
 *
 * Owns: opening a checkpoint directory (one model.safetensors, or shards listed by
 * model.safetensors.index.json), validating every header (offsets inside the file, known
 * dtype, byte count equal to the shape), handing out pointers into the mappings after an
 * exact dtype+shape check, and accounting for tensors that nobody asked for.
 * Does not own: config.json (runtime/model/hfconfig.h), copies to the GPU, dtype conversion.
 *
 * Callers use the short text-decoder name ("layers.3.self_attn.q_proj.weight"); the loader
 * adds whichever prefix the checkpoint uses ("model.language_model." in the published
 * Gemma4ForConditionalGeneration files, "model." in Gemma4ForCausalLM files), so one
 * schedule serves both layouts. Logs use the full checkpoint name, so it can be grepped. */
#ifndef G4_LOADER_H
#define G4_LOADER_H

#include <stdint.h>

typedef struct loader loader;

/* Maps the checkpoint in directory dir: model.safetensors.index.json when present (each
 * shard it names is mapped once), else model.safetensors. Every header is validated.
 * On success stores a new loader in *out (free with loader_close) and returns 0. On any
 * failure logs one error naming the file and the cause, stores NULL, and returns -1. */
int loader_open(const char *dir, loader **out);

/* Returns a pointer to the bytes of the text tensor whose short name is printf(fmt, ...),
 * after checking that its dtype is exactly dtype (safetensors spelling: "BF16", "F32", ...)
 * and its shape is exactly shape[0..ndim-1]. The pointer lives in a read-only mapping owned
 * by ld and stays valid until loader_close. Marks the tensor as used.
 * Returns NULL after logging an error naming the tensor (and the expected and actual dtype
 * and shape) when it is missing or differs. */
const void *loader_get(loader *ld, const char *dtype, int ndim, const int64_t *shape,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Returns 1 when the text tensor with short name printf(fmt, ...) exists, else 0.
 * Does not mark it as used and logs nothing. */
int loader_has(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The tensors never fetched by loader_get, sorted by why (see loader_finish). */
typedef struct loader_unused {
    int vision_audio;             /* names outside the text prefix, except lm_head.weight */
    int kv_shared;                /* k_proj/v_proj/k_norm of layers >= first_shared_layer */
    int tied_lm_head;             /* lm_head.weight (always tied to embed_tokens) */
    int unexpected;               /* anything else: a sign of the wrong checkpoint */
    const char *first_unexpected; /* full name of the first one (owned by ld), or NULL */
} loader_unused;

/* Counts the unused tensors; first_shared_layer = n_layer - n_kv_shared (layers at or
 * beyond it reuse earlier K/V, so their k/v weights are expected to be left alone).
 * Pure query: logs nothing, changes nothing. */
loader_unused loader_count_unused(const loader *ld, int first_shared_layer);

/* Call once every tensor has been fetched. Logs one info line
 * "skipped N tensors (V vision/audio, S unused k/v of KV-shared layers, T tied lm_head)";
 * when other tensors were never fetched, logs an error with their count and the first
 * name, and returns -1. Returns 0 otherwise. The mappings stay valid. */
int loader_finish(loader *ld, int first_shared_layer);

/* Unmaps every file and frees ld; pointers from loader_get become invalid. NULL is fine. */
void loader_close(loader *ld);

#endif
