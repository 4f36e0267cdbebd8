/* grow.h — the one growable array of attnd: room for `need` elements, doubling. */
#ifndef GROW_H
#define GROW_H

#include <stddef.h>

/* Make *array (of *cap elements of elem_size bytes; NULL and 0 at first) hold at least need
 * elements: realloc to max(need, 2 × *cap, min_cap) when it does not. 0, or -1 when out of
 * memory or the size overflows (*array and *cap then unchanged). */
int grow_array(void *array, size_t *cap, size_t need, size_t elem_size, size_t min_cap);

#endif
