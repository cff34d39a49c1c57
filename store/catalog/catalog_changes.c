/* A change's rows as a changeset, and applying them. See catalog_changes.h. */
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include "store/catalog/catalog_changes.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog/catalog_impl.h"

/* The tables the fleet shares: the ones whose writes mark the catalog changed
 * (catalog_schema.c), in the order a changeset lists them, parents first. */
static const char *const shared_tables[] = {"plans", "limits", "users", "api_keys", "costs"};
#define N_SHARED (sizeof(shared_tables) / sizeof(shared_tables[0]))

struct catalog_changes {
    sqlite3_session *session;
};

int catalog_changes_record(struct catalog *cat, struct catalog_changes **pchanges)
{
    struct catalog_changes *ch = calloc(1, sizeof(*ch));
    if (!ch)
        return catalog_set_error(cat, "out of memory"), -ENOMEM;
    int rc = sqlite3session_create(cat->db, "main", &ch->session);
    for (size_t i = 0; rc == SQLITE_OK && i < N_SHARED; i++)
        rc = sqlite3session_attach(ch->session, shared_tables[i]);
    if (rc != SQLITE_OK) {
        catalog_changes_stop(ch);
        return catalog_sql_fail(cat, rc);
    }
    *pchanges = ch;
    return 0;
}

int catalog_changes_take(struct catalog_changes *changes, unsigned char **pbuf, size_t *plen)
{
    int n = 0;
    void *buf = NULL;
    int rc = sqlite3session_changeset(changes->session, &n, &buf);
    if (rc != SQLITE_OK)
        return rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
    *pbuf = buf;
    *plen = (size_t)n;
    return 0;
}

void catalog_changes_free(unsigned char *buf)
{
    sqlite3_free(buf);
}

void catalog_changes_stop(struct catalog_changes *changes)
{
    if (!changes)
        return;
    if (changes->session)
        sqlite3session_delete(changes->session);
    free(changes);
}

/* ---- comparing ---- */

/* The difference, table by table, inside one read transaction so that it is one state. */
static int diff_tables(struct catalog *cat, struct catalog_changes *ch)
{
    int r = catalog_begin(cat, false);
    for (size_t i = 0; r == 0 && i < N_SHARED; i++) {
        char *why = NULL;
        int rc = sqlite3session_diff(ch->session, "fleet_from", shared_tables[i], &why);
        if (rc != SQLITE_OK)
            r = CATALOG_INVALID, catalog_set_error(cat, "%s cannot be compared: %s", shared_tables[i],
                                                   why ? why : sqlite3_errstr(rc));
        sqlite3_free(why);
    }
    if (r == 0)
        r = catalog_commit(cat);
    else
        catalog_rollback(cat);
    return r;
}

int catalog_changes_diff(struct catalog *cat, const char *from_path, unsigned char **pbuf, size_t *plen)
{
    struct catalog_changes *ch = NULL;
    int r = catalog_stmt_run(cat, NULL, "ATTACH ?1 AS fleet_from", "t", from_path);
    if (r)
        return r;
    if ((r = catalog_changes_record(cat, &ch)) == 0 && (r = diff_tables(cat, ch)) == 0)
        r = catalog_changes_take(ch, pbuf, plen);
    catalog_changes_stop(ch);
    int detached = catalog_stmt_run(cat, NULL, "DETACH fleet_from", "");
    if (r == 0 && detached) {
        catalog_changes_free(*pbuf);
        *pbuf = NULL;
    }
    return r ? r : detached;
}

