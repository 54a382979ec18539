/* tests/fuzz/fuzz_files.h - for the fuzz targets whose parser reads a file by path: one private
 * directory per process and a helper that writes the input there.
 *
 * Owns: the directory (made once, under TMPDIR or /tmp) and rewriting a named file in it. Does
 * not own: what is parsed (each tests/fuzz/fuzz_<parser>.c). */
#ifndef G4_FUZZ_FILES_H
#define G4_FUZZ_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The process's directory, or NULL when it cannot be made. */
static const char *fuzz_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/g4pipe_fuzz_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            dir[0] = '\0';
            return NULL;
        }
    }
    return dir;
}

/* Writes n bytes to <fuzz_dir>/<name>, its path into path. Returns 0, or -1. */
static int fuzz_write(const char *name, const uint8_t *data, size_t n, char *path, size_t cap) {
    const char *dir = fuzz_dir();
    if (!dir) return -1;
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

#endif
