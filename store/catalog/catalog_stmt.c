/* The catalog's errors and statements, shared by its files (catalog_impl.h).
 *
 * Every statement is prepared with bound parameters (catalog_stmt_prepare's format string
 * says what to bind). Those that return no row or one number (catalog_stmt_run,
 * catalog_query_int) are kept prepared in the connection's statement cache and reset after
 * each run; the rest, and the persistent data_version statement, are finalized by their
 * user and catalog_close. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/catalog/catalog_impl.h"

int catalog_set_error(struct catalog *cat, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cat->errmsg, sizeof(cat->errmsg), fmt, ap);
    va_end(ap);
    return 0;
}

int catalog_sql_fail(struct catalog *cat, int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        catalog_set_error(cat, "the catalog is locked by another process (%s)", sqlite3_errmsg(cat->db));
        return -EBUSY;
    case SQLITE_NOMEM:
        catalog_set_error(cat, "out of memory");
        return -ENOMEM;
    case SQLITE_READONLY:
        catalog_set_error(cat, "the catalog is read-only: %s", sqlite3_errmsg(cat->db));
        return -EROFS;
    case SQLITE_NOTADB:
        catalog_set_error(cat, "%s is not a SQLite database", sqlite3_db_filename(cat->db, "main"));
        return -EIO;
    default:
        catalog_set_error(cat, "catalog error: %s", sqlite3_errmsg(cat->db));
        return -EIO;
    }
}

/* Binds per fmt: 'i' int64_t, 'I' an int64_t id (<= 0 binds NULL), 't' const char * (NULL binds NULL), 'h' a CATALOG_HASH_LEN
 * blob (const uint8_t *). */
static int bind_va(sqlite3_stmt *st, const char *fmt, va_list ap)
{
    int rc = SQLITE_OK;
    for (int i = 0; fmt[i] && rc == SQLITE_OK; i++) {
        int col = i + 1;
        switch (fmt[i]) {
        case 'i':
            rc = sqlite3_bind_int64(st, col, va_arg(ap, int64_t));
            break;
        case 'I': { /* an id: <= 0 binds NULL, so that SQLite allocates one */
            int64_t v = va_arg(ap, int64_t);
            rc = v > 0 ? sqlite3_bind_int64(st, col, v) : sqlite3_bind_null(st, col);
            break;
        }
        case 't': {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(st, col, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, col);
            break;
        }
        case 'h':
            rc = sqlite3_bind_blob(st, col, va_arg(ap, const uint8_t *), CATALOG_HASH_LEN,
                                   SQLITE_TRANSIENT);
            break;
        default:
            rc = SQLITE_MISUSE;
        }
    }
    return rc;
}

int catalog_stmt_prepare(struct catalog *cat, sqlite3_stmt **pst, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        va_list ap;
        va_start(ap, fmt);
        rc = bind_va(st, fmt, ap);
        va_end(ap);
    }
    if (rc != SQLITE_OK) {
        int r = catalog_sql_fail(cat, rc);
        sqlite3_finalize(st);
        return r;
    }
    *pst = st;
    return 0;
}

/* sql from the statement cache (or prepared into it), with fmt's values bound; the caller
 * gives it back with stmt_cache_done whatever this returns. */
static int cached_bound(struct catalog *cat, const char *sql, const char *fmt, va_list ap, sqlite3_stmt **pst)
{
    int rc = stmt_cache_prepare(&cat->cache, cat->db, sql, pst);
    return rc == SQLITE_OK ? bind_va(*pst, fmt, ap) : rc;
}

static int run_bound(struct catalog *cat, int64_t *pchanges, sqlite3_stmt *st, int rc)
{
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            ;
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    int r = rc == SQLITE_OK ? 0 : catalog_sql_fail(cat, rc);
    if (r == 0 && pchanges)
        *pchanges = sqlite3_changes64(cat->db);
    stmt_cache_done(st);
    return r;
}

/* Runs a statement that returns no rows. *pchanges (if not NULL) gets the rows changed. */
int catalog_stmt_run(struct catalog *cat, int64_t *pchanges, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    va_start(ap, fmt);
    int rc = cached_bound(cat, sql, fmt, ap, &st);
    va_end(ap);
    return run_bound(cat, pchanges, st, rc);
}

static int first_int(struct catalog *cat, int64_t *pvalue, sqlite3_stmt *st, int rc)
{
    int r = 0;
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *pvalue = sqlite3_column_int64(st, 0);
    else if (rc == SQLITE_DONE)
        r = CATALOG_NOT_FOUND;
    else
        r = catalog_sql_fail(cat, rc);
    stmt_cache_done(st);
    return r;
}

/* Runs a query for one integer (first column of the first row). Returns 0 with *pvalue
 * set, CATALOG_NOT_FOUND when there is no row, or a negative errno. */
int catalog_query_int(struct catalog *cat, int64_t *pvalue, const char *sql, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sqlite3_stmt *st = NULL;
    int rc = cached_bound(cat, sql, fmt, ap, &st);
    va_end(ap);
    return first_int(cat, pvalue, st, rc);
}

const char *catalog_column_text(sqlite3_stmt *st, int col)
{
    return (const char *)sqlite3_column_text(st, col);
}

/* Takes the id SQLite gave the row just inserted. An id beyond CATALOG_ID_MAX is refused
 * (the caller rolls back), so a catalog whose high-water mark reached it takes no more. */
int catalog_inserted_id(struct catalog *cat, const char *what, int64_t *pid)
{
    int64_t id = sqlite3_last_insert_rowid(cat->db);
    if (id > CATALOG_ID_MAX) {
        catalog_set_error(cat, "the catalog has used every %s id up to 2^53 (%lld): no %s can be added",
                what, (long long)CATALOG_ID_MAX, what);
        return CATALOG_INVALID;
    }
    if (pid)
        *pid = id;
    return 0;
}

int catalog_stmt_walk(struct catalog *cat, sqlite3_stmt *st,
                      int (*row)(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk),
                      const struct catalog_walk *walk)
{
    int r = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && (r = row(cat, st, walk)) == 0)
        if (walk->pcount)
            (*walk->pcount)++;
    if (r == 0 && rc != SQLITE_DONE)
        r = catalog_sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}
