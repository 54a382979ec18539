/* runtime/model/loader.c - see loader.h.
 *
 * Owns: the mappings of the safetensors files, the parsed tensor table, and the bookkeeping
 * of which tensors were fetched. Does not own: config.json, device copies, conversions.
 *
 * Why it is shaped this way: files are mapped (never read) so a 50 GB checkpoint costs no
 * heap, and the kernel's page cache is shared between runs. Headers are distrusted: every
 * offset is checked against the file size and every byte count against dtype x shape, so a
 * truncated download fails here with the file name instead of faulting in a kernel later.
 * The tensor table is sorted by full name once, so each lookup is a bsearch. */
#include "runtime/model/loader.h"

#include "runtime/base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOADER_MAX_DIMS 8
#define LOADER_NAME_MAX 512
#define LOADER_PATH_MAX 4096
/* The safetensors format caps the JSON header at 100 MB; a bigger length is corruption. */
#define LOADER_MAX_HEADER ((uint64_t)100 * 1024 * 1024)

static const char LOADER_PREFIX_VLM[] = "model.language_model.";
static const char LOADER_PREFIX_LM[] = "model.";

typedef struct loader_file {
    char *path;         /* owned; for messages */
    const uint8_t *map; /* [size] read-only mapping */
    void *mapping;      /* the same address, as munmap wants it */
    size_t size;
} loader_file;

typedef struct loader_tensor {
    char *name;        /* full checkpoint name, owned */
    const char *dtype; /* points into loader_dtypes */
    int ndim;
    int64_t shape[LOADER_MAX_DIMS]; /* outermost first */
    const void *data;               /* [nbytes] inside files[file].map */
    size_t offset;                  /* of data from the start of the file */
    size_t nbytes;
    int file;
    int used;
} loader_tensor;

struct loader {
    loader_file *files;
    int n_files;
    loader_tensor *tensors; /* sorted by name once loading ends */
    int n_tensors;
    int cap_tensors;
    const char *prefix; /* LOADER_PREFIX_VLM or LOADER_PREFIX_LM */
};

static const struct {
    const char *name;
    size_t size;
} loader_dtypes[] = {
    {"BF16", 2},    {"F16", 2}, {"F32", 4}, {"F64", 8}, {"F8_E4M3", 1},
    {"F8_E5M2", 1}, {"I8", 1},  {"I16", 2}, {"I32", 4}, {"I64", 8},
    {"U8", 1},      {"U16", 2}, {"U32", 4}, {"U64", 8}, {"BOOL", 1},
};

/* Returns the table's copy of the dtype name (so tensors need not own it) or NULL. */
static const char *loader_dtype_lookup(const char *name, size_t *size) {
    for (size_t i = 0; i < sizeof loader_dtypes / sizeof loader_dtypes[0]; i++) {
        if (strcmp(name, loader_dtypes[i].name) == 0) {
            *size = loader_dtypes[i].size;
            return loader_dtypes[i].name;
        }
    }
    return NULL;
}

static char *loader_join(const char *dir, const char *file) {
    char buf[LOADER_PATH_MAX];
    int n = snprintf(buf, sizeof buf, "%s/%s", dir, file);
    if (n < 0 || (size_t)n >= sizeof buf) return NULL;
    return strdup(buf);
}

/* Maps path into a new entry of ld->files; returns its index or -1 after logging. */
static int loader_map_file(loader *ld, char *path) {
    if (!path) {
        log_msg(LOG_ERROR, "loader", "checkpoint path too long");
        return -1;
    }
    loader_file *grown = realloc(ld->files, (size_t)(ld->n_files + 1) * sizeof *grown);
    if (!grown) {
        free(path);
        log_msg(LOG_ERROR, "loader", "out of memory");
        return -1;
    }
    ld->files = grown;
    loader_file *f = &ld->files[ld->n_files];
    *f = (loader_file){.path = path};
    ld->n_files++; /* counted now so loader_close frees path on every path below */
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        log_msg(LOG_ERROR, "loader", "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 8) {
        log_msg(LOG_ERROR, "loader", "%s: too short for a safetensors header", path);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        log_msg(LOG_ERROR, "loader", "%s: mmap failed: %s", path, strerror(errno));
        return -1;
    }
    f->map = map;
    f->mapping = map;
    f->size = (size_t)st.st_size;
    return ld->n_files - 1;
}

