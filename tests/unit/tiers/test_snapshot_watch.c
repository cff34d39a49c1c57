/* The watcher: picks up another connection's commit within refresh_ms, keeps the old
 * snapshot while the catalog is locked or gone, and stops promptly. */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <sqlite3.h>

#include "tiers/snapshot.h"

#define REFRESH_MS 50
#define SLACK_MS 2000

struct fixture {
    struct tmpdb db;
    struct snapshot_watch *watch;
};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    tmpdb_make(&f->db);
    struct catalog *cat = tmpdb_begin(&f->db);
    int64_t plan = add_plan(cat, "free");
    add_limit(cat, plan, 'r', 100, 60000, NULL, NULL);
    add_user(cat, "alice", plan);
    add_key(cat, "alice", "tp_alice");
    tmpdb_commit(cat);
    char err[256];
    int r = snapshot_watch_start(f->db.path, REFRESH_MS, &f->watch, err, sizeof(err));
    if (r)
        fail_msg("snapshot_watch_start: %s", err);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    snapshot_watch_stop(f->watch);
    tmpdb_remove(&f->db);
    free(f);
    return 0;
}

/* Another connection (tierctl) adds a user and a key. */
static void add_bob(struct fixture *f)
{
    struct catalog *cat = tmpdb_begin(&f->db);
    int64_t plan;
    assert_int_equal(catalog_plan_find(cat, "free", &plan, NULL), 0);
    add_user(cat, "bob", plan);
    add_key(cat, "bob", "tp_bob");
    tmpdb_commit(cat);
}

static bool sees_bob(struct snapshot_watch *w)
{
    struct snapshot *snap = snapshot_watch_acquire(w);
    bool found = snapshot_find_key(snap, "tp_bob", 6) != NULL;
    snapshot_unref(snap);
    return found;
}

static void test_first_snapshot_is_synchronous(void **state)
{
    struct fixture *f = *state;
    struct snapshot *snap = snapshot_watch_acquire(f->watch);
    assert_non_null(snap);
    assert_non_null(snapshot_find_key(snap, "tp_alice", 8));
    snapshot_unref(snap);
    assert_true(snapshot_watch_healthy(f->watch));
    assert_true(snapshot_watch_generation(f->watch) >= 1);
    assert_true(snapshot_watch_last_build_ms(f->watch) >= 0.0);
}

static void test_picks_up_change(void **state)
{
    struct fixture *f = *state;
    uint64_t gen = snapshot_watch_generation(f->watch);
    /* A snapshot held across the change stays valid and unchanged. */
    struct snapshot *old = snapshot_watch_acquire(f->watch);
    double t0 = now_ms();
    add_bob(f);
    while (!sees_bob(f->watch) && now_ms() - t0 < REFRESH_MS + SLACK_MS)
        sleep_ms(5);
    double took = now_ms() - t0;
    assert_true(sees_bob(f->watch));
    assert_true(snapshot_watch_generation(f->watch) > gen);
    print_message("change seen after %.0f ms (refresh_ms %d)\n", took, REFRESH_MS);
    assert_null(snapshot_find_key(old, "tp_bob", 6));
    assert_non_null(snapshot_find_key(old, "tp_alice", 8));
    snapshot_unref(old);
}

static void test_no_change_no_rebuild(void **state)
{
    struct fixture *f = *state;
    uint64_t gen = snapshot_watch_generation(f->watch);
    sleep_ms(REFRESH_MS * 5);
    assert_int_equal(snapshot_watch_generation(f->watch), gen);
}

/* A catalog held in exclusive locking mode cannot be read: polls fail with SQLITE_BUSY,
 * the old snapshot stays in service and healthy stays true; the change shows once the
 * lock is released. (In WAL mode nobody can lock the file exclusively while the watcher
 * holds its connection, so the locked file arrives by rename, as a copy from another host
 * would, and is locked when the watcher reopens.) */
static void test_keeps_old_snapshot_while_locked(void **state)
{
    struct fixture *f = *state;
    struct tmpdb other;
    tmpdb_make(&other);
    struct catalog *cat = tmpdb_begin(&other);
    int64_t plan = add_plan(cat, "free");
    add_user(cat, "alice", plan);
    add_key(cat, "alice", "tp_alice");
    add_user(cat, "bob", plan);
    add_key(cat, "bob", "tp_bob");
    tmpdb_commit(cat);

    sqlite3 *db;
    assert_int_equal(sqlite3_open(other.path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
        "PRAGMA locking_mode = EXCLUSIVE;"
        "BEGIN EXCLUSIVE;"
        "SELECT count(*) FROM users;"
        "COMMIT;", NULL, NULL, NULL), SQLITE_OK);   /* the lock outlives the transaction */
    uint64_t gen = snapshot_watch_generation(f->watch);
    assert_int_equal(rename(other.path, f->db.path), 0);

    /* Locked: the old snapshot keeps serving. */
    sleep_ms(REFRESH_MS * 8);
    struct snapshot *snap = snapshot_watch_acquire(f->watch);
    assert_non_null(snap);
    assert_non_null(snapshot_find_key(snap, "tp_alice", 8));
    assert_null(snapshot_find_user(snap, "bob"));
    snapshot_unref(snap);
    assert_int_equal(snapshot_watch_generation(f->watch), gen);
    assert_true(snapshot_watch_healthy(f->watch));   /* locked is not unreadable */
    char why[256];
    snapshot_watch_last_error(f->watch, why, sizeof(why));
    assert_non_null(strstr(why, "locked"));

    /* Released: the new catalog is served. */
    sqlite3_close(db);
    double t0 = now_ms();
    bool seen = false;
    while (!seen && now_ms() - t0 < REFRESH_MS + SLACK_MS) {
        snap = snapshot_watch_acquire(f->watch);
        seen = snapshot_find_user(snap, "bob") != NULL;
        snapshot_unref(snap);
        if (!seen)
            sleep_ms(5);
    }
    if (!seen) {
        snapshot_watch_last_error(f->watch, why, sizeof(why));
        fail_msg("not reloaded after the lock was released: %s", why);
    }
    assert_true(snapshot_watch_generation(f->watch) > gen);
    tmpdb_remove(&other);
}

