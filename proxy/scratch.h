/* Memory that lives exactly as long as one request: a bump allocator over chunks. A reset
 * keeps the first chunk, so a worker that reuses its requests' scratch allocates nothing
 * per request in the steady state (27 allocator calls fewer per forward, by callgrind:
 * the upstream header list, the upstream's response headers, the target). */
#pragma once
#include <stddef.h>

struct scratch_chunk;

struct scratch {
    struct scratch_chunk *chunks; /* newest first; the last one is kept by a reset */
    size_t used;                  /* bytes taken from the newest chunk */
};

/* n bytes aligned for any type, valid until the next reset; NULL when out of memory. */
void *scratch_alloc(struct scratch *s, size_t n);

/* A NUL-terminated copy of the n bytes at src (which need not be terminated). */
char *scratch_strndup(struct scratch *s, const char *src, size_t n);

/* Frees everything allocated, keeping the first chunk for the next request. */
void scratch_reset(struct scratch *s);

/* Frees everything, the kept chunk too. */
void scratch_free(struct scratch *s);
