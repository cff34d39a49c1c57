/* text_printf of text.h. The text's data is the caller's: this file grows it (doubling,
 * from 4096) but never frees it. While failed is false, data (once anything was added)
 * holds len bytes and a NUL after them; once failed is set nothing more is appended, so a
 * text is either whole or marked failed, never cut short without a sign. */
#include "proxy/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void text_printf(struct text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->data != NULL && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap <= t->len + (size_t)n)
            cap *= 2;
        char *grown = realloc(t->data, cap);
        if (grown == NULL) {
            t->failed = true;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
}
