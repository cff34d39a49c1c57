/* The per-request bump allocator of scratch.h. It owns its chunks, newest first; every
 * pointer it hands out lies in one of them and is valid until the next reset. A new chunk
 * is at least twice the size of the newest, so a request takes few chunks whatever it
 * allocates. A reset frees every chunk but the oldest (the first allocated), which the next
 * request reuses; only scratch_free gives that one back. */
#include "proxy/scratch.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/asan_poison.h"

/* The unused part of a chunk is poisoned: reading a request's scratch after its reset, or
 * past what was allocated, is reported under AddressSanitizer. */

/* Enough for a typical request's headers both ways; bigger ones take another chunk. */
#define FIRST_CHUNK_BYTES 2048

struct scratch_chunk {
    struct scratch_chunk *next;
    size_t size;
    alignas(max_align_t) unsigned char data[];
};

void *scratch_alloc(struct scratch *s, size_t n)
{
    const size_t align = alignof(max_align_t);
    if (n > SIZE_MAX / 2)
        return NULL;
    size_t at = (s->used + align - 1) & ~(align - 1);
    if (s->chunks == NULL || at + n > s->chunks->size) {
        size_t size = s->chunks == NULL ? FIRST_CHUNK_BYTES : 2 * s->chunks->size;
        while (size < n)
            size *= 2;
        struct scratch_chunk *c = malloc(sizeof(*c) + size);
        if (c == NULL)
            return NULL;
        c->next = s->chunks;
        c->size = size;
        ASAN_POISON_MEMORY_REGION(c->data, size);
        s->chunks = c;
        at = 0;
    }
    s->used = at + n;
    ASAN_UNPOISON_MEMORY_REGION(s->chunks->data + at, n);
    return s->chunks->data + at;
}

char *scratch_strndup(struct scratch *s, const char *src, size_t n)
{
    char *copy = scratch_alloc(s, n + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, src, n);
    copy[n] = '\0';
    return copy;
}

void scratch_reset(struct scratch *s)
{
    while (s->chunks != NULL && s->chunks->next != NULL) {
        struct scratch_chunk *older = s->chunks->next;
        free(s->chunks);
        s->chunks = older;
    }
    if (s->chunks != NULL)
        ASAN_POISON_MEMORY_REGION(s->chunks->data, s->chunks->size);
    s->used = 0;
}

void scratch_free(struct scratch *s)
{
    scratch_reset(s);
    if (s->chunks != NULL)
        ASAN_UNPOISON_MEMORY_REGION(s->chunks->data, s->chunks->size);
    free(s->chunks);
    s->chunks = NULL;
}
