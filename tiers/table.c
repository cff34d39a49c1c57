/* tierctl's text tables. See table.h. */
#include "tiers/table.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int table_row(struct table *t, ...)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **cells = realloc(t->cells, cap * t->ncols * sizeof(char *));
        if (!cells)
            return -ENOMEM;
        t->cells = cells;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, t);
    int r = 0;
    for (size_t i = 0; i < t->ncols; i++) {
        const char *s = va_arg(ap, const char *);
        char *copy = strdup(s ? s : "-");
        if (!copy)
            r = -ENOMEM;
        t->cells[t->nrows * t->ncols + i] = copy;
    }
    va_end(ap);
    t->nrows++;
    return r;
}

void table_print_free(struct table *t)
{
    size_t width[8] = {0};
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t i = 0; i < t->ncols && i < 8; i++) {
            const char *s = t->cells[r * t->ncols + i];
            if (s && strlen(s) > width[i])
                width[i] = strlen(s);
        }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t i = 0; i < t->ncols; i++) {
            const char *s = t->cells[r * t->ncols + i];
            if (i + 1 < t->ncols)
                printf("%-*s  ", (int)width[i], s ? s : "?");
            else
                printf("%s\n", s ? s : "?");
        }
    }
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

/* Frees a table without printing it. */
void table_print_free_silent(struct table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}
