/* Unit tests for store/fallback/limiter_fallback.c (on_store_error = local): with Redis unreachable
 * (a Redis limiter pointed at a closed port: it answers LIMITER_UNAVAILABLE at once), the
 * rules of the kinds set to local are decided by the memory store on limits scaled by
 * local_share; closed passes the failure on; open leaves the rule out; leases taken
 * locally are given back locally; a reload's options apply at once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <event2/event.h>

#include "store/limiter_impl.h"

struct fixture {
    struct event_base *base;
    struct memory_store *memory;
    struct limiter *limiter;
};

static struct fixture *make(enum limiter_store_error rate, enum limiter_store_error concurrency, double share)
{
    static struct fixture f;
    f.base = event_base_new();
    assert_non_null(f.base);
    f.memory = memory_store_create();
    assert_non_null(f.memory);
    char err[128];
    /* port 1: nothing listens there; the limiter is never READY */
    struct redis_store_options o = { .url = "redis://127.0.0.1:1/0", .key_prefix = "t:", .command_timeout_ms = 200 };
    struct limiter *redis = limiter_redis_create(f.base, &o, err, sizeof(err));
    assert_non_null(redis);
    struct local_fallback_options fo = { .rate = rate, .concurrency = concurrency, .share = share };
    f.limiter = limiter_local_fallback_create(redis, limiter_memory_create(f.memory), &fo);
    assert_non_null(f.limiter);
    return &f;
}

static void unmake(struct fixture *f)
{
    limiter_destroy(f->limiter);
    memory_store_destroy(f->memory);
    event_base_free(f->base);
}

struct answer {
    int calls;
    struct limiter_result result;
};

static void on_done(void *arg, const struct limiter_result *result)
{
    struct answer *a = arg;
    a->calls++;
    a->result = *result;
}

static struct limiter_result check(struct fixture *f, const char *subject, const struct limit_rule *rules, size_t n,
                                   const char *lease_id)
{
    struct answer a = { 0 };
    int r = lease_id != NULL ? limiter_check_leased(f->limiter, subject, strlen(subject), rules, n, -1, lease_id,
                                                    on_done, &a)
                             : limiter_check(f->limiter, subject, strlen(subject), rules, n, -1, on_done, &a);
    assert_int_equal(r, 0);
    assert_int_equal(a.calls, 1);   /* Redis is down: answered before the call returns */
    return a.result;
}

static const struct limit_rule ten_per_min = { .id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 10, .window_ms = 60000 };
static const struct limit_rule two_slots = { .id = 2, .kind = LIMIT_CONCURRENCY, .rate = 2, .window_ms = 30000 };

static void test_local_share_one_is_the_limit(void **state)
{
    (void)state;
    struct fixture *f = make(LIMITER_STORE_ERROR_LOCAL, LIMITER_STORE_ERROR_LOCAL, 1.0);
    for (int i = 0; i < 10; i++) {
        struct limiter_result r = check(f, "u:a", &ten_per_min, 1, NULL);
        assert_int_equal(r.status, LIMITER_DECIDED);
        assert_true(r.local && r.allowed);
        assert_int_equal(r.verdicts[0].limit, 10);
        assert_int_equal(r.verdicts[0].remaining, 9 - i);
    }
    struct limiter_result r = check(f, "u:a", &ten_per_min, 1, NULL);
    assert_true(r.local);
    assert_false(r.allowed);
    assert_true(r.verdicts[0].reset_ms > 0);
    assert_true(check(f, "u:b", &ten_per_min, 1, NULL).allowed);   /* per subject */
    unmake(f);
}

static void test_share_scales_with_a_floor_of_one(void **state)
{
    (void)state;
    struct fixture *f = make(LIMITER_STORE_ERROR_LOCAL, LIMITER_STORE_ERROR_LOCAL, 0.3);
    int admitted = 0;
    for (int i = 0; i < 10; i++)
        admitted += check(f, "u:a", &ten_per_min, 1, NULL).allowed;
    assert_int_equal(admitted, 3);   /* 10 x 0.3 */
    struct limit_rule one = { .id = 3, .kind = LIMIT_SLIDING_LOG, .rate = 1, .window_ms = 60000 };
    admitted = 0;
    for (int i = 0; i < 3; i++)
        admitted += check(f, "u:a", &one, 1, NULL).allowed;
    assert_int_equal(admitted, 1);   /* 0.3, at least 1 */
    unmake(f);
}