static loader_tensor *loader_push(loader *ld) {
    if (ld->n_tensors == ld->cap_tensors) {
        int cap = ld->cap_tensors ? 2 * ld->cap_tensors : 256;
        loader_tensor *grown = realloc(ld->tensors, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        ld->tensors = grown;
        ld->cap_tensors = cap;
    }
    loader_tensor *t = &ld->tensors[ld->n_tensors++];
    memset(t, 0, sizeof *t);
    return t;
}

/* Reads shape and data_offsets of one header entry; checks that the byte range lies inside
 * the data section and holds exactly prod(shape) elements. Returns 0 or -1 after logging. */
static int loader_parse_extent(loader_tensor *t, json_t *v, size_t esize, size_t data_size,
                               const char *path) {
    json_t *shape = json_object_get(v, "shape");
    json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_array(shape) || json_array_size(shape) > LOADER_MAX_DIMS || !json_is_array(offs) ||
        json_array_size(offs) != 2) {
        log_msg(LOG_ERROR, "loader", "%s: tensor %s: bad shape or data_offsets", path, t->name);
        return -1;
    }
    t->ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            log_msg(LOG_ERROR, "loader", "%s: tensor %s: bad shape", path, t->name);
            return -1;
        }
        t->shape[i] = (int64_t)json_integer_value(d);
        /* Dimensions above 2^40 cannot fit any file; the cap keeps the product from wrapping */
        if ((uint64_t)t->shape[i] > ((uint64_t)1 << 40) ||
            (t->shape[i] && count > UINT64_MAX / (uint64_t)t->shape[i] / esize)) {
            log_msg(LOG_ERROR, "loader", "%s: tensor %s: shape too large", path, t->name);
            return -1;
        }
        count *= (uint64_t)t->shape[i];
    }
    json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) ||
        (uint64_t)json_integer_value(e) > (uint64_t)data_size) {
        log_msg(LOG_ERROR, "loader",
                "%s: tensor %s: data_offsets outside the file (%zu data bytes)", path, t->name,
                data_size);
        return -1;
    }
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (end - begin != count * esize) {
        log_msg(LOG_ERROR, "loader",
                "%s: tensor %s: %llu bytes in data_offsets but dtype x shape needs %llu", path,
                t->name, (unsigned long long)(end - begin), (unsigned long long)(count * esize));
        return -1;
    }
    t->nbytes = (size_t)(end - begin);
    t->offset = (size_t)begin; /* data is set by the caller, which knows the mapping */
    return 0;
}

/* Adds one header entry (name -> {dtype, shape, data_offsets}) of file fi to the table. */
static int loader_add_entry(loader *ld, int fi, const char *name, json_t *v, const uint8_t *data,
                            size_t data_size) {
    const char *path = ld->files[fi].path;
    json_t *dt = json_object_get(v, "dtype");
    size_t esize = 0;
    const char *dtype =
        json_is_string(dt) ? loader_dtype_lookup(json_string_value(dt), &esize) : NULL;
    if (!json_is_object(v) || !dtype) {
        log_msg(LOG_ERROR, "loader", "%s: tensor %s: unknown dtype %s", path, name,
                json_is_string(dt) ? json_string_value(dt) : "(none)");
        return -1;
    }
    loader_tensor *t = loader_push(ld);
    char *copy = strdup(name);
    if (!t || !copy) {
        free(copy);
        if (t) ld->n_tensors--;
        log_msg(LOG_ERROR, "loader", "out of memory");
        return -1;
    }
    t->name = copy;
    t->dtype = dtype;
    t->file = fi;
    if (loader_parse_extent(t, v, esize, data_size, path) != 0) return -1;
    t->data = data + t->offset;
    return 0;
}

/* Parses the header of mapped file fi and adds every tensor in it. */
static int loader_parse_file(loader *ld, int fi) {
    const loader_file *f = &ld->files[fi];
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | f->map[i]; /* little-endian u64 */
    if (hlen > LOADER_MAX_HEADER || hlen > f->size - 8) {
        log_msg(LOG_ERROR, "loader", "%s: header length %llu exceeds the file (%zu bytes)", f->path,
                (unsigned long long)hlen, f->size);
        return -1;
    }
    json_error_t err;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(root)) {
        log_msg(LOG_ERROR, "loader", "%s: bad JSON header: %s", f->path,
                root ? "not an object" : err.text);
        json_decref(root);
        return -1;
    }
    const uint8_t *data = f->map + 8 + hlen;
    size_t data_size = f->size - 8 - (size_t)hlen;
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue; /* free-form strings, not a tensor */
        if (loader_add_entry(ld, fi, key, v, data, data_size) != 0) {
            rc = -1;
            break;
        }
    }
    json_decref(root);
    return rc;
}

