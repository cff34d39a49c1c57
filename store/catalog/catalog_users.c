/* The catalog's users and their API keys (as SHA-256 hashes). See catalog.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/catalog/catalog_impl.h"

/* ---- users ---- */

int catalog_user_add(struct catalog *cat, const struct catalog_user *user)
{
    if (catalog_check_user_id(user->id, cat->errmsg, sizeof(cat->errmsg)) ||
        (user->created && catalog_check_time(user->created, cat->errmsg, sizeof(cat->errmsg))))
        return CATALOG_INVALID;
    int64_t v;
    int r = catalog_query_int(cat, &v, "SELECT plan_id FROM users WHERE id = ?", "t", user->id);
    if (r == 0) {
        catalog_set_error(cat, "a user \"%s\" already exists", user->id);
        return CATALOG_EXISTS;
    }
    if (r != CATALOG_NOT_FOUND)
        return r;
    r = catalog_query_int(cat, &v, "SELECT id FROM plans WHERE id = ?", "i", user->plan_id);
    if (r == CATALOG_NOT_FOUND)
        catalog_set_error(cat, "no plan with id %lld", (long long)user->plan_id);
    if (r)
        return r;
    return catalog_stmt_run(cat, NULL,
                    "INSERT INTO users (id, plan_id, created) VALUES (?, ?, coalesce(?, " NOW_SQL "))",
                    "tit", user->id, user->plan_id, user->created);
}

int catalog_user_find(struct catalog *cat, const char *id, int64_t *pplan_id)
{
    int64_t plan_id = 0;
    int r = catalog_query_int(cat, &plan_id, "SELECT plan_id FROM users WHERE id = ?", "t", id);
    if (r == CATALOG_NOT_FOUND)
        catalog_set_error(cat, "no user \"%s\"", id);
    if (r == 0 && pplan_id)
        *pplan_id = plan_id;
    return r;
}

int catalog_user_set_plan(struct catalog *cat, const char *id, int64_t plan_id)
{
    int r = catalog_user_find(cat, id, NULL);
    if (r)
        return r;
    int64_t v;
    r = catalog_query_int(cat, &v, "SELECT id FROM plans WHERE id = ?", "i", plan_id);
    if (r == CATALOG_NOT_FOUND)
        catalog_set_error(cat, "no plan with id %lld", (long long)plan_id);
    if (r)
        return r;
    return catalog_stmt_run(cat, NULL, "UPDATE users SET plan_id = ? WHERE id = ?", "it", plan_id, id);
}

int catalog_user_remove(struct catalog *cat, const char *id, int64_t *prevoked)
{
    int r = catalog_user_find(cat, id, NULL);
    if (r)
        return r;
    r = catalog_stmt_run(cat, prevoked, "UPDATE api_keys SET revoked = " NOW_SQL
                 " WHERE user_id = ? AND revoked IS NULL", "t", id);
    if (r == 0)
        r = catalog_stmt_run(cat, NULL, "DELETE FROM users WHERE id = ?", "t", id);
    return r;
}

#define USER_SELECT "SELECT u.id, u.plan_id, p.name, u.created FROM users u JOIN plans p ON p.id = u.plan_id"

/* A row of USER_SELECT to its callback. */
static int user_row(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk)
{
    (void)cat;
    struct catalog_user user = {
        .id = catalog_column_text(st, 0),
        .plan_id = sqlite3_column_int64(st, 1),
        .plan_name = catalog_column_text(st, 2),
        .created = catalog_column_text(st, 3),
    };
    return ((catalog_user_fn *)walk->fn)(walk->ctx, &user);
}

