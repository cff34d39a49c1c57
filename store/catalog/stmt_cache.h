/* Prepared statements kept for reuse on one SQLite connection. Preparing a statement costs
 * more than running a simple one: an import of 100,000 users and 150,000 keys prepared
 * about a million statements, which took most of its time. Private to store/. */
#pragma once
#include <sqlite3.h>

#define STMT_CACHE_SIZE 64

struct stmt_cache {
    sqlite3_stmt *stmts[STMT_CACHE_SIZE];
    unsigned next_evict;
};

/* Sets *pst to a statement for sql on db, reset and ready to bind: the cached one when sql
 * has been prepared before, else a new one kept in the cache (the oldest entry is
 * finalized when it is full). The caller runs it and calls stmt_cache_done before anything
 * else uses the cache. Returns an SQLite result code. */
int stmt_cache_prepare(struct stmt_cache *cache, sqlite3 *db, const char *sql, sqlite3_stmt **pst);

/* Ends a statement's run: resets it, so it holds no read transaction open, and drops its
 * bound values. */
void stmt_cache_done(sqlite3_stmt *st);

/* Finalizes every cached statement (before the connection closes). */
void stmt_cache_clear(struct stmt_cache *cache);
