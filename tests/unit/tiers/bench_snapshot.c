/* How long snapshot_load takes for a large catalog, and how fast key lookups are.
 * Usage: bench_snapshot [USERS [KEYS]]   (default 100000 each)
 * Builds the catalog with direct SQL in one transaction, then times the load. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/catalog/catalog.h"
#include "tiers/apikey.h"
#include "tiers/snapshot.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_snapshot: %s: %s\n", what, why);
    exit(1);
}

int main(int argc, char **argv)
{
    long n_users = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    long n_keys = argc > 2 ? strtol(argv[2], NULL, 10) : n_users;
    if (n_users < 1 || n_keys < 0)
        die("usage", "bench_snapshot [USERS [KEYS]]");
    char dir[] = "/tmp/bench_snapshot.XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", strerror(errno));
    char path[64];
    snprintf(path, sizeof(path), "%s/plans.db", dir);

    /* Schema and three plans through the catalog. */
    char err[256];
    struct catalog *cat = NULL;
    if (catalog_open(path, CATALOG_CREATE, &cat, err, sizeof(err)))
        die("catalog_open", err);
    if (catalog_begin(cat, true))
        die("begin", catalog_errmsg(cat));
    const char *plans[] = {"free", "starter", "pro"};
    for (int i = 0; i < 3; i++) {
        struct catalog_plan p = {.name = plans[i]};
        int64_t id;
        struct catalog_limit rate = {.kind = CATALOG_LIMIT_RATE, .amount = 100, .window_ms = 60000};
        struct catalog_limit conc = {.kind = CATALOG_LIMIT_CONCURRENCY, .amount = 10};
        if (catalog_plan_add(cat, &p, &id))
            die("plan", catalog_errmsg(cat));
        rate.plan_id = conc.plan_id = id;
        if (catalog_limit_add(cat, &rate, NULL) || catalog_limit_add(cat, &conc, NULL))
            die("limit", catalog_errmsg(cat));
    }
    if (catalog_commit(cat))
        die("commit", catalog_errmsg(cat));
    catalog_close(cat);

    /* Users and keys with direct SQL, one transaction. */
    double t0 = now_ms();
    sqlite3 *db;
    sqlite3_stmt *user_st, *key_st;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die("sqlite3_open", sqlite3_errmsg(db));
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    if (sqlite3_prepare_v2(db, "INSERT INTO users (id, plan_id, created) VALUES (?, ?, '2024-01-01T00:00:00Z')",
                           -1, &user_st, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO api_keys (user_id, hash, label, created) VALUES (?, ?, '', "
                           "'2024-01-01T00:00:00Z')", -1, &key_st, NULL) != SQLITE_OK)
        die("prepare", sqlite3_errmsg(db));
    char id[32], key[64];
    for (long i = 0; i < n_users; i++) {
        snprintf(id, sizeof(id), "user%07ld", i);
        sqlite3_bind_text(user_st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(user_st, 2, 1 + i % 3);
        if (sqlite3_step(user_st) != SQLITE_DONE)
            die("insert user", sqlite3_errmsg(db));
        sqlite3_reset(user_st);
    }
    for (long i = 0; i < n_keys; i++) {
        uint8_t hash[APIKEY_HASH_LEN];
        snprintf(id, sizeof(id), "user%07ld", i % n_users);
        snprintf(key, sizeof(key), "tp_bench_%ld", i);
        apikey_hash(key, strlen(key), hash);
        sqlite3_bind_text(key_st, 1, id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_blob(key_st, 2, hash, sizeof(hash), SQLITE_TRANSIENT);
        if (sqlite3_step(key_st) != SQLITE_DONE)
            die("insert key", sqlite3_errmsg(db));
        sqlite3_reset(key_st);
    }
    sqlite3_finalize(user_st);
    sqlite3_finalize(key_st);
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        die("commit", sqlite3_errmsg(db));
    sqlite3_close(db);
    printf("built catalog: %ld users, %ld keys in %.0f ms\n", n_users, n_keys, now_ms() - t0);

    /* The load, several times. */
    enum { RUNS = 7 };
    double ms[RUNS];
    struct snapshot *snap = NULL;
    for (int run = 0; run < RUNS; run++) {
        snapshot_unref(snap);
        snap = NULL;
        double t = now_ms();
        if (snapshot_load(path, &snap, err, sizeof(err)))
            die("snapshot_load", err);
        ms[run] = now_ms() - t;
    }
    if (snapshot_user_count(snap) != (size_t)n_users || snapshot_key_count(snap) != (size_t)n_keys)
        die("check", "wrong counts");
    qsort(ms, RUNS, sizeof(ms[0]), cmp_double);
    printf("snapshot_load: %ld users + %ld keys: median %.1f ms, min %.1f ms, max %.1f ms (%d runs)\n",
           n_users, n_keys, ms[RUNS / 2], ms[0], ms[RUNS - 1], RUNS);

    /* Lookups: the request path. */
    enum { LOOKUPS = 1000000 };
    double t = now_ms();
    long found = 0;
    for (long i = 0; i < LOOKUPS; i++) {
        int n = snprintf(key, sizeof(key), "tp_bench_%ld", (i * 7919) % (n_keys ? n_keys : 1));
        found += snapshot_find_key(snap, key, (size_t)n) != NULL;
    }
    double lookup_ms = now_ms() - t;
    printf("snapshot_find_key: %.0f ns per lookup (SHA-256 included), %ld/%d found\n",
           lookup_ms * 1e6 / LOOKUPS, found, LOOKUPS);
    snapshot_unref(snap);

    unlink(path);
    char side[80];
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
    rmdir(dir);
    return n_keys == 0 || found == LOOKUPS ? 0 : 1;
}
