/* What the catalog's files share: the connection and its helpers. Private to store/'s
 * catalog files (catalog*.c). */
#pragma once
#include <sqlite3.h>

#include "store/catalog/catalog.h"
#include "store/catalog/stmt_cache.h"

struct catalog {
    sqlite3 *db;
    struct stmt_cache cache;
    enum catalog_mode mode;
    sqlite3_stmt *data_version;   /* persistent; prepared on first use */
    int version;                  /* the schema version of the open transaction */
    char errmsg[512];
};

/* Step i brings PRAGMA user_version from i to i + 1 (CATALOG_SCHEMA_VERSION of them). */
extern const char *const catalog_migrations[];

/* Records why the last call failed (catalog_errmsg). Returns 0. */
__attribute__((format(printf, 2, 3)))
int catalog_set_error(struct catalog *cat, const char *fmt, ...);

/* Maps an SQLite failure to a negative errno and records why. */
int catalog_sql_fail(struct catalog *cat, int rc);

/* The time now as the catalog stores it ("YYYY-MM-DDTHH:MM:SSZ", UTC), in SQL. */
#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"

/* Statements with parameters bound per fmt: 'i' int64_t, 'I' an int64_t id (<= 0 binds
 * NULL), 't' const char * (NULL binds NULL), 'h' a CATALOG_HASH_LEN blob. Each returns 0 or
 * a catalog code with why recorded (catalog_errmsg). */
/* Prepares sql, bound; the caller finalizes *pst. */
int catalog_stmt_prepare(struct catalog *cat, sqlite3_stmt **pst, const char *sql, const char *fmt, ...);
/* Runs a statement that returns no rows (kept prepared); *pchanges (if not NULL) gets the
 * rows changed. */
int catalog_stmt_run(struct catalog *cat, int64_t *pchanges, const char *sql, const char *fmt, ...);
/* The first column of the first row as an integer (kept prepared); CATALOG_NOT_FOUND
 * without a row. */
int catalog_query_int(struct catalog *cat, int64_t *pvalue, const char *sql, const char *fmt, ...);
const char *catalog_column_text(sqlite3_stmt *st, int col);

/* A walk over a query's rows on behalf of a caller's callback: fn (one of the
 * catalog_*_fn types, cast back by the row decoder) with its ctx, and a count of the rows
 * seen when pcount is set. */
struct catalog_walk {
    void (*fn)(void);
    void *ctx;
    int *pcount;
};

/* Steps st (from catalog_stmt_prepare) to its end, calling row(cat, st, walk) per row
 * until one returns non-zero, and finalizes st. Returns that, 0, or the step's error. */
int catalog_stmt_walk(struct catalog *cat, sqlite3_stmt *st,
                      int (*row)(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk),
                      const struct catalog_walk *walk);
/* The id SQLite gave the row just inserted; CATALOG_INVALID past CATALOG_ID_MAX. */
int catalog_inserted_id(struct catalog *cat, const char *what, int64_t *pid);