int catalog_user_get(struct catalog *cat, const char *id, catalog_user_fn *fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int n = 0;
    int r = catalog_stmt_prepare(cat, &st, USER_SELECT " WHERE u.id = ?", "t", id);
    if (r)
        return r;
    r = catalog_stmt_walk(cat, st, user_row, &(struct catalog_walk){(void (*)(void))fn, ctx, &n});
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "no user \"%s\"", id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_user_each(struct catalog *cat, int64_t plan_id, catalog_user_fn *fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int r = plan_id > 0 ? catalog_stmt_prepare(cat, &st, USER_SELECT " WHERE u.plan_id = ? ORDER BY u.id", "i", plan_id)
                        : catalog_stmt_prepare(cat, &st, USER_SELECT " ORDER BY u.id", "");
    if (r)
        return r;
    return catalog_stmt_walk(cat, st, user_row, &(struct catalog_walk){(void (*)(void))fn, ctx, NULL});
}

/* ---- keys ---- */

int catalog_key_add(struct catalog *cat, const struct catalog_key *key, int64_t *pid)
{
    if (catalog_check_user_id(key->user_id, cat->errmsg, sizeof(cat->errmsg)) ||
        catalog_check_label(key->label ? key->label : "", cat->errmsg, sizeof(cat->errmsg)) ||
        (key->created && catalog_check_time(key->created, cat->errmsg, sizeof(cat->errmsg))) ||
        (key->revoked && catalog_check_time(key->revoked, cat->errmsg, sizeof(cat->errmsg))))
        return CATALOG_INVALID;
    int64_t v;
    int r;
    if (!key->revoked) {
        r = catalog_user_find(cat, key->user_id, NULL);
        if (r)
            return r;
    }
    r = catalog_query_int(cat, &v, "SELECT id FROM api_keys WHERE hash = ?", "h", key->hash);
    if (r == 0) {
        catalog_set_error(cat, "that key hash is already in the catalog (key %lld)", (long long)v);
        return CATALOG_EXISTS;
    }
    if (r != CATALOG_NOT_FOUND)
        return r;
    if (key->id > 0) {
        r = catalog_query_int(cat, &v, "SELECT id FROM api_keys WHERE id = ?", "i", key->id);
        if (r == 0) {
            catalog_set_error(cat, "key id %lld is taken", (long long)key->id);
            return CATALOG_EXISTS;
        }
        if (r != CATALOG_NOT_FOUND)
            return r;
    }
    r = catalog_stmt_run(cat, NULL,
                 "INSERT INTO api_keys (id, user_id, hash, label, created, revoked)"
                 " VALUES (?, ?, ?, ?, coalesce(?, " NOW_SQL "), ?)",
                 "Ithttt", key->id, key->user_id, key->hash, key->label ? key->label : "",
                 key->created, key->revoked);
    if (r == 0)
        r = catalog_inserted_id(cat, "key", pid);
    return r;
}

int catalog_key_revoke(struct catalog *cat, int64_t key_id)
{
    sqlite3_stmt *st = NULL;
    int r = catalog_stmt_prepare(cat, &st, "SELECT revoked FROM api_keys WHERE id = ?", "i", key_id);
    if (r)
        return r;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        catalog_set_error(cat, "no key with id %lld", (long long)key_id);
        r = CATALOG_NOT_FOUND;
    } else if (rc != SQLITE_ROW) {
        r = catalog_sql_fail(cat, rc);
    } else if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
        catalog_set_error(cat, "key %lld was already revoked at %s", (long long)key_id, catalog_column_text(st, 0));
        r = CATALOG_ALREADY;
    }
    sqlite3_finalize(st);
    if (r)
        return r;
    return catalog_stmt_run(cat, NULL, "UPDATE api_keys SET revoked = " NOW_SQL " WHERE id = ?", "i", key_id);
}

/* A row of catalog_key_each's query to its callback. */
static int key_row(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk)
{
    struct catalog_key key = {
        .id = sqlite3_column_int64(st, 0),
        .user_id = catalog_column_text(st, 1),
        .label = catalog_column_text(st, 3),
        .created = catalog_column_text(st, 4),
        .revoked = catalog_column_text(st, 5),
    };
    const void *hash = sqlite3_column_blob(st, 2);
    if (!hash || sqlite3_column_bytes(st, 2) != CATALOG_HASH_LEN || !key.user_id) {
        catalog_set_error(cat, "key %lld has a malformed hash", (long long)key.id);
        return -EINVAL;
    }
    memcpy(key.hash, hash, CATALOG_HASH_LEN);
    if (!key.label)
        key.label = "";
    return ((catalog_key_fn *)walk->fn)(walk->ctx, &key);
}

int catalog_key_each(struct catalog *cat, const char *user_id, bool active_only,
                     catalog_key_fn *fn, void *ctx)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT k.id, k.user_id, k.hash, k.label, k.created, k.revoked FROM api_keys k%s"
             " WHERE (?1 IS NULL OR k.user_id = ?1)%s ORDER BY k.id",
             active_only ? " JOIN users u ON u.id = k.user_id" : "",
             active_only ? " AND k.revoked IS NULL" : "");
    sqlite3_stmt *st = NULL;
    int r = catalog_stmt_prepare(cat, &st, sql, "t", user_id);
    if (r)
        return r;
    return catalog_stmt_walk(cat, st, key_row, &(struct catalog_walk){(void (*)(void))fn, ctx, NULL});
}
