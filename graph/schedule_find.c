/* graph/schedule_find.c - lookup in a backend's table of compiled-in schedules. */
#include "graph/schedule.h"

#include <string.h>

const g4_schedule *g4_schedule_find(const g4_schedule *const *table, int n, const char *name,
                                    const char *variant) {
    for (int i = 0; i < n; i++)
        if (strcmp(table[i]->model->name, name) == 0 && strcmp(table[i]->variant, variant) == 0)
            return table[i];
    return NULL;
}
