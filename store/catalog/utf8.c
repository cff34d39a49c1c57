/* UTF-8 validity. See utf8.h. */
#include "store/catalog/utf8.h"

/* The length of the valid UTF-8 sequence s[0, n) starts with, or 0 when it starts none.
 * The bounds of each second byte are RFC 3629's table: they exclude overlong forms (E0,
 * F0), surrogates (ED) and code points past U+10FFFF (F4). */
static size_t sequence_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = sequence_len(p + i, n - i);
        if (len == 0)
            return false;
        i += len;
    }
    return true;
}

size_t utf8_repair(char *s, size_t n)
{
    unsigned char *p = (unsigned char *)s;
    size_t replaced = 0;
    for (size_t i = 0; i < n;) {
        size_t len = sequence_len(p + i, n - i);
        if (len == 0) {
            p[i] = '?';
            replaced++;
            len = 1;
        }
        i += len;
    }
    return replaced;
}
