/* A change's rows installed on a follower's copy (catalog_install_rows over
 * store/catalog/catalog_changes.h): they make exactly the admin's catalog from the version they
 * start from, and so do the rows in which the admin's file differs from the copy; a copy
 * that is not that version, rows that do not apply and bytes that are not rows all leave
 * the copy as it was. */
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include "helpers.h"

#include <sqlite3.h>

#include "store/catalog/catalog_changes.h"
#include "store/catalog/catalog_image.h"
#include "tiers/catalog_install.h"

struct pair {
    struct tmpdb admin;
    char follower[128];
    unsigned char *rows;                  /* the admin's change (admin_change) */
    size_t len;
    struct catalog_changes_summary sum;   /* of the last install */
    char err[512];
};

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

/* The admin's catalog at fleet version 1 (plans free and gone-soon with a limit, user ann
 * with a key), and the follower's copy of it. */
static int setup(void **state)
{
    struct pair *p = calloc(1, sizeof(*p));
    tmpdb_make(&p->admin);
    snprintf(p->follower, sizeof(p->follower), "%s/follower.db", p->admin.dir);
    struct catalog *cat = tmpdb_begin(&p->admin);
    int64_t free_plan = add_plan(cat, "free");
    add_limit(cat, free_plan, 'r', 10, 60000, NULL, NULL);
    add_limit(cat, add_plan(cat, "gone-soon"), 'r', 5, 1000, NULL, NULL);
    add_user(cat, "ann", free_plan);
    add_key(cat, "ann", "tp_ann");
    assert_int_equal(catalog_fleet_mark_set(cat, 1), 0);
    tmpdb_commit(cat);
    copy_file(p->admin.path, p->follower);
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    struct pair *p = *state;
    catalog_changes_free(p->rows);
    free(p->sum.keys);
    unlink(p->follower);
    char side[160];
    snprintf(side, sizeof(side), "%s-journal", p->follower);
    unlink(side);
    tmpdb_remove(&p->admin);
    free(p);
    return 0;
}

/* One change on the admin's catalog, recorded into p->rows: a user and key added, a plan
 * with its limit removed (a cascade), ann's key revoked. */
static void admin_change(struct pair *p)
{
    struct catalog *cat = tmpdb_begin(&p->admin);
    struct catalog_changes *rec = NULL;
    assert_int_equal(catalog_changes_record(cat, &rec), 0);
    int64_t free_plan = 0, gone = 0;
    assert_int_equal(catalog_plan_find(cat, "free", &free_plan, NULL), 0);
    assert_int_equal(catalog_plan_find(cat, "gone-soon", &gone, NULL), 0);
    add_user(cat, "ben", free_plan);
    add_key(cat, "ben", "tp_ben");
    assert_int_equal(catalog_plan_remove(cat, gone), 0);
    assert_int_equal(catalog_key_revoke(cat, 1), 0);
    assert_int_equal(catalog_commit(cat), 0);
    assert_int_equal(catalog_changes_take(rec, &p->rows, &p->len), 0);
    assert_true(p->len > 0);
    catalog_changes_stop(rec);
    catalog_close(cat);
}

/* Installs rows (len bytes) on the follower's copy as the change from version base. */
static int install(struct pair *p, const unsigned char *rows, size_t len, int64_t base)
{
    struct catalog *cat = NULL;
    free(p->sum.keys);
    memset(&p->sum, 0, sizeof(p->sum));
    assert_int_equal(catalog_open(p->follower, CATALOG_CACHE, &cat, p->err, sizeof(p->err)), 0);
    unsigned char *bufs[1] = {(unsigned char *)rows};
    struct catalog_rows chain = {.bufs = bufs, .lens = &len, .n = 1};
    int r = catalog_install_rows(cat, &chain, base, base + 1, &p->sum, p->err, sizeof(p->err));
    catalog_close(cat);
    return r;
}

static int64_t follower_mark(struct pair *p)
{
    return sql_int64(p->follower, "SELECT version * 10 + changed FROM fleet WHERE id = 1");
}

