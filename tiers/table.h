/* tierctl's text listings: a table whose columns are padded to their widest cell. */
#pragma once
#include <stddef.h>

/* Set ncols and zero the rest before the first row. */
struct table {
    size_t ncols, nrows, cap;
    char **cells;
};

/* Appends a row of t->ncols cells (const char *, NULL printed as "-"); the cells are
 * copied. Returns 0 or -ENOMEM (the row is then kept with what could be copied). */
int table_row(struct table *t, ...);

/* Prints the rows on stdout, then frees them (t can take new rows). */
void table_print_free(struct table *t);

/* Frees the rows without printing them. */
void table_print_free_silent(struct table *t);