static int loader_cmp_tensor(const void *a, const void *b) {
    return strcmp(((const loader_tensor *)a)->name, ((const loader_tensor *)b)->name);
}

/* bsearch key: a bare name against the table's entries */
static int loader_cmp_name(const void *key, const void *b) {
    return strcmp((const char *)key, ((const loader_tensor *)b)->name);
}

static loader_tensor *loader_find_full(const loader *ld, const char *full) {
    if (ld->n_tensors == 0 || !ld->tensors) return NULL;
    return bsearch(full, ld->tensors, (size_t)ld->n_tensors, sizeof *ld->tensors, loader_cmp_name);
}

/* Sorts the table, refuses a name present twice (two shards), and picks the text prefix. */
static int loader_index(loader *ld) {
    if (ld->n_tensors == 0 || !ld->tensors) {
        log_msg(LOG_ERROR, "loader", "the checkpoint holds no tensors");
        return -1;
    }
    qsort(ld->tensors, (size_t)ld->n_tensors, sizeof *ld->tensors, loader_cmp_tensor);
    ld->prefix = LOADER_PREFIX_LM;
    for (int i = 0; i < ld->n_tensors; i++) {
        const loader_tensor *t = &ld->tensors[i];
        if (i > 0 && strcmp(t->name, ld->tensors[i - 1].name) == 0) {
            log_msg(LOG_ERROR, "loader", "tensor %s appears in both %s and %s", t->name,
                    ld->files[ld->tensors[i - 1].file].path, ld->files[t->file].path);
            return -1;
        }
        if (strncmp(t->name, LOADER_PREFIX_VLM, sizeof LOADER_PREFIX_VLM - 1) == 0)
            ld->prefix = LOADER_PREFIX_VLM;
    }
    return 0;
}

/* Opens every shard named in the index once, then checks that each weight_map entry sits in
 * the shard the index names (a stale index otherwise silently points at other bytes). */
static int loader_open_sharded(loader *ld, const char *dir, const char *index_path) {
    json_error_t err;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &err);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        log_msg(LOG_ERROR, "loader", "%s: %s", index_path,
                root ? "no weight_map object" : err.text);
        json_decref(root);
        return -1;
    }
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(map, name, v) {
        const char *file = json_string_value(v);
        if (!file || strchr(file, '/') || strcmp(file, "..") == 0) {
            log_msg(LOG_ERROR, "loader", "%s: weight_map[%s]: not a file name", index_path, name);
            rc = -1;
            break;
        }
        int seen = 0;
        for (int i = 0; i < ld->n_files && !seen; i++) {
            const char *base = strrchr(ld->files[i].path, '/');
            seen = strcmp(base ? base + 1 : ld->files[i].path, file) == 0;
        }
        if (seen) continue;
        int fi = loader_map_file(ld, loader_join(dir, file));
        if (fi < 0 || loader_parse_file(ld, fi) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) rc = loader_index(ld);
    if (rc == 0) {
        json_object_foreach(map, name, v) {
            const loader_tensor *t = loader_find_full(ld, name);
            const char *base = t ? strrchr(ld->files[t->file].path, '/') + 1 : NULL;
            if (!t || strcmp(base, json_string_value(v)) != 0) {
                log_msg(LOG_ERROR, "loader", "%s: tensor %s is not in %s", index_path, name,
                        json_string_value(v));
                rc = -1;
                break;
            }
        }
    }
    json_decref(root);
    return rc;
}

int loader_open(const char *dir, loader **out) {
    *out = NULL;
    loader *ld = calloc(1, sizeof *ld);
    char *index_path = loader_join(dir, "model.safetensors.index.json");
    if (!ld || !index_path) {
        free(ld);
        free(index_path);
        log_msg(LOG_ERROR, "loader", "%s: out of memory or path too long", dir);
        return -1;
    }
    int rc;
    if (access(index_path, F_OK) == 0) {
        rc = loader_open_sharded(ld, dir, index_path);
    } else {
        int fi = loader_map_file(ld, loader_join(dir, "model.safetensors"));
        rc = fi < 0 ? -1 : loader_parse_file(ld, fi);
        if (rc == 0) rc = loader_index(ld);
    }
    free(index_path);
    if (rc != 0) {
        loader_close(ld);
        return -1;
    }
    log_msg(LOG_INFO, "loader", "%s: %d tensors in %d file(s), text prefix %s", dir, ld->n_tensors,
            ld->n_files, ld->prefix);
    *out = ld;
    return 0;
}

