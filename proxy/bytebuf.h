/* A growable byte buffer, consumed from the front: a request body on its way upstream
 * (forward.c) and an upstream response body on its way to the client. It has no cap of
 * its own: each user checks what it appends against its own bound (max_body_bytes in
 * request.c, RESP_BUFFER_HIGH in forward.c). */
#pragma once
#include <stddef.h>

struct bytebuf {
    char *data;
    size_t len;      /* bytes held, from data[off] */
    size_t off;      /* bytes already consumed from the front */
    size_t cap;      /* allocated */
};

/* Gives an empty buffer (one never appended to) room for n bytes in one allocation of that
 * size; later appends past it grow it as usual. Returns 0, or -ENOMEM. */
int bytebuf_reserve(struct bytebuf *b, size_t n);
/* Appends n bytes. Returns 0, or -ENOMEM. */
int bytebuf_append(struct bytebuf *b, const void *src, size_t n);
void bytebuf_consume(struct bytebuf *b, size_t n);
void bytebuf_free(struct bytebuf *b);
