/* grow.c — the growable array (grow.h). */
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int grow_array(void *array, size_t *cap, size_t need, size_t elem_size, size_t min_cap)
{
    void *old, *grown;
    size_t n;

    if (need <= *cap) return 0;
    n = *cap > SIZE_MAX / 2 ? need : *cap * 2;
    if (n < need) n = need;
    if (n < min_cap) n = min_cap;
    if (elem_size && n > SIZE_MAX / elem_size) return -1;
    memcpy(&old, array, sizeof old);
    grown = realloc(old, n * elem_size);
    if (!grown) return -1;
    memcpy(array, &grown, sizeof grown);
    *cap = n;
    return 0;
}
