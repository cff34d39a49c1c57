/* snapshot_patch_keys: a snapshot made from another and the keys that changed finds every
 * key the catalog now admits and none it does not, through patches of patches,
 * and leaves the snapshot it was made from as it was. */
#include "helpers.h"

#include <errno.h>

#include "tiers/snapshot.h"

#define N_USERS 200
#define N_KEYS 300

static int setup(void **state)
{
    struct tmpdb *t = calloc(1, sizeof(*t));
    tmpdb_make(t);
    struct catalog *cat = tmpdb_begin(t);
    int64_t plan = add_plan(cat, "free");
    char id[32], key[32];
    for (int i = 0; i < N_USERS; i++) {
        snprintf(id, sizeof(id), "u%03d", i);
        add_user(cat, id, plan);
    }
    for (int i = 0; i < N_KEYS; i++) {
        snprintf(id, sizeof(id), "u%03d", i % N_USERS);
        snprintf(key, sizeof(key), "tp_key_%03d", i);
        add_key(cat, id, key);
    }
    tmpdb_commit(cat);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tmpdb_remove(*state);
    free(*state);
    return 0;
}

static struct snapshot *load(struct tmpdb *t)
{
    struct snapshot *snap = NULL;
    char err[256];
    if (snapshot_load(t->path, &snap, err, sizeof(err)) != 0)
        fail_msg("snapshot_load: %s", err);
    return snap;
}

static const char *user_of(const struct snapshot *snap, const char *key)
{
    const struct tier_user *u = snapshot_find_key(snap, key, strlen(key));
    return u ? u->id : NULL;
}

static void change(struct snapshot_key_change *c, const char *key, const char *user_id)
{
    assert_int_equal(apikey_hash(key, strlen(key), c->hash), 0);
    c->user_id = user_id;
}

static void assert_old_keys(const struct snapshot *snap, int step_removed)
{
    char key[32], id[32];
    for (int i = 0; i < N_KEYS; i++) {
        snprintf(key, sizeof(key), "tp_key_%03d", i);
        snprintf(id, sizeof(id), "u%03d", i % N_USERS);
        if (step_removed && i % step_removed == 0)
            assert_null(user_of(snap, key));
        else
            assert_string_equal(user_of(snap, key), id);
    }
}

static void test_removed_added_and_kept_keys(void **state)
{
    struct snapshot *built = load(*state);
    struct snapshot_key_change changes[N_KEYS / 3 + 1 + 50];
    size_t n = 0;
    char key[N_KEYS / 3 + 1 + 50][32];
    for (int i = 0; i < N_KEYS; i += 3) {
        snprintf(key[n], sizeof(key[n]), "tp_key_%03d", i);
        change(&changes[n], key[n], NULL);
        n++;
    }
    for (int i = 0; i < 50; i++) {
        snprintf(key[n], sizeof(key[n]), "tp_new_%03d", i);
        change(&changes[n], key[n], "u007");
        n++;
    }
    struct snapshot *patched = NULL;
    assert_int_equal(snapshot_patch_keys(built, changes, n, 42, &patched), 0);
    assert_old_keys(patched, 3);
    for (int i = 0; i < 50; i++) {
        char k[32];
        snprintf(k, sizeof(k), "tp_new_%03d", i);
        assert_string_equal(user_of(patched, k), "u007");
    }
    assert_int_equal(snapshot_key_count(patched), N_KEYS - N_KEYS / 3 + 50);
    assert_int_equal(snapshot_catalog_version(patched), 42);
    assert_int_equal(snapshot_user_count(patched), N_USERS);
    assert_old_keys(built, 0);   /* the one it was made from is unchanged */
    assert_int_equal(snapshot_key_count(built), N_KEYS);

    /* a patch of a patch outlives both: it holds the built one, not the first patch */
    struct snapshot *again = NULL;
    change(&changes[0], "tp_key_000", "u001");   /* back, for another user */
    assert_int_equal(snapshot_patch_keys(patched, changes, 1, 43, &again), 0);
    snapshot_unref(patched);
    snapshot_unref(built);
    assert_string_equal(user_of(again, "tp_key_000"), "u001");
    assert_string_equal(user_of(again, "tp_new_049"), "u007");
    assert_null(user_of(again, "tp_key_003"));
    assert_string_equal(user_of(again, "tp_key_004"), "u004");
    snapshot_unref(again);
}

static void test_refusals_leave_no_snapshot(void **state)
{
    struct snapshot *built = load(*state);
    struct snapshot_key_change c;
    struct snapshot *patched = NULL;
    change(&c, "tp_nobody", "no-such-user");
    assert_int_equal(snapshot_patch_keys(built, &c, 1, 2, &patched), -ENOENT);
    assert_null(patched);
    /* past 8,192 keys changed since the build, the watcher rebuilds */
    enum { MANY = 8193 };
    struct snapshot_key_change *many = calloc(MANY, sizeof(*many));
    char (*keys)[32] = calloc(MANY, 32);
    for (size_t i = 0; i < MANY; i++) {
        snprintf(keys[i], 32, "tp_more_%05zu", i);
        change(&many[i], keys[i], "u001");
    }
    assert_int_equal(snapshot_patch_keys(built, many, MANY, 2, &patched), -ENOSPC);
    assert_null(patched);
    assert_int_equal(snapshot_patch_keys(built, many, MANY - 1, 2, &patched), 0);
    assert_string_equal(user_of(patched, "tp_more_08191"), "u001");
    assert_int_equal(snapshot_key_count(patched), N_KEYS + MANY - 1);
    snapshot_unref(patched);
    patched = NULL;
    assert_int_equal(snapshot_patch_keys(built, many, MANY - 1, 2, &patched), 0);
    struct snapshot *over = NULL;
    assert_int_equal(snapshot_patch_keys(patched, many + MANY - 1, 1, 3, &over), -ENOSPC);
    snapshot_unref(patched);
    patched = NULL;
    assert_null(patched);
    assert_old_keys(built, 0);
    free(many);
    free(keys);
    snapshot_unref(built);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_removed_added_and_kept_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals_leave_no_snapshot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