static void assert_follower_is_the_admins(struct pair *p)
{
    static const char *const same[] = {
        "SELECT count(*) FROM users", "SELECT count(*) FROM plans", "SELECT count(*) FROM limits",
        "SELECT count(*) FROM api_keys WHERE revoked IS NULL", "SELECT max(id) FROM api_keys",
        "SELECT seq FROM sqlite_sequence WHERE name = 'plans'"};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        assert_int_equal(sql_int64(p->follower, same[i]), sql_int64(p->admin.path, same[i]));
    assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM users WHERE id = 'ben'"), 1);
    assert_int_equal(follower_mark(p), 20);   /* version 2, unchanged since */
}

static void test_rows_make_the_admins_catalog(void **state)
{
    struct pair *p = *state;
    admin_change(p);
    assert_int_equal(install(p, p->rows, p->len, 1), 0);
    assert_int_equal(p->sum.rows, 5);   /* user, key, plan, its limit, a revocation */
    assert_false(p->sum.keys_only);
    assert_follower_is_the_admins(p);
}

/* The rows in which the admin's file differs from the follower's copy. */
static void difference(struct pair *p, unsigned char **pbuf, size_t *plen)
{
    struct catalog *cat = NULL;
    assert_int_equal(catalog_open(p->admin.path, CATALOG_READ_ONLY, &cat, p->err, sizeof(p->err)), 0);
    assert_int_equal(catalog_changes_diff(cat, p->follower, pbuf, plen), 0);
    catalog_close(cat);
}

/* What `tierctl publish` sends for a change it did not record makes the same catalog. */
static void test_the_difference_makes_the_admins_catalog(void **state)
{
    struct pair *p = *state;
    unsigned char *rows = NULL;
    size_t len = 1;
    difference(p, &rows, &len);
    assert_int_equal(len, 0);    /* the same catalog */
    catalog_changes_free(rows);
    admin_change(p);
    difference(p, &rows, &len);
    assert_int_equal(install(p, rows, len, 1), 0);
    catalog_changes_free(rows);
    assert_int_equal(p->sum.rows, 5);
    assert_follower_is_the_admins(p);
}

static void test_a_copy_at_another_version_is_left_alone(void **state)
{
    struct pair *p = *state;
    admin_change(p);
    assert_int_equal(install(p, p->rows, p->len, 2), CATALOG_INVALID);
    assert_non_null(strstr(p->err, "holds version 1"));
    sql_exec(p->follower, "INSERT INTO users (id, plan_id, created) VALUES ('local', 1, '2026-01-01T00:00:00Z')");
    assert_int_equal(install(p, p->rows, p->len, 1), CATALOG_INVALID);
    assert_non_null(strstr(p->err, "local change"));
    assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM users"), 2);
    assert_int_equal(follower_mark(p), 11);
}

static void test_rows_that_do_not_apply_change_nothing(void **state)
{
    struct pair *p = *state;
    admin_change(p);
    /* the copy differs from version 1 in the column of the row the change revokes; its mark
     * says it does not (a row's other columns are not in a changeset: the mark vouches) */
    sql_exec(p->follower, "UPDATE api_keys SET revoked = '2026-01-02T00:00:00Z' WHERE id = 1;"
                          "UPDATE fleet SET changed = 0");
    assert_int_equal(install(p, p->rows, p->len, 1), CATALOG_INVALID);
    assert_non_null(strstr(p->err, "api_keys"));
    assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM users"), 1);
    assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM plans"), 2);
    assert_int_equal(follower_mark(p), 10);
    assert_int_equal(sql_int64(p->follower, "PRAGMA foreign_keys"), 0);   /* a new connection's default */
}

static void test_bytes_that_are_not_rows_change_nothing(void **state)
{
    struct pair *p = *state;
    static const unsigned char junk[] = "T\x03\x01\x00users\x00\x12\x00not rows at all";
    assert_int_equal(install(p, junk, sizeof(junk), 1), CATALOG_INVALID);
    assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM users"), 1);
    assert_int_equal(follower_mark(p), 10);
}

