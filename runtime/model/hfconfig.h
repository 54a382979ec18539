/* runtime/model/hfconfig.h - a checkpoint's config.json as a g4_model_desc, and its match against
 * the compiled-in models.
 *
 * Owns: reading the text-decoder fields of config.json in both layouts (top-level
 * "gemma4_text" as Gemma4ForCausalLM saves it; "gemma4" with the fields under
 * "text_config", as published), both spellings of the full-layer geometry (global_head_dim +
 * num_global_key_value_heads, or transformers 5.17's per_layer_config), the class defaults
 * of docs/gemma4-numerics.md section 1.1 for absent fields, and the field-by-field comparison
 * that names the first config.json field that differs.
 * Does not own: tensors (runtime/model/loader.h), tokenizer files, generation_config.json.
 *
 * The schedule is compiled for one geometry, so a checkpoint is accepted only when every
 * field equals a compiled-in model; the message then says which config.json field to look
 * at instead of failing later with a shape error deep in the loader. */
#ifndef G4_HFCONFIG_H
#define G4_HFCONFIG_H

#include "graph/model_desc.h"

#include <stddef.h>

/* Fills *out from the config.json at path (out->name is set to NULL). Absent or null
 * optional fields take the class defaults; the geometry fields hidden_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size
 * and vocab_size are required, as are num_experts, top_k_experts and moe_intermediate_size
 * when enable_moe_block is true. Returns 0, or -1 after logging an error naming the file and
 * the field (missing, wrong JSON type, out of range, more than G4_MAX_LAYERS layers, or a
 * per-layer override this engine cannot represent); *out is then unspecified. */
int hfconfig_read(const char *path, g4_model_desc *out);

/* Compares ckpt with the compiled-in models (g4_models[0..g4_n_models-1]). With wanted_name
 * non-NULL only the model of that name is considered; otherwise the first model equal in
 * every field is returned. Ints compare exactly, floats to a relative 1e-6; ckpt->name is
 * ignored. Returns the matching table entry (static storage), or NULL after writing into
 * why[0..whylen-1] "config.json field <field> is <value> but model <name> has <value>" for
 * the first differing field of wanted_name's model or, without a name, of the closest model
 * (fewest differing fields). why may be NULL when whylen is 0. Logs nothing. */
const g4_model_desc *hfconfig_match(const g4_model_desc *ckpt, const char *wanted_name, char *why,
                                    size_t whylen);

#endif
