/* Shared by the tiers unit tests: a temporary catalog and shortcuts to fill it. */
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store/catalog/catalog.h"
#include "tiers/apikey.h"

struct tmpdb {
    char dir[64];
    char path[96];
};

static inline void tmpdb_make(struct tmpdb *t)
{
    snprintf(t->dir, sizeof(t->dir), "/tmp/tiers-test.XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof(t->path), "%s/plans.db", t->dir);
}

static inline void tmpdb_remove(struct tmpdb *t)
{
    char p[128];
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s%s", t->path, suffixes[i]);
        unlink(p);
    }
    rmdir(t->dir);
}

/* Opens the catalog for writing (creating it) and begins a write transaction. */
static inline struct catalog *tmpdb_begin(struct tmpdb *t)
{
    char err[256];
    struct catalog *cat = NULL;
    int r = catalog_open(t->path, CATALOG_CREATE, &cat, err, sizeof(err));
    if (r)
        fail_msg("catalog_open: %s", err);
    r = catalog_begin(cat, true);
    if (r)
        fail_msg("catalog_begin: %s", catalog_errmsg(cat));
    return cat;
}

static inline void tmpdb_commit(struct catalog *cat)
{
    int r = catalog_commit(cat);
    if (r)
        fail_msg("catalog_commit: %s", catalog_errmsg(cat));
    catalog_close(cat);
}

static inline int64_t add_plan(struct catalog *cat, const char *name)
{
    struct catalog_plan p = {.name = name};
    int64_t id = 0;
    int r = catalog_plan_add(cat, &p, &id);
    if (r)
        fail_msg("plan_add %s: %s", name, catalog_errmsg(cat));
    return id;
}

/* kind: 'r' rate amount/window_ms, 'c' concurrency amount, 'w' ws-messages. route may be
 * NULL, else "METHOD /prefix". */
static inline int64_t add_limit(struct catalog *cat, int64_t plan_id, char kind, int64_t amount,
                                int64_t window_ms, const char *method, const char *prefix)
{
    struct catalog_limit l = {
        .plan_id = plan_id, .amount = amount, .algorithm = LIMIT_SLIDING_LOG,
        .kind = kind == 'r' ? CATALOG_LIMIT_RATE : kind == 'c' ? CATALOG_LIMIT_CONCURRENCY
                                                               : CATALOG_LIMIT_WS_MESSAGES,
        .window_ms = kind == 'c' ? 0 : window_ms, .route_method = method, .route_prefix = prefix,
    };
    int64_t id = 0;
    int r = catalog_limit_add(cat, &l, &id);
    if (r)
        fail_msg("limit_add: %s", catalog_errmsg(cat));
    return id;
}

static inline void add_user(struct catalog *cat, const char *id, int64_t plan_id)
{
    struct catalog_user u = {.id = id, .plan_id = plan_id};
    int r = catalog_user_add(cat, &u);
    if (r)
        fail_msg("user_add %s: %s", id, catalog_errmsg(cat));
}

/* Stores key text's hash for user; returns the key id. */
static inline int64_t add_key(struct catalog *cat, const char *user, const char *key)
{
    struct catalog_key k = {.user_id = user, .label = ""};
    assert_int_equal(apikey_hash(key, strlen(key), k.hash), 0);
    int64_t id = 0;
    int r = catalog_key_add(cat, &k, &id);
    if (r)
        fail_msg("key_add: %s", catalog_errmsg(cat));
    return id;
}

/* The first column of sql's first row, read by a connection of its own. */
static inline int64_t sql_int64(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Runs sql on a connection of its own, as another program would write the file. */
static inline void sql_exec(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}
