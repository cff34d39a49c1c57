/* A text grown by printf-style appends, for the admin listener's answers (/health,
 * /metrics). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* Start from {0}; data is NUL-terminated once anything was added, and is the caller's to
 * free. failed: memory ran out (the text is then incomplete; data may still need freeing). */
struct text {
    char *data;
    size_t len, cap;
    bool failed;
};

void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
