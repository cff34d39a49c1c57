/* The byte buffer of bytebuf.h. It owns data and nothing else. The bytes held are always
 * data[off, off + len); a consume that empties the buffer sets off back to 0, and an append
 * that would not fit slides what is held to the front before it grows (doubling, from
 * 4096), so the space already consumed is reused before more is allocated. A failed append
 * keeps the bytes held. bytebuf_free leaves the struct zeroed, ready to use again. */
#include "proxy/bytebuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int bytebuf_append(struct bytebuf *b, const void *src, size_t n)
{
    if (b->off > 0 && b->off + b->len + n > b->cap) {
        memmove(b->data, b->data + b->off, b->len);
        b->off = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return -ENOMEM;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->off + b->len, src, n);
    b->len += n;
    return 0;
}

int bytebuf_reserve(struct bytebuf *b, size_t n)
{
    if (b->cap != 0 || n == 0)
        return 0;
    b->data = malloc(n);
    if (b->data == NULL)
        return -ENOMEM;
    b->cap = n;
    return 0;
}

void bytebuf_consume(struct bytebuf *b, size_t n)
{
    b->off += n;
    b->len -= n;
    if (b->len == 0)
        b->off = 0;
}

void bytebuf_free(struct bytebuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}
