/* graph/model_desc.c - facts derived from a model's geometry that the generator and the
 * runtime both need, computed in one place: the KV donor of a shared layer and the MLP width
 * of a layer (docs/gemma4-numerics.md 2.7). */
#include "graph/model_desc.h"

int g4_model_kv_donor(const g4_model_desc *m, int l) {
    int first_shared = m->n_layer - m->n_kv_shared;
    if (m->n_kv_shared == 0 || l < first_shared) return l;
    for (int d = first_shared - 1; d >= 0; d--)
        if (m->layer_kind[d] == m->layer_kind[l]) return d;
    return -1; /* no donor of that kind: the loader refuses such a config */
}

int g4_model_d_ff(const g4_model_desc *m, int l) {
    int first_shared = m->n_layer - m->n_kv_shared;
    return m->double_wide && m->n_kv_shared > 0 && l >= first_shared ? 2 * m->d_ff : m->d_ff;
}