/* Formats the short name and finds the tensor; full receives the checkpoint name. */
static loader_tensor *loader_vfind(const loader *ld, char *full, size_t fulllen, const char *fmt,
                                   va_list ap) {
    char name[LOADER_NAME_MAX];
    int n = vsnprintf(name, sizeof name, fmt, ap);
    if (n < 0 || (size_t)n >= sizeof name) {
        snprintf(full, fulllen, "(name too long)");
        return NULL;
    }
    n = snprintf(full, fulllen, "%s%s", ld->prefix, name);
    if (n < 0 || (size_t)n >= fulllen) return NULL;
    return loader_find_full(ld, full);
}

static void loader_fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
        if (n < 0) return;
        used += (size_t)n;
    }
}

const void *loader_get(loader *ld, const char *dtype, int ndim, const int64_t *shape,
                       const char *fmt, ...) {
    char full[LOADER_NAME_MAX + 32];
    va_list ap;
    va_start(ap, fmt);
    loader_tensor *t = loader_vfind(ld, full, sizeof full, fmt, ap);
    va_end(ap);
    char want[256];
    loader_fmt_shape(want, sizeof want, ndim, shape);
    if (!t) {
        log_msg(LOG_ERROR, "loader", "missing tensor %s (expected %s [%s])", full, dtype, want);
        return NULL;
    }
    t->used = 1;
    int same = strcmp(t->dtype, dtype) == 0 && t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char got[256];
        loader_fmt_shape(got, sizeof got, t->ndim, t->shape);
        log_msg(LOG_ERROR, "loader", "tensor %s: expected %s [%s], checkpoint has %s [%s]", full,
                dtype, want, t->dtype, got);
        return NULL;
    }
    return t->data;
}

int loader_has(loader *ld, const char *fmt, ...) {
    char full[LOADER_NAME_MAX + 32];
    va_list ap;
    va_start(ap, fmt);
    const loader_tensor *t = loader_vfind(ld, full, sizeof full, fmt, ap);
    va_end(ap);
    return t != NULL;
}

/* True for layers.<l>.self_attn.{k_proj,v_proj,k_norm}.weight with l >= first_shared:
 * the published E2B/E4B files keep K/V weights that HF ignores for KV-shared layers. */
static int loader_is_shared_kv(const char *rest, int first_shared) {
    if (strncmp(rest, "layers.", 7) != 0) return 0;
    char *end;
    long l = strtol(rest + 7, &end, 10);
    if (end == rest + 7 || l < first_shared) return 0;
    return strcmp(end, ".self_attn.k_proj.weight") == 0 ||
           strcmp(end, ".self_attn.v_proj.weight") == 0 ||
           strcmp(end, ".self_attn.k_norm.weight") == 0;
}

loader_unused loader_count_unused(const loader *ld, int first_shared_layer) {
    loader_unused u = {0};
    size_t plen = strlen(ld->prefix);
    for (int i = 0; i < ld->n_tensors; i++) {
        const loader_tensor *t = &ld->tensors[i];
        if (t->used) continue;
        if (strncmp(t->name, ld->prefix, plen) != 0) {
            if (strcmp(t->name, "lm_head.weight") == 0)
                u.tied_lm_head++;
            else
                u.vision_audio++;
        } else if (loader_is_shared_kv(t->name + plen, first_shared_layer)) {
            u.kv_shared++;
        } else if (u.unexpected++ == 0) {
            u.first_unexpected = t->name;
        }
    }
    return u;
}

int loader_finish(loader *ld, int first_shared_layer) {
    loader_unused u = loader_count_unused(ld, first_shared_layer);
    log_msg(LOG_INFO, "loader",
            "skipped %d tensors (%d vision/audio, %d unused k/v of KV-shared layers, %d tied "
            "lm_head)",
            u.vision_audio + u.kv_shared + u.tied_lm_head, u.vision_audio, u.kv_shared,
            u.tied_lm_head);
    if (u.unexpected == 0) return 0;
    log_msg(LOG_ERROR, "loader", "%d unexpected tensor(s) never used, first %s: wrong checkpoint?",
            u.unexpected, u.first_unexpected);
    return -1;
}

void loader_close(loader *ld) {
    if (!ld) return;
    for (int i = 0; i < ld->n_tensors; i++)
        free(ld->tensors[i].name);
    for (int i = 0; i < ld->n_files; i++) {
        if (ld->files[i].map) munmap(ld->files[i].mapping, ld->files[i].size);
        free(ld->files[i].path);
    }
    free(ld->tensors);
    free(ld->files);
    free(ld);
}
