/* Prepared statements kept for reuse. See stmt_cache.h.
 *
 * Entries are found by their SQL text (sqlite3_sql), so a caller may build the text in a
 * buffer that it reuses. A linear walk over 64 entries costs a fraction of one prepare. */
#include "store/catalog/stmt_cache.h"

#include <string.h>

int stmt_cache_prepare(struct stmt_cache *cache, sqlite3 *db, const char *sql, sqlite3_stmt **pst)
{
    for (unsigned i = 0; i < STMT_CACHE_SIZE; i++) {
        sqlite3_stmt *st = cache->stmts[i];
        if (st && strcmp(sqlite3_sql(st), sql) == 0) {
            sqlite3_reset(st);
            *pst = st;
            return SQLITE_OK;
        }
    }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(st);
        return rc;
    }
    unsigned slot = STMT_CACHE_SIZE;
    for (unsigned i = 0; i < STMT_CACHE_SIZE && slot == STMT_CACHE_SIZE; i++)
        if (!cache->stmts[i])
            slot = i;
    if (slot == STMT_CACHE_SIZE) {
        slot = cache->next_evict;
        cache->next_evict = (cache->next_evict + 1) % STMT_CACHE_SIZE;
        sqlite3_finalize(cache->stmts[slot]);
    }
    cache->stmts[slot] = st;
    *pst = st;
    return SQLITE_OK;
}

void stmt_cache_done(sqlite3_stmt *st)
{
    if (!st)
        return;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

void stmt_cache_clear(struct stmt_cache *cache)
{
    for (unsigned i = 0; i < STMT_CACHE_SIZE; i++) {
        sqlite3_finalize(cache->stmts[i]);
        cache->stmts[i] = NULL;
    }
    cache->next_evict = 0;
}