static void test_the_cache_keeps_its_journal_mode(void **state)
{
    struct pair *p = *state;
    sql_exec(p->follower, "PRAGMA journal_mode = DELETE");
    admin_change(p);
    assert_int_equal(install(p, p->rows, p->len, 1), 0);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(p->follower, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "delete");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A change of keys alone lists each key as it is after it: what a proxy patches its
 * snapshot with instead of rebuilding it. */
static void test_a_change_of_keys_lists_them(void **state)
{
    struct pair *p = *state;
    struct catalog *cat = tmpdb_begin(&p->admin);
    struct catalog_changes *rec = NULL;
    assert_int_equal(catalog_changes_record(cat, &rec), 0);
    add_key(cat, "ann", "tp_ann_second");
    assert_int_equal(catalog_key_revoke(cat, 1), 0);
    assert_int_equal(catalog_commit(cat), 0);
    assert_int_equal(catalog_changes_take(rec, &p->rows, &p->len), 0);
    catalog_changes_stop(rec);
    catalog_close(cat);
    assert_int_equal(install(p, p->rows, p->len, 1), 0);
    assert_true(p->sum.keys_only);
    assert_int_equal(p->sum.n_keys, 2);
    uint8_t first[CATALOG_HASH_LEN], second[CATALOG_HASH_LEN];
    assert_int_equal(apikey_hash("tp_ann", 6, first), 0);
    assert_int_equal(apikey_hash("tp_ann_second", 13, second), 0);
    for (size_t i = 0; i < p->sum.n_keys; i++) {
        const struct catalog_key_change *k = &p->sum.keys[i];
        assert_string_equal(k->user_id, "ann");
        if (memcmp(k->hash, first, CATALOG_HASH_LEN) == 0)
            assert_false(k->active);
        else if (memcmp(k->hash, second, CATALOG_HASH_LEN) == 0)
            assert_true(k->active);
        else
            fail_msg("key change %zu names neither key", i);
    }
}

/* Rows written by the admin's connection with the session of another program: sql runs
 * with foreign keys off on the tables named (as a tierctl with a bug might write them). */
static void raw_rows(struct pair *p, const char *tables, const char *sql, void **prows, int *plen)
{
    sqlite3 *db;
    sqlite3_session *session;
    assert_int_equal(sqlite3_open(p->admin.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA foreign_keys = OFF", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3session_create(db, "main", &session), SQLITE_OK);
    char list[64];
    snprintf(list, sizeof(list), "%s", tables);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        assert_int_equal(sqlite3session_attach(session, t), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3session_changeset(session, plen, prows), SQLITE_OK);
    sqlite3session_delete(session);
    sqlite3_close(db);
}

/* Keys alone are checked key by key, as an import checks them. */
static void test_bad_keys_are_refused(void **state)
{
    struct pair *p = *state;
    static const char *const bad[] = {
        "INSERT INTO api_keys (user_id, hash, label, created) VALUES ('ann', zeroblob(32), '', 'yesterday')",
        "INSERT INTO api_keys (user_id, hash, label, created) VALUES ('ghost', zeroblob(32), '',"
        " '2026-01-01T00:00:00Z')",
    };
    static const char *const why[] = {"key 2", "ghost"};
    for (size_t i = 0; i < 2; i++) {
        void *rows = NULL;
        int n = 0;
        sql_exec(p->admin.path, "DELETE FROM api_keys WHERE id > 1");
        raw_rows(p, "api_keys", bad[i], &rows, &n);
        assert_int_equal(install(p, rows, (size_t)n, 1), CATALOG_INVALID);
        sqlite3_free(rows);
        if (!strstr(p->err, why[i]))
            fail_msg("case %zu refused for another reason: %s", i, p->err);
        assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM api_keys"), 1);
        assert_int_equal(follower_mark(p), 10);
    }
}

/* Rows that remove a plan its users are still on (written with foreign keys off, as a
 * tierctl with a bug might) are refused, though they apply row for row. */
static void test_rows_that_orphan_a_row_are_refused(void **state)
{
    struct pair *p = *state;
    void *rows = NULL;
    int n = 0;
    raw_rows(p, "plans", "DELETE FROM plans WHERE name = 'free'", &rows, &n);
    assert_int_equal(install(p, rows, (size_t)n, 1), CATALOG_INVALID);
    sqlite3_free(rows);
    assert_non_null(strstr(p->err, "without its"));
    assert_int_equal(sql_int64(p->follower, "SELECT count(*) FROM plans WHERE name = 'free'"), 1);
    assert_int_equal(follower_mark(p), 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rows_make_the_admins_catalog, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_difference_makes_the_admins_catalog, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_copy_at_another_version_is_left_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_that_do_not_apply_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_that_are_not_rows_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_cache_keeps_its_journal_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_change_of_keys_lists_them, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rows_that_orphan_a_row_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_keys_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