static void test_closed_passes_the_failure_on(void **state)
{
    (void)state;
    struct fixture *f = make(LIMITER_STORE_ERROR_LOCAL, LIMITER_STORE_ERROR_CLOSED, 1.0);
    struct limit_rule both[2] = { ten_per_min, two_slots };
    assert_int_equal(check(f, "u:a", both, 2, "l1").status, LIMITER_UNAVAILABLE);
    assert_int_equal(limiter_lease_count(f->limiter), 0);
    /* rate rules alone are still local */
    assert_true(check(f, "u:a", &ten_per_min, 1, NULL).local);
    unmake(f);
}

static void test_open_rule_is_left_out(void **state)
{
    (void)state;
    struct fixture *f = make(LIMITER_STORE_ERROR_OPEN, LIMITER_STORE_ERROR_LOCAL, 1.0);
    struct limit_rule both[2] = { ten_per_min, two_slots };
    struct limiter_result r = check(f, "u:a", both, 2, "l1");
    assert_true(r.local && r.allowed);
    assert_int_equal(r.verdicts[0].remaining, 10);   /* the open rate rule: not counted */
    assert_int_equal(r.verdicts[1].limit, 2);
    assert_int_equal(r.verdicts[1].remaining, 1);
    /* nothing local at all: the failure is passed on */
    struct local_fallback_options open = { .rate = LIMITER_STORE_ERROR_OPEN,
                                           .concurrency = LIMITER_STORE_ERROR_OPEN, .share = 1.0 };
    limiter_local_fallback_set(f->limiter, &open);
    assert_int_equal(check(f, "u:a", both, 2, "l2").status, LIMITER_UNAVAILABLE);
    limiter_release(f->limiter, "u:a", 3, both, 2, "l1");
    assert_int_equal(limiter_lease_count(f->limiter), 0);
    unmake(f);
}

static void test_local_leases_are_given_back_locally(void **state)
{
    (void)state;
    struct fixture *f = make(LIMITER_STORE_ERROR_LOCAL, LIMITER_STORE_ERROR_LOCAL, 1.0);
    assert_true(check(f, "u:a", &two_slots, 1, "l1").allowed);
    assert_true(check(f, "u:a", &two_slots, 1, "l2").allowed);
    struct limiter_result r = check(f, "u:a", &two_slots, 1, "l3");
    assert_true(r.local);
    assert_false(r.allowed);
    assert_int_equal(r.verdicts[0].reset_ms, 1000);
    assert_int_equal(limiter_lease_count(f->limiter), 2);
    /* a lease id held already is refused, as by the stores alone */
    struct answer a = { 0 };
    assert_int_equal(limiter_check_leased(f->limiter, "u:a", 3, &two_slots, 1, -1, "l1", on_done, &a), -EINVAL);
    limiter_release(f->limiter, "u:a", 3, &two_slots, 1, "l1");
    assert_int_equal(limiter_lease_count(f->limiter), 1);
    assert_true(check(f, "u:a", &two_slots, 1, "l4").allowed);
    limiter_release_all(f->limiter, NULL, NULL);
    assert_int_equal(limiter_lease_count(f->limiter), 0);
    unmake(f);
}

static void test_bad_options_refused(void **state)
{
    (void)state;
    struct memory_store *m = memory_store_create();
    struct local_fallback_options bad = { .rate = LIMITER_STORE_ERROR_LOCAL, .share = 0.0 };
    assert_null(limiter_local_fallback_create(limiter_memory_create(m), limiter_memory_create(m), &bad));
    bad.share = 1.5;
    assert_null(limiter_local_fallback_create(limiter_memory_create(m), limiter_memory_create(m), &bad));
    memory_store_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_share_one_is_the_limit),
        cmocka_unit_test(test_share_scales_with_a_floor_of_one),
        cmocka_unit_test(test_closed_passes_the_failure_on),
        cmocka_unit_test(test_open_rule_is_left_out),
        cmocka_unit_test(test_local_leases_are_given_back_locally),
        cmocka_unit_test(test_bad_options_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