int catalog_foreign_keys(struct catalog *cat, bool on)
{
    int rc = sqlite3_exec(cat->db, on ? "PRAGMA foreign_keys = ON" : "PRAGMA foreign_keys = OFF", NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : catalog_sql_fail(cat, rc);
}

/* ---- applying ---- */

/* The index of a shared table, or -1. */
static int shared_index(const char *table)
{
    for (size_t i = 0; i < N_SHARED; i++)
        if (strcmp(table, shared_tables[i]) == 0)
            return (int)i;
    return -1;
}

static int column_count(struct catalog *cat, const char *table, int *pn)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, "SELECT count(*) FROM pragma_table_info(?1)", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        *pn = sqlite3_column_int(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_OK ? 0 : catalog_sql_fail(cat, rc);
}

/* Reads buf through: every table one of ours, every row of its width. */
static int read_through(struct catalog *cat, const unsigned char *buf, size_t len, struct catalog_changes_summary *sum,
                        unsigned *ptables)
{
    int widths[N_SHARED] = {0};
    sqlite3_changeset_iter *it = NULL;
    int rc = sqlite3changeset_start(&it, (int)len, (void *)buf);
    int r = 0;
    *sum = (struct catalog_changes_summary){.keys_only = true};
    while (r == 0 && rc == SQLITE_OK && (rc = sqlite3changeset_next(it)) == SQLITE_ROW) {
        const char *table = NULL;
        int ncol = 0, op = 0, indirect = 0;
        rc = sqlite3changeset_op(it, &table, &ncol, &op, &indirect);
        int t = rc == SQLITE_OK ? shared_index(table) : -1;
        if (rc != SQLITE_OK)
            break;
        if (t < 0) {
            r = CATALOG_INVALID, catalog_set_error(cat, "the changed rows name a table \"%s\" that is not the"
                                                   " catalog's", table);
        } else if (widths[t] == 0 && (r = column_count(cat, table, &widths[t])) != 0) {
            break;
        } else if (ncol != widths[t]) {
            r = CATALOG_INVALID, catalog_set_error(cat, "a changed row of %s has %d columns; the table has %d",
                                                   table, ncol, widths[t]);
        }
        sum->rows++;
        sum->keys_only = sum->keys_only && strcmp(table, "api_keys") == 0;
        if (t >= 0)
            *ptables |= 1u << t;
    }
    int frc = sqlite3changeset_finalize(it);
    if (r == 0 && ((rc != SQLITE_DONE && rc != SQLITE_OK) || frc != SQLITE_OK))
        r = CATALOG_INVALID, catalog_set_error(cat, "the changed rows cannot be read: %s",
                                               sqlite3_errstr(rc != SQLITE_DONE && rc != SQLITE_OK ? rc : frc));
    return r;
}

struct apply_state {
    int conflict;             /* the first conflict's SQLITE_CHANGESET_* type; 0 none */
    char table[64];
};

static int on_conflict(void *ctx, int type, sqlite3_changeset_iter *it)
{
    struct apply_state *st = ctx;
    const char *table = NULL;
    int ncol = 0, op = 0, indirect = 0;
    if (st->conflict == 0) {
        st->conflict = type;
        if (sqlite3changeset_op(it, &table, &ncol, &op, &indirect) == SQLITE_OK && table)
            snprintf(st->table, sizeof(st->table), "%s", table);
    }
    return SQLITE_CHANGESET_ABORT;
}

static const char *conflict_name(int type)
{
    switch (type) {
    case SQLITE_CHANGESET_DATA: return "a row to change holds other values";
    case SQLITE_CHANGESET_NOTFOUND: return "a row to change is not there";
    case SQLITE_CHANGESET_CONFLICT: return "a row to add is there already";
    case SQLITE_CHANGESET_CONSTRAINT: return "a row breaks a constraint";
    case SQLITE_CHANGESET_FOREIGN_KEY: return "a row names a parent that is not there";
    default: return "a row does not apply";
    }
}

static int orphans_in(struct catalog *cat, const char *table)
{
    char sql[64];
    snprintf(sql, sizeof(sql), "PRAGMA foreign_key_check(%s)", table);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    int r = 0;
    if (rc == SQLITE_ROW)
        r = CATALOG_INVALID, catalog_set_error(cat, "the changed rows leave a row of %s without its %s %lld",
                                               (const char *)sqlite3_column_text(st, 0),
                                               (const char *)sqlite3_column_text(st, 2),
                                               (long long)sqlite3_column_int64(st, 1));
    else if (rc != SQLITE_DONE)
        r = catalog_sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

#define TABLE(name) (1u << shared_index(name))

/* With foreign keys off while the rows went in, a child without its parent is refused
 * here: in every table the rows wrote, and in the tables whose rows name those
 * (catalog_schema.c: limits, users and costs name a plan; limits name a user). */
static int orphans(struct catalog *cat, unsigned tables)
{
    if (tables & TABLE("plans"))
        tables |= TABLE("limits") | TABLE("users") | TABLE("costs");
    if (tables & TABLE("users"))
        tables |= TABLE("limits");
    int r = 0;
    for (size_t t = 0; r == 0 && t < N_SHARED; t++)
        if (tables & (1u << t))
            r = orphans_in(cat, shared_tables[t]);
    return r;
}


/* api_keys: id, user_id, hash, label, created, revoked (catalog_schema.c) */
enum { KEY_ID, KEY_USER, KEY_HASH, KEY_REVOKED = 5 };

/* A key as the file holds it now, by id. */
static int key_now(struct catalog *cat, sqlite3_value *id, struct catalog_key_change *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, "SELECT user_id, hash, revoked IS NULL FROM api_keys WHERE id = ?1", -1,
                                &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_value(st, 1, id);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *hash = sqlite3_column_blob(st, 1);
        if (hash && sqlite3_column_bytes(st, 1) == CATALOG_HASH_LEN)
            memcpy(out->hash, hash, CATALOG_HASH_LEN);
        snprintf(out->user_id, sizeof(out->user_id), "%s", (const char *)sqlite3_column_text(st, 0));
        out->active = sqlite3_column_int(st, 2) != 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_OK ? 0 : catalog_sql_fail(cat, rc);
}

/* A deleted key, from its values before. */
static void key_before(sqlite3_changeset_iter *it, struct catalog_key_change *out)
{
    sqlite3_value *user = NULL, *hash = NULL;
    out->active = false;
    if (sqlite3changeset_old(it, KEY_HASH, &hash) == SQLITE_OK && hash &&
        sqlite3_value_bytes(hash) == CATALOG_HASH_LEN)
        memcpy(out->hash, sqlite3_value_blob(hash), CATALOG_HASH_LEN);
    if (sqlite3changeset_old(it, KEY_USER, &user) == SQLITE_OK && user)
        snprintf(out->user_id, sizeof(out->user_id), "%s", (const char *)sqlite3_value_text(user));
}

/* Lists each key the rows (every one in api_keys, already applied) changed. */
static void list_keys(struct catalog *cat, const unsigned char *buf, size_t len, struct catalog_changes_summary *sum)
{
    sum->keys = calloc(sum->rows ? sum->rows : 1, sizeof(*sum->keys));
    if (!sum->keys)
        return;
    sqlite3_changeset_iter *it = NULL;
    int rc = sqlite3changeset_start(&it, (int)len, (void *)buf), r = 0;
    while (r == 0 && rc == SQLITE_OK && (rc = sqlite3changeset_next(it)) == SQLITE_ROW && sum->n_keys < sum->rows) {
        const char *table = NULL;
        int ncol = 0, op = 0, indirect = 0;
        sqlite3_value *id = NULL;
        struct catalog_key_change *k = &sum->keys[sum->n_keys++];
        sqlite3changeset_op(it, &table, &ncol, &op, &indirect);
        if (op == SQLITE_DELETE) {
            key_before(it, k);
            continue;
        }
        rc = op == SQLITE_INSERT ? sqlite3changeset_new(it, KEY_ID, &id) : sqlite3changeset_old(it, KEY_ID, &id);
        if (rc == SQLITE_OK && !id)
            rc = SQLITE_CORRUPT;
        if (rc == SQLITE_OK)
            r = key_now(cat, id, k);
    }
    if (r == 0 && rc != SQLITE_DONE && rc != SQLITE_OK)
        r = catalog_sql_fail(cat, rc);
    sqlite3changeset_finalize(it);
    if (r) {
        free(sum->keys);
        sum->keys = NULL;
        sum->n_keys = 0;
    }
}

int catalog_changes_apply(struct catalog *cat, const unsigned char *buf, size_t len,
                          struct catalog_changes_summary *sum)
{
    if (len > (size_t)INT32_MAX)
        return catalog_set_error(cat, "the changed rows are too large (%zu bytes)", len), CATALOG_INVALID;
    unsigned tables = 0;
    int r = read_through(cat, buf, len, sum, &tables);
    if (r)
        return r;
    struct apply_state st = {0};
    int rc = sqlite3changeset_apply(cat->db, (int)len, (void *)buf, NULL, on_conflict, &st);
    if (rc == SQLITE_OK && (r = orphans(cat, tables)) == 0 && sum->keys_only && sum->rows <= CATALOG_KEY_CHANGES_MAX)
        list_keys(cat, buf, len, sum);   /* without the list, the proxy rebuilds its snapshot */
    if (rc == SQLITE_OK)
        return r;
    if (st.conflict)
        return catalog_set_error(cat, "the changed rows do not apply: %s in %s", conflict_name(st.conflict),
                                 st.table), CATALOG_INVALID;
    return catalog_sql_fail(cat, rc);
}
