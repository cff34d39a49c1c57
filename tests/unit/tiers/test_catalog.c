/* The SQLite catalog: schema migration, refusals, and ids that are never reused. */
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <jansson.h>
#include <sqlite3.h>

#include "tiers/catalog_json.h"

static int setup(void **state)
{
    struct tmpdb *t = calloc(1, sizeof(*t));
    tmpdb_make(t);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tmpdb_remove(*state);
    free(*state);
    return 0;
}

static void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    assert_true(fd >= 0);
    close(fd);
}

/* An empty file is migrated to the current schema by a CREATE-mode writer (tierctl init),
 * and only by it. */
static void test_migrate_empty_file(void **state)
{
    struct tmpdb *t = *state;
    char err[256];
    struct catalog *cat = NULL;
    touch(t->path);

    /* Not initialized: readers and plain writers refuse. */
    assert_int_equal(catalog_open(t->path, CATALOG_READ_ONLY, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, false), -ENODATA);
    assert_non_null(strstr(catalog_errmsg(cat), "not initialized"));
    catalog_close(cat);
    assert_int_equal(catalog_open(t->path, CATALOG_READ_WRITE, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, true), -ENODATA);
    catalog_close(cat);

    assert_int_equal(catalog_open(t->path, CATALOG_CREATE, &cat, err, sizeof(err)), 0);
    int version = -1;
    assert_int_equal(catalog_schema_version(cat, &version), 0);
    assert_int_equal(version, 0);
    assert_int_equal(catalog_begin(cat, true), 0);
    assert_int_equal(catalog_schema_version(cat, &version), 0);
    assert_int_equal(version, CATALOG_SCHEMA_VERSION);
    add_plan(cat, "free");
    assert_int_equal(catalog_commit(cat), 0);
    catalog_close(cat);

    assert_int_equal(sql_int64(t->path, "PRAGMA user_version"), CATALOG_SCHEMA_VERSION);
    assert_int_equal(sql_int64(t->path, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN "
                                      "('plans', 'limits', 'users', 'api_keys')"), 4);
    /* WAL, so that tierctl and the proxies do not block each other. */
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(t->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* Read-only now works. */
    assert_int_equal(catalog_open(t->path, CATALOG_READ_ONLY, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, false), 0);
    int64_t id;
    assert_int_equal(catalog_plan_find(cat, "free", &id, NULL), 0);
    catalog_close(cat);
}

/* Schema 1 as 949c306 wrote it: one plan with limits 1 and 7 (7 removed), a user. */
static const char schema_v1[] =
    "CREATE TABLE plans (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,"
    "  shadow INTEGER NOT NULL DEFAULT 0 CHECK (shadow IN (0, 1)));"
    "CREATE TABLE limits (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  plan_id INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,"
    "  kind TEXT NOT NULL CHECK (kind IN ('rate', 'concurrency', 'ws_messages')),"
    "  algorithm TEXT CHECK (algorithm IN ('sliding-log', 'sliding-window', 'token-bucket', 'fixed-window')),"
    "  amount INTEGER NOT NULL CHECK (amount >= 1), window_ms INTEGER NOT NULL DEFAULT 0 CHECK (window_ms >= 0),"
    "  burst INTEGER NOT NULL DEFAULT 0 CHECK (burst >= 0), route_method TEXT, route_prefix TEXT,"
    "  CHECK ((route_method IS NULL) = (route_prefix IS NULL)));"
    "CREATE INDEX limits_plan ON limits(plan_id);"
    "CREATE TABLE users (id TEXT PRIMARY KEY NOT NULL, plan_id INTEGER NOT NULL REFERENCES plans(id),"
    "  created TEXT NOT NULL);"
    "CREATE TABLE api_keys (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL,"
    "  hash BLOB NOT NULL UNIQUE CHECK (length(hash) = 32), label TEXT NOT NULL DEFAULT '',"
    "  created TEXT NOT NULL, revoked TEXT);"
    "INSERT INTO plans (id, name) VALUES (1, 'old');"
    "INSERT INTO limits (id, plan_id, kind, algorithm, amount, window_ms) VALUES (1, 1, 'rate', 'sliding-log', 2, 60000);"
    "INSERT INTO limits (id, plan_id, kind, algorithm, amount, window_ms) VALUES (7, 1, 'rate', 'sliding-log', 9, 1000);"
    "INSERT INTO limits (id, plan_id, kind, amount, route_method, route_prefix) VALUES (3, 1, 'concurrency', 4, 'GET', '/v1');"
    "DELETE FROM limits WHERE id = 7;"
    "INSERT INTO users (id, plan_id, created) VALUES ('olduser', 1, '2026-01-01T00:00:00Z');"
    "PRAGMA user_version = 1;";

static int count_limit(void *ctx, const struct catalog_limit *l)
{
    (void)l;
    (*(int *)ctx)++;
    return 0;
}

static int get_priority(void *ctx, const struct catalog_plan *plan)
{
    *(int *)ctx = plan->priority;
    return 0;
}

/* A schema 1 file is read as it is (priority 5, nothing new) and migrated by the first
 * writer with its rows, routes and id high-water mark kept. */
static void test_schema_1_read_then_migrated(void **state)
{
    struct tmpdb *t = *state;
    char err[256];
    struct catalog *cat = NULL;
    sql_exec(t->path, schema_v1);
    assert_int_equal(catalog_open(t->path, CATALOG_READ_ONLY, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, false), 0);
    int priority = -1, n = 0;
    assert_int_equal(catalog_plan_each(cat, get_priority, &priority), 0);
    assert_int_equal(priority, CATALOG_PRIORITY_DEFAULT);
    assert_int_equal(catalog_limit_each(cat, 0, count_limit, &n), 0);
    assert_int_equal(n, 2);
    n = 0;
    assert_int_equal(catalog_user_limit_each(cat, NULL, count_limit, &n), 0);
    assert_int_equal(n, 0);
    catalog_close(cat);
    assert_int_equal(sql_int64(t->path, "PRAGMA user_version"), 1);   /* a reader changes nothing */

    assert_int_equal(catalog_open(t->path, CATALOG_READ_WRITE, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, true), 0);
    int64_t next = add_limit(cat, 1, 'r', 5, 1000, NULL, NULL);
    assert_true(next > 7);   /* ids are never reused across the rebuild */
    assert_int_equal(catalog_commit(cat), 0);
    catalog_close(cat);
    assert_int_equal(sql_int64(t->path, "PRAGMA user_version"), CATALOG_SCHEMA_VERSION);
    assert_int_equal(sql_int64(t->path, "SELECT count(*) FROM limits WHERE id = 3 AND route_prefix = '/v1'"), 1);
    assert_int_equal(sql_int64(t->path, "SELECT priority FROM plans WHERE id = 1"), 5);
}

static int sum_costs(void *ctx, const struct catalog_cost *cost)
{
    *(int64_t *)ctx += cost->cost;
    return 0;
}

/* Costs: set replaces, remove refuses what is not there, they go with their plan. Users'
 * own limits: in the limits' id sequence, never in catalog_limit_each, gone with the user. */
static void test_costs_and_user_limits(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    int64_t plan = add_plan(cat, "metered");
    struct catalog_cost cost = {.plan_id = plan, .route_method = "POST", .route_prefix = "/batch", .cost = 10};
    int64_t old = -1, sum = 0;
    assert_int_equal(catalog_cost_set(cat, &cost, &old), 0);
    assert_int_equal(old, 0);
    cost.cost = 20;
    assert_int_equal(catalog_cost_set(cat, &cost, &old), 0);
    assert_int_equal(old, 10);
    assert_int_equal(catalog_cost_each(cat, plan, sum_costs, &sum), 0);
    assert_int_equal(sum, 20);
    cost.cost = 0;
    assert_int_equal(catalog_cost_set(cat, &cost, NULL), CATALOG_INVALID);
    assert_int_equal(catalog_cost_remove(cat, plan, "GET", "/batch"), CATALOG_NOT_FOUND);
    assert_int_equal(catalog_plan_set_priority(cat, plan, 10), CATALOG_INVALID);
    assert_int_equal(catalog_plan_set_priority(cat, plan, 0), 0);

    add_user(cat, "alice", plan);
    struct catalog_limit own = {.user_id = "alice", .kind = CATALOG_LIMIT_QUOTA, .amount = 100,
                                .period = LIMIT_PERIOD_WEEK};
    int64_t own_id = 0, plan_limit = add_limit(cat, plan, 'r', 50, 1000, NULL, NULL);
    assert_int_equal(catalog_limit_add(cat, &own, &own_id), 0);
    assert_true(own_id > plan_limit);
    struct catalog_limit nobody = own;
    nobody.user_id = "bob";
    assert_int_equal(catalog_limit_add(cat, &nobody, NULL), CATALOG_NOT_FOUND);
    struct catalog_limit both = own;
    both.plan_id = plan;
    assert_int_equal(catalog_limit_add(cat, &both, NULL), CATALOG_INVALID);
    struct catalog_limit no_period = own;
    no_period.period = LIMIT_PERIOD_NONE;
    assert_int_equal(catalog_limit_add(cat, &no_period, NULL), CATALOG_INVALID);
    int n = 0;
    assert_int_equal(catalog_limit_each(cat, 0, count_limit, &n), 0);
    assert_int_equal(n, 1);
    n = 0;
    assert_int_equal(catalog_user_limit_each(cat, "alice", count_limit, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(catalog_user_limit_remove(cat, "alice", plan_limit), CATALOG_NOT_FOUND);
    int64_t revoked = 0;
    assert_int_equal(catalog_user_remove(cat, "alice", &revoked), 0);
    n = 0;
    assert_int_equal(catalog_user_limit_each(cat, NULL, count_limit, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(catalog_limit_remove(cat, plan, plan_limit), 0);
    assert_int_equal(catalog_plan_remove(cat, plan), 0);
    sum = 0;
    assert_int_equal(catalog_cost_each(cat, 0, sum_costs, &sum), 0);
    assert_int_equal(sum, 0);
    tmpdb_commit(cat);
}

static void test_migration_rolls_back_with_the_command(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    add_plan(cat, "free");
    catalog_rollback(cat);
    catalog_close(cat);
    /* The failed command left no schema behind either. */
    assert_int_equal(sql_int64(t->path, "PRAGMA user_version"), 0);
}

static void test_missing_file(void **state)
{
    struct tmpdb *t = *state;
    char err[256];
    struct catalog *cat = NULL;
    assert_int_equal(catalog_open(t->path, CATALOG_READ_ONLY, &cat, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "tierctl init"));
    assert_int_equal(catalog_open(t->path, CATALOG_READ_WRITE, &cat, err, sizeof(err)), -ENOENT);
    assert_int_equal(access(t->path, F_OK), -1);   /* not created */
}

static void test_newer_schema_refused(void **state)
{
    struct tmpdb *t = *state;
    tmpdb_commit(tmpdb_begin(t));
    sql_exec(t->path, "PRAGMA user_version = 99");
    char err[256];
    struct catalog *cat = NULL;
    assert_int_equal(catalog_open(t->path, CATALOG_CREATE, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, true), -ENOTSUP);
    assert_int_equal(catalog_begin(cat, false), -ENOTSUP);
    catalog_close(cat);
}

static void test_foreign_database_refused(void **state)
{
    struct tmpdb *t = *state;
    sql_exec(t->path, "CREATE TABLE something (x)");
    char err[256];
    struct catalog *cat = NULL;
    assert_int_equal(catalog_open(t->path, CATALOG_CREATE, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, true), -EINVAL);
    catalog_close(cat);
}

static void test_not_a_database(void **state)
{
    struct tmpdb *t = *state;
    FILE *f = fopen(t->path, "w");
    fputs("this is not an SQLite file, but long enough to have a header..........................."
          "................................................................", f);
    fclose(f);
    char err[256];
    struct catalog *cat = NULL;
    assert_int_not_equal(catalog_open(t->path, CATALOG_READ_WRITE, &cat, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "not a SQLite database"));
}

/* Limit ids name limiter state in Redis: a removed id is never handed out again. */
static void test_limit_ids_never_reused(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    int64_t plan = add_plan(cat, "free");
    int64_t a = add_limit(cat, plan, 'r', 10, 1000, NULL, NULL);
    int64_t b = add_limit(cat, plan, 'r', 20, 1000, NULL, NULL);
    assert_int_equal(catalog_limit_remove(cat, plan, b), 0);
    assert_int_equal(catalog_limit_remove(cat, plan, a), 0);
    tmpdb_commit(cat);
    cat = tmpdb_begin(t);
    int64_t c = add_limit(cat, plan, 'r', 30, 1000, NULL, NULL);
    assert_true(c > b);
    /* Even after the catalog is cleared (import), and with the high-water mark raised. */
    assert_int_equal(catalog_clear(cat), 0);
    assert_int_equal(catalog_sequence_raise(cat, "limits", 100), 0);
    plan = add_plan(cat, "free");
    assert_true(add_limit(cat, plan, 'c', 5, 0, NULL, NULL) == 101);
    int64_t seq = 0;
    assert_int_equal(catalog_sequence_get(cat, "limits", &seq), 0);
    assert_int_equal(seq, 101);
    assert_int_equal(catalog_sequence_raise(cat, "limits", 50), 0);   /* never lowered */
    assert_int_equal(catalog_sequence_get(cat, "limits", &seq), 0);
    assert_int_equal(seq, 101);
    tmpdb_commit(cat);
    /* ids end at 2^53 (JSON's exact integers): no mark beyond it, no row past it */
    cat = tmpdb_begin(t);
    assert_int_equal(catalog_sequence_raise(cat, "limits", CATALOG_ID_MAX + 1), CATALOG_INVALID);
    assert_int_equal(catalog_sequence_raise(cat, "limits", CATALOG_ID_MAX), 0);
    struct catalog_limit more = {.plan_id = plan, .kind = CATALOG_LIMIT_CONCURRENCY, .amount = 1};
    int64_t id = 0;
    assert_int_equal(catalog_limit_add(cat, &more, &id), CATALOG_INVALID);
    assert_non_null(strstr(catalog_errmsg(cat), "every limit id up to 2^53"));
    assert_int_equal(id, 0);
    catalog_close(cat);   /* rolls back */
}

/* A limit changed in place keeps its id (the stores' state is named by it); its kind,
 * plan and route are not the update's to change. */
static void test_limit_update_in_place(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    int64_t plan = add_plan(cat, "free"), other = add_plan(cat, "other");
    int64_t rate = add_limit(cat, plan, 'r', 10, 1000, NULL, NULL);
    int64_t conc = add_limit(cat, plan, 'c', 5, 0, NULL, NULL);
    struct catalog_limit l = {.id = rate, .plan_id = plan, .kind = CATALOG_LIMIT_RATE,
                              .algorithm = LIMIT_TOKEN_BUCKET, .amount = 20, .window_ms = 60000, .burst = 3};
    assert_int_equal(catalog_limit_update(cat, &l), 0);
    tmpdb_commit(cat);
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT amount * 1000 + burst FROM limits WHERE id = %lld AND window_ms = 60000"
             " AND algorithm = 'token-bucket'", (long long)rate);
    assert_int_equal(sql_int64(t->path, sql), 20003);
    assert_int_equal(sql_int64(t->path, "SELECT count(*) FROM limits"), 2);

    cat = tmpdb_begin(t);
    /* Another plan's limit, a limit of another kind, one that does not exist: not found. */
    l.plan_id = other;
    assert_int_equal(catalog_limit_update(cat, &l), CATALOG_NOT_FOUND);
    l.plan_id = plan;
    l.id = conc;
    assert_int_equal(catalog_limit_update(cat, &l), CATALOG_NOT_FOUND);
    l.id = 999;
    assert_int_equal(catalog_limit_update(cat, &l), CATALOG_NOT_FOUND);
    /* Out of range: refused. */
    l.id = rate;
    l.amount = 1000000000;
    l.window_ms = 86400000;
    assert_int_equal(catalog_limit_update(cat, &l), CATALOG_INVALID);
    tmpdb_commit(cat);
}

/* A backup is a whole, owner-only copy made within the caller's transaction, and never
 * overwrites a file. */
static void test_backup(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    add_plan(cat, "free");
    tmpdb_commit(cat);
    struct stat sb;
    assert_int_equal(stat(t->path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);

    char copy[160], err[256];
    snprintf(copy, sizeof(copy), "%s/copy.db", t->dir);
    assert_int_equal(catalog_open(t->path, CATALOG_READ_ONLY, &cat, err, sizeof(err)), 0);
    assert_int_equal(catalog_begin(cat, false), 0);
    assert_int_equal(catalog_backup(cat, copy), 0);
    assert_int_equal(catalog_backup(cat, copy), CATALOG_EXISTS);
    assert_non_null(strstr(catalog_errmsg(cat), "exists"));
    catalog_close(cat);
    assert_int_equal(stat(copy, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(sql_int64(copy, "SELECT count(*) FROM plans WHERE name = 'free'"), 1);
    unlink(copy);
}

static void test_refusals(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    int64_t plan = add_plan(cat, "free");
    struct catalog_plan dup = {.name = "free"};
    assert_int_equal(catalog_plan_add(cat, &dup, NULL), CATALOG_EXISTS);
    struct catalog_plan bad = {.name = "no spaces"};
    assert_int_equal(catalog_plan_add(cat, &bad, NULL), CATALOG_INVALID);
    assert_int_equal(catalog_plan_find(cat, "gold", NULL, NULL), CATALOG_NOT_FOUND);
    assert_string_equal(catalog_errmsg(cat), "no plan named \"gold\"");

    add_user(cat, "alice", plan);
    struct catalog_user again = {.id = "alice", .plan_id = plan};
    assert_int_equal(catalog_user_add(cat, &again), CATALOG_EXISTS);
    assert_int_equal(catalog_plan_remove(cat, plan), CATALOG_IN_USE);

    /* A rate over the exact-integer range and a malformed route are refused. */
    struct catalog_limit huge = {.plan_id = plan, .kind = CATALOG_LIMIT_RATE, .amount = 1000000000,
                                 .window_ms = 86400000};
    assert_int_equal(catalog_limit_add(cat, &huge, NULL), CATALOG_INVALID);
    struct catalog_limit route = {.plan_id = plan, .kind = CATALOG_LIMIT_RATE, .amount = 1, .window_ms = 1000,
                                  .route_method = "GET", .route_prefix = "v1"};
    assert_int_equal(catalog_limit_add(cat, &route, NULL), CATALOG_INVALID);
    assert_int_equal(catalog_limit_remove(cat, plan, 12345), CATALOG_NOT_FOUND);

    /* A key for a user who does not exist. */
    struct catalog_key k = {.user_id = "bob", .label = ""};
    assert_int_equal(catalog_key_add(cat, &k, NULL), CATALOG_NOT_FOUND);
    tmpdb_commit(cat);
}

static int count_key(void *ctx, const struct catalog_key *key)
{
    int *n = ctx;
    (*n)++;
    assert_non_null(key->revoked);
    return 0;
}

static void test_user_remove_revokes_keys(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    int64_t plan = add_plan(cat, "free");
    add_user(cat, "alice", plan);
    int64_t k1 = add_key(cat, "alice", "tp_one");
    add_key(cat, "alice", "tp_two");
    assert_int_equal(catalog_key_revoke(cat, k1), 0);
    assert_int_equal(catalog_key_revoke(cat, k1), CATALOG_ALREADY);
    int64_t revoked = 0;
    assert_int_equal(catalog_user_remove(cat, "alice", &revoked), 0);
    assert_int_equal(revoked, 1);   /* the one still active */
    int n = 0;
    assert_int_equal(catalog_key_each(cat, "alice", false, count_key, &n), 0);
    assert_int_equal(n, 2);         /* kept on record, both revoked */
    n = 0;
    assert_int_equal(catalog_key_each(cat, NULL, true, count_key, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(catalog_user_find(cat, "alice", NULL), CATALOG_NOT_FOUND);
    assert_int_equal(catalog_plan_remove(cat, plan), 0);
    tmpdb_commit(cat);
}

static void test_checks(void **state)
{
    (void)state;
    char err[128];
    assert_int_equal(catalog_check_plan_name("pro-2.x_y", err, sizeof(err)), 0);
    assert_int_equal(catalog_check_plan_name("-x", err, sizeof(err)), CATALOG_INVALID);
    assert_int_equal(catalog_check_plan_name("", err, sizeof(err)), CATALOG_INVALID);
    assert_int_equal(catalog_check_user_id("alice@example.com", err, sizeof(err)), 0);
    assert_int_equal(catalog_check_user_id("a b", err, sizeof(err)), CATALOG_INVALID);
    assert_int_equal(catalog_check_route("*", "/v1", err, sizeof(err)), 0);
    assert_int_equal(catalog_check_route("GET", "/v1?x", err, sizeof(err)), CATALOG_INVALID);
    assert_int_equal(catalog_check_route("get", "/v1", err, sizeof(err)), CATALOG_INVALID);
    assert_int_equal(catalog_check_label("ci \xc3\xa9t\xc3\xa9", err, sizeof(err)), 0);
    assert_int_equal(catalog_check_label("a\nb", err, sizeof(err)), CATALOG_INVALID);
    /* a label is UTF-8 text (export and --json write it); the message is, too */
    assert_int_equal(catalog_check_label("lap\xfftop", err, sizeof(err)), CATALOG_INVALID);
    assert_string_equal(err, "a label is UTF-8 text: \"lap?top\" is not");
    assert_int_equal(catalog_check_label("\xed\xa0\x80", err, sizeof(err)), CATALOG_INVALID);
    assert_int_equal(catalog_check_plan_name("caf\xe9", err, sizeof(err)), CATALOG_INVALID);
    assert_string_equal(err, "invalid plan name \"caf?\": use letters, digits, '-', '_', '.'");
    assert_int_equal(catalog_check_time("2024-05-01T12:00:00Z", err, sizeof(err)), 0);
    assert_int_equal(catalog_check_time("2024-05-01 12:00:00", err, sizeof(err)), CATALOG_INVALID);
    /* The refused value is quoted in one line: control characters become '?' (found by
     * tests/fuzz/fuzz_limit: tierctl and import print this message as it is). */
    assert_int_equal(catalog_check_route("\n/", "{ch", err, sizeof(err)), CATALOG_INVALID);
    assert_string_equal(err, "invalid route method \"?/\": upper-case letters, or * for any");
    assert_int_equal(catalog_check_plan_name("a\r\x1b[1m", err, sizeof(err)), CATALOG_INVALID);
    assert_string_equal(err, "invalid plan name \"a??[1m\": use letters, digits, '-', '_', '.'");
    assert_int_equal(catalog_check_time("2024\n", err, sizeof(err)), CATALOG_INVALID);
    assert_null(strchr(err, '\n'));
}

/* A refused import says why in one line, whatever control characters the document's
 * names and values hold (found by tests/fuzz/fuzz_catalog_import), and changes nothing. */
static void test_import_error_is_one_line(void **state)
{
    struct tmpdb *t = *state;
    struct catalog *cat = tmpdb_begin(t);
    add_plan(cat, "free");
    char err[512];
    json_error_t jerr;
    json_t *doc = json_loads("{\"format\": \"tierproxy-catalog\", \"version\": 1, "
                             "\"pla\\n\\u001b[2Jns\": []}", 0, &jerr);
    assert_non_null(doc);
    assert_int_equal(catalog_json_import(cat, doc, err, sizeof(err)), CATALOG_INVALID);
    assert_string_equal(err, "unknown field \"pla??[2Jns\"");
    json_decref(doc);
    doc = json_loads("{\"format\": \"tierproxy-catalog\", \"version\": 1, \"plans\": [], "
                     "\"users\": [{\"id\": \"a\", \"plan\": \"fr\\r\\nee\", "
                     "\"created\": \"2024-05-01T12:00:00Z\"}]}", 0, &jerr);
    assert_non_null(doc);
    assert_int_equal(catalog_json_import(cat, doc, err, sizeof(err)), CATALOG_INVALID);
    assert_string_equal(err, "users[0]: no plan named \"fr??ee\"");
    json_decref(doc);
    assert_int_equal(catalog_plan_find(cat, "free", NULL, NULL), 0);
    tmpdb_commit(cat);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrate_empty_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migration_rolls_back_with_the_command, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schema_1_read_then_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_costs_and_user_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_database_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_ids_never_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_update_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_user_remove_revokes_keys, setup, teardown),
        cmocka_unit_test(test_checks),
        cmocka_unit_test_setup_teardown(test_import_error_is_one_line, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
