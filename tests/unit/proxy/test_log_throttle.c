/* Unit tests for proxy/log_throttle.c: one line per key per interval, with the count of
 * the events it stands for; a bounded table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "proxy/log_throttle.h"

static bool hit(struct log_throttle *t, const char *key, int64_t now_ms, uint64_t *pcount)
{
    return log_throttle_hit(t, key, strlen(key), now_ms, pcount);
}

static void test_one_line_per_interval_carries_the_held_back(void **state)
{
    (void)state;
    struct log_throttle *t = log_throttle_create(64, 10000);
    assert_non_null(t);
    uint64_t count = 0;
    assert_true(hit(t, "alice", 1000, &count));
    assert_int_equal(count, 1);
    for (int i = 0; i < 199; i++)
        assert_false(hit(t, "alice", 1000 + i * 10, &count));
    assert_false(hit(t, "alice", 10999, &count)); /* 1 ms short of the interval */
    assert_true(hit(t, "alice", 11000, &count));
    assert_int_equal(count, 201); /* 199 + 1 held back, and this one */
    /* a quiet key writes its next line at once, standing for itself */
    assert_true(hit(t, "alice", 50000, &count));
    assert_int_equal(count, 1);
    log_throttle_destroy(t);
}

static void test_keys_have_their_own_budget(void **state)
{
    (void)state;
    struct log_throttle *t = log_throttle_create(64, 10000);
    uint64_t count = 0;
    assert_true(hit(t, "alice\nhttp\n1", 0, &count));
    assert_true(hit(t, "alice\nhttp\n2", 0, &count)); /* another limit */
    assert_true(hit(t, "bob\nhttp\n1", 0, &count));  /* another user */
    assert_false(hit(t, "alice\nhttp\n1", 1, &count));
    log_throttle_destroy(t);
}

static void test_a_flood_of_keys_stays_bounded_and_forgets_the_oldest(void **state)
{
    (void)state;
    struct log_throttle *t = log_throttle_create(16, 10000);
    uint64_t count = 0;
    assert_true(hit(t, "victim", 0, &count));
    assert_false(hit(t, "victim", 1, &count));
    char key[32];
    /* far more keys than the table holds: each is new, so each gets a line */
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof(key), "flood%d", i);
        assert_true(hit(t, key, 100 + i, &count));
        assert_int_equal(count, 1);
    }
    /* the victim was forgotten: an extra line, its held-back count lost (documented) */
    assert_true(hit(t, "victim", 20000, &count));
    assert_int_equal(count, 1);
    log_throttle_destroy(t);
}

struct hammer {
    struct log_throttle *t;
    uint64_t lines, represented;
};

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < 100000; i++) {
        uint64_t count;
        if (log_throttle_hit(h->t, "shared", 6, i / 1000, &count)) { /* 0..99 ms */
            h->lines++;
            h->represented += count;
        }
    }
    return NULL;
}

static void test_threads_share_one_budget(void **state)
{
    (void)state;
    struct log_throttle *t = log_throttle_create(64, 10000);
    struct hammer hs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        hs[i] = (struct hammer){ .t = t };
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &hs[i]), 0);
    }
    uint64_t lines = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        lines += hs[i].lines;
    }
    assert_int_equal(lines, 1); /* all within one interval, over four threads */
    uint64_t count = 0;
    assert_true(log_throttle_hit(t, "shared", 6, 10100, &count));
    assert_int_equal(count, 400000); /* 399999 held back, and this one */
    log_throttle_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_line_per_interval_carries_the_held_back),
        cmocka_unit_test(test_keys_have_their_own_budget),
        cmocka_unit_test(test_a_flood_of_keys_stays_bounded_and_forgets_the_oldest),
        cmocka_unit_test(test_threads_share_one_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
