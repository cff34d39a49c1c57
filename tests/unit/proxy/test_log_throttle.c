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
    return log_throttle_hit(t, key, strlen(key), now_ms, NULL, 0, pcount, NULL);
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
    assert_true(hit(t, "quiet", 0, &count));
    assert_true(hit(t, "victim", 0, &count));
    assert_false(hit(t, "victim", 1, &count));
    char key[32];
    /* far more keys than the table holds: each is new, so each gets a line */
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof(key), "flood%d", i);
        assert_true(hit(t, key, 100 + i, &count));
        assert_int_equal(count, 1);
    }
    /* the quiet key was forgotten: its next event is a line at once */
    assert_true(hit(t, "quiet", 10500, &count));
    assert_int_equal(count, 1);
    /* a key with a held event is forgotten only when its whole set holds some: the
     * victim's held-back event is still counted */
    assert_true(hit(t, "victim", 20000, &count));
    assert_int_equal(count, 2);
    log_throttle_destroy(t);
}

struct written {
    char lines[8][16];
    uint64_t counts[8];
    size_t n;
};

static void note_written(void *arg, const void *line, size_t line_len, uint64_t count)
{
    struct written *w = arg;
    assert_true(w->n < 8);
    memcpy(w->lines[w->n], line, line_len);
    w->lines[w->n][line_len] = '\0';
    w->counts[w->n++] = count;
}

static bool hit_with(struct log_throttle *t, const char *key, int64_t now_ms, const char *line, int64_t *pflush)
{
    uint64_t count;
    return log_throttle_hit(t, key, strlen(key), now_ms, line, strlen(line), &count, pflush);
}

static void test_held_lines_are_written_one_interval_after_the_first_held(void **state)
{
    (void)state;
    struct log_throttle *t = log_throttle_create(64, 10000);
    struct written w = { .n = 0 };
    int64_t due = -1;
    assert_int_equal(log_throttle_flush(t, 0, note_written, &w), -1); /* nothing held */
    assert_true(hit_with(t, "alice", 1000, "a1", &due));
    assert_false(hit_with(t, "alice", 2000, "a2", &due));
    assert_int_equal(due, 12000); /* the first held event plus the interval */
    assert_false(hit_with(t, "alice", 5000, "a3", &due));
    assert_int_equal(due, 12000);
    assert_true(hit_with(t, "bob", 3000, "b1", &due));
    assert_false(hit_with(t, "bob", 4000, "b2", &due));
    assert_int_equal(due, 14000);
    /* not yet due: nothing written, the next due time told */
    assert_int_equal(log_throttle_flush(t, 11999, note_written, &w), 12000);
    assert_int_equal(w.n, 0);
    /* alice's two held events, with the latest line */
    assert_int_equal(log_throttle_flush(t, 12000, note_written, &w), 14000);
    assert_int_equal(w.n, 1);
    assert_string_equal(w.lines[0], "a3");
    assert_int_equal(w.counts[0], 2);
    /* that was a line: alice's next event within the interval is held again */
    assert_false(hit_with(t, "alice", 13000, "a4", &due));
    assert_int_equal(due, 23000);
    /* the end: every held line, due or not */
    assert_int_equal(log_throttle_flush(t, INT64_MAX, note_written, &w), -1);
    assert_int_equal(w.n, 3);
    assert_string_equal(w.lines[1], "b2");
    assert_int_equal(w.counts[1], 1);
    assert_string_equal(w.lines[2], "a4");
    assert_int_equal(w.counts[2], 1);
    log_throttle_destroy(t);
}

static void test_a_line_due_by_a_later_event_is_not_written_twice(void **state)
{
    (void)state;
    struct log_throttle *t = log_throttle_create(64, 10000);
    struct written w = { .n = 0 };
    uint64_t count = 0;
    int64_t due = -1;
    assert_true(hit_with(t, "carol", 0, "c1", &due));
    assert_false(hit_with(t, "carol", 5000, "c2", &due)); /* due at 15000 */
    /* an event after the interval since the last line writes the held one with it */
    assert_true(log_throttle_hit(t, "carol", 5, 10000, "c3", 2, &count, &due));
    assert_int_equal(count, 2);
    assert_int_equal(log_throttle_flush(t, 15000, note_written, &w), -1);
    assert_int_equal(w.n, 0);
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
        if (log_throttle_hit(h->t, "shared", 6, i / 1000, NULL, 0, &count, NULL)) { /* 0..99 ms */
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
    assert_true(log_throttle_hit(t, "shared", 6, 10100, NULL, 0, &count, NULL));
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
        cmocka_unit_test(test_held_lines_are_written_one_interval_after_the_first_held),
        cmocka_unit_test(test_a_line_due_by_a_later_event_is_not_written_twice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