static void test_unreadable_file_keeps_snapshot(void **state)
{
    struct fixture *f = *state;
    char p[128];
    snprintf(p, sizeof(p), "%s.moved", f->db.path);
    assert_int_equal(rename(f->db.path, p), 0);
    double t0 = now_ms();
    while (snapshot_watch_healthy(f->watch) && now_ms() - t0 < REFRESH_MS + SLACK_MS)
        sleep_ms(5);
    assert_false(snapshot_watch_healthy(f->watch));
    struct snapshot *snap = snapshot_watch_acquire(f->watch);
    assert_non_null(snapshot_find_key(snap, "tp_alice", 8));
    snapshot_unref(snap);
    /* Back in place: healthy again. */
    assert_int_equal(rename(p, f->db.path), 0);
    t0 = now_ms();
    while (!snapshot_watch_healthy(f->watch) && now_ms() - t0 < REFRESH_MS + SLACK_MS)
        sleep_ms(5);
    assert_true(snapshot_watch_healthy(f->watch));
}

/* A catalog replaced by rename (copied from another host) is reopened and loaded. */
static void test_replaced_file_is_reloaded(void **state)
{
    struct fixture *f = *state;
    struct tmpdb other;
    tmpdb_make(&other);
    struct catalog *cat = tmpdb_begin(&other);
    int64_t plan = add_plan(cat, "free");
    add_user(cat, "bob", plan);
    add_key(cat, "bob", "tp_bob");
    tmpdb_commit(cat);
    assert_int_equal(rename(other.path, f->db.path), 0);
    tmpdb_remove(&other);
    double t0 = now_ms();
    while (!sees_bob(f->watch) && now_ms() - t0 < REFRESH_MS + SLACK_MS)
        sleep_ms(5);
    assert_true(sees_bob(f->watch));
}

struct reader {
    struct snapshot_watch *watch;
    atomic_bool *stop;
    long lookups, misses;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    while (!atomic_load(r->stop)) {
        struct snapshot *snap = snapshot_watch_acquire(r->watch);
        const struct tier_user *u = snapshot_find_key(snap, "tp_alice", 8);
        r->misses += u == NULL || strcmp(u->plan->name, "free") != 0;
        r->lookups++;
        snapshot_unref(snap);
    }
    return NULL;
}

/* Serving threads acquire and release snapshots while the watcher swaps them: every
 * lookup sees a complete snapshot (run under TSan/ASan to check the publishing). */
static void test_concurrent_readers(void **state)
{
    struct fixture *f = *state;
    atomic_bool stop;
    atomic_init(&stop, false);
    struct reader readers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        readers[i] = (struct reader){.watch = f->watch, .stop = &stop};
        assert_int_equal(pthread_create(&threads[i], NULL, reader_main, &readers[i]), 0);
    }
    uint64_t gen = snapshot_watch_generation(f->watch);
    char name[32];
    for (int i = 0; i < 5; i++) {
        struct catalog *cat = tmpdb_begin(&f->db);
        snprintf(name, sizeof(name), "plan%d", i);
        add_plan(cat, name);
        tmpdb_commit(cat);
        sleep_ms(REFRESH_MS * 2);
    }
    atomic_store(&stop, true);
    long lookups = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(readers[i].misses, 0);
        lookups += readers[i].lookups;
    }
    assert_true(lookups > 0);
    assert_true(snapshot_watch_generation(f->watch) > gen);
}

static void test_stop_is_prompt(void **state)
{
    (void)state;
    struct tmpdb db;
    tmpdb_make(&db);
    tmpdb_commit(tmpdb_begin(&db));
    struct snapshot_watch *w = NULL;
    char err[256];
    assert_int_equal(snapshot_watch_start(db.path, 60000, &w, err, sizeof(err)), 0);
    double t0 = now_ms();
    snapshot_watch_stop(w);
    assert_true(now_ms() - t0 < 500);
    tmpdb_remove(&db);
}

static void test_start_fails_without_catalog(void **state)
{
    (void)state;
    struct snapshot_watch *w = NULL;
    char err[256];
    assert_int_equal(snapshot_watch_start("/nonexistent/plans.db", 100, &w, err, sizeof(err)), -ENOENT);
    assert_null(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_snapshot_is_synchronous, setup, teardown),
        cmocka_unit_test_setup_teardown(test_picks_up_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_change_no_rebuild, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keeps_old_snapshot_while_locked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreadable_file_keeps_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replaced_file_is_reloaded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_readers, setup, teardown),
        cmocka_unit_test(test_stop_is_prompt),
        cmocka_unit_test(test_start_fails_without_catalog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
