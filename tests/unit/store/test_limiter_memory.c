/* Unit tests for store/memory/algorithms.c and store/memory/limiter_memory.c: the algorithms' verdict
 * numbers checked against brute force, the memory store's atomicity, eviction, argument
 * checks and thread safety. (The same answers from Redis: test_limiter_redis.c.) */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/memory/algorithms.h"
#include "store/limiter_impl.h"

/* ---- brute force over the pure functions ---- */

static void state_copy(struct algo_state *dst, const struct algo_state *src)
{
    *dst = *src;
    if (src->kind == LIMIT_SLIDING_LOG && src->u.sl.cap > 0) {
        /* the times, and for a weighted log the running totals after them */
        size_t bytes = src->u.sl.cap * sizeof(int64_t) + (src->u.sl.weighted ? (src->u.sl.cap + 1) * sizeof(uint64_t) : 0);
        dst->u.sl.ts = malloc(bytes);
        assert_non_null(dst->u.sl.ts);
        memcpy(dst->u.sl.ts, src->u.sl.ts, bytes);
    }
}

/* Requests of cost 1 admitted one after another at `now` (capped at limit + 1), on a copy. */
static int64_t admissible(const struct algo_state *s, const struct limit_rule *weighted, int64_t now)
{
    struct limit_rule rule = *weighted;
    rule.cost = 0;
    struct algo_state copy;
    state_copy(&copy, s);
    int64_t k = 0;
    for (; k <= rule.rate + rule.burst; k++) {
        struct algo_eval ev;
        algo_decide(&copy, &rule, now, &ev);
        if (!ev.allowed)
            break;
        assert_int_equal(algo_reserve(&copy, &rule, &ev), 0);
        algo_commit(&copy, &rule, &ev);
    }
    algo_state_clear(&copy);
    return k;
}

/* One step of a random walk: decide, maybe record, and check the verdict against brute
 * force: a request of cost k is allowed exactly when k requests of cost 1 would be;
 * `remaining` is what can still be admitted now; `reset_ms` is the first moment that
 * more can be admitted (0 exactly when nothing is in use), or for a rejected request the
 * first moment that k can. */
static void step(struct algo_state *s, const struct limit_rule *rule, int64_t now, bool record)
{
    struct algo_eval ev;
    struct limit_verdict v;
    int64_t k = limit_rule_cost(rule);
    algo_decide(s, rule, now, &ev);
    int64_t before = admissible(s, rule, ev.te);
    assert_int_equal(ev.allowed, before >= k);
    if (ev.allowed && record) {
        assert_int_equal(algo_reserve(s, rule, &ev), 0);
        algo_commit(s, rule, &ev);
    }
    algo_verdict(s, rule, &ev, &v);
    int64_t c = rule->rate + rule->burst;
    assert_int_equal(v.limit, c);
    assert_int_equal(v.allowed, ev.allowed);
    int64_t avail = admissible(s, rule, ev.te);
    if (ev.allowed)
        assert_int_equal(v.remaining, avail);
    else
        assert_int_equal(v.remaining, 0);
    if (!ev.allowed) {
        assert_true(v.reset_ms > 0);
        for (int64_t d = 1; d < v.reset_ms; d++)
            if (admissible(s, rule, ev.te + d) >= k)
                fail_msg("alg %d cost %lld: admitted after %lld ms, reset_ms said %lld", rule->kind, (long long)k,
                         (long long)d, (long long)v.reset_ms);
        assert_true(admissible(s, rule, ev.te + v.reset_ms) >= k);
        return;
    }
    if (v.reset_ms == 0) {
        assert_true(avail >= c);
        return;
    }
    assert_true(avail < c);
    assert_true(v.reset_ms > 0 && v.reset_ms <= 2 * rule->window_ms + rule->window_ms * c);
    for (int64_t d = 1; d < v.reset_ms; d++)
        if (admissible(s, rule, ev.te + d) > avail)
            fail_msg("alg %d: more admissible after %lld ms, reset_ms said %lld", rule->kind,
                     (long long)d, (long long)v.reset_ms);
    assert_true(admissible(s, rule, ev.te + v.reset_ms) > avail);
}

static void test_brute_force(void **state)
{
    srand(12345);
    for (int alg = 0; alg < 4; alg++) {
        for (int round = 0; round < 12; round++) {
            struct limit_rule rule = {
                .id = 1, .kind = (enum limit_kind)alg,
                .rate = 1 + rand() % 4, .burst = rand() % 3, .window_ms = 5 + rand() % 40,
            };
            struct algo_state s;
            algo_state_init(&s);
            int64_t now = 1000 + rand() % 100;
            for (int i = 0; i < 150; i++) {
                int r = rand() % 20;
                if (r < 8)
                    ; /* same ms: bursts */
                else if (r < 18)
                    now += rand() % (rule.window_ms / 2 + 1);
                else if (r == 18)
                    now -= rand() % rule.window_ms;   /* clock goes backwards */
                else
                    now += rand() % (3 * rule.window_ms);
                /* now and then the catalog changes the rule's numbers under the same id */
                if (rand() % 40 == 0) {
                    rule.rate = 1 + rand() % 4;
                    rule.burst = rand() % 3;
                }
                if (rand() % 80 == 0)
                    rule.window_ms = 5 + rand() % 40;
                /* a weighted request now and then (cost 0 means 1) */
                rule.cost = rand() % 3 == 0 ? 1 + rand() % (rule.rate + rule.burst) : rand() % 2;
                step(&s, &rule, now, rand() % 5 != 0);
            }
            algo_state_clear(&s);
        }
    }
}

/* A sliding log keeps times only while every entry weighs 1 (8 bytes an entry, as before
 * costs); a heavier entry adds running totals, which go once it has left the window. */
static void test_sliding_log_weights(void **state)
{
    struct limit_rule rule = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 10, .window_ms = 1000};
    struct algo_state s;
    algo_state_init(&s);
    struct algo_eval ev;
    struct limit_verdict v;
    for (int i = 0; i < 3; i++) {
        algo_decide(&s, &rule, 100 + i, &ev);
        assert_int_equal(algo_reserve(&s, &rule, &ev), 0);
        algo_commit(&s, &rule, &ev);
    }
    assert_int_equal(s.u.sl.weighted, 0);
    rule.cost = 5;
    algo_decide(&s, &rule, 200, &ev);
    assert_int_equal(algo_reserve(&s, &rule, &ev), 0);
    algo_commit(&s, &rule, &ev);
    algo_verdict(&s, &rule, &ev, &v);
    assert_int_equal(v.remaining, 2);
    assert_int_equal(s.u.sl.weighted, 1);
    assert_int_equal(s.u.sl.len, 4);   /* one entry for the 5 */
    rule.cost = 3;                     /* 8 used: a 3 waits for the oldest 1 to leave */
    algo_decide(&s, &rule, 300, &ev);
    assert_false(ev.allowed);
    algo_verdict(&s, &rule, &ev, &v);
    assert_int_equal(v.reset_ms, 100 + 1000 - 300);
    rule.cost = 1;
    algo_decide(&s, &rule, 1250, &ev);   /* the 5 has left */
    assert_int_equal(algo_reserve(&s, &rule, &ev), 0);
    algo_commit(&s, &rule, &ev);
    algo_verdict(&s, &rule, &ev, &v);
    assert_int_equal(v.remaining, 9);
    assert_int_equal(s.u.sl.weighted, 0);
    algo_state_clear(&s);
}

/* ---- the memory store through the limiter interface ---- */

struct capture {
    int calls;
    struct limiter_result res;
};

static void on_done(void *arg, const struct limiter_result *result)
{
    struct capture *c = arg;
    c->calls++;
    c->res = *result;
}

static struct limiter_result check(struct limiter *l, const char *subject, const struct limit_rule *rules,
                                   size_t n, int64_t now)
{
    struct capture c = {0};
    assert_int_equal(limiter_check(l, subject, strlen(subject), rules, n, now, on_done, &c), 0);
    assert_int_equal(c.calls, 1);   /* done before limiter_check returns */
    assert_int_equal(c.res.status, LIMITER_DECIDED);
    assert_int_equal(c.res.n, n);
    return c.res;
}

static int setup_store(void **state)
{
    struct memory_store *store = memory_store_create();
    assert_non_null(store);
    *state = store;
    return 0;
}

static int teardown_store(void **state)
{
    memory_store_destroy(*state);
    return 0;
}

static void test_sliding_log_exact(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule r = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 2, .burst = 1, .window_ms = 1000};
    int64_t t0 = 10000;
    for (int i = 0; i < 3; i++) {
        struct limiter_result res = check(l, "u:1", &r, 1, t0 + 100 * i);
        assert_true(res.allowed);
        assert_int_equal(res.verdicts[0].limit, 3);
        assert_int_equal(res.verdicts[0].remaining, 2 - i);
        assert_int_equal(res.verdicts[0].reset_ms, 1000 - 100 * i);   /* when t0 leaves the window */
    }
    /* the 4th inside the window: rejected, and told exactly how long to wait */
    struct limiter_result res = check(l, "u:1", &r, 1, t0 + 300);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_int_equal(res.verdicts[0].reset_ms, 700);
    res = check(l, "u:1", &r, 1, t0 + 999);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 1);
    /* at exactly oldest + window the oldest no longer counts */
    res = check(l, "u:1", &r, 1, t0 + 1000);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_int_equal(res.verdicts[0].reset_ms, 100);   /* t0+100 leaves at t0+1100 */
    res = check(l, "u:1", &r, 1, t0 + 1000);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 100);
    limiter_destroy(l);
}

static void test_rejected_not_recorded(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule rules[2] = {
        {.id = 10, .kind = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 11, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 60000},
    };
    struct limiter_result res = check(l, "u:2", rules, 2, 1000);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 4);
    assert_int_equal(res.verdicts[1].remaining, 0);
    /* the second rule rejects: the first allows, but nothing is recorded anywhere */
    for (int i = 0; i < 10; i++) {
        res = check(l, "u:2", rules, 2, 2000);
        assert_false(res.allowed);
        assert_true(res.verdicts[0].allowed);
        assert_false(res.verdicts[1].allowed);
        assert_int_equal(res.verdicts[0].remaining, 4);   /* still 4: the request was not counted */
        assert_int_equal(res.verdicts[0].reset_ms, 59000);
        assert_int_equal(res.verdicts[1].reset_ms, 58000);
    }
    res = check(l, "u:2", rules, 1, 2000);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 3);
    limiter_destroy(l);
}

static void test_clock_backwards(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule r = {.id = 3, .kind = LIMIT_SLIDING_LOG, .rate = 2, .burst = 0, .window_ms = 1000};
    assert_true(check(l, "u:3", &r, 1, 50000).allowed);
    /* the clock jumps back: the request is placed at the newest time seen, so it leaves
     * the window no earlier than it should */
    struct limiter_result res = check(l, "u:3", &r, 1, 40000);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 1000);
    res = check(l, "u:3", &r, 1, 40000);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 1000);
    assert_false(check(l, "u:3", &r, 1, 50999).allowed);
    assert_true(check(l, "u:3", &r, 1, 51000).allowed);
    limiter_destroy(l);
}

static void test_token_bucket(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    /* 2 per second, burst 2: capacity 4, a token every 500 ms */
    struct limit_rule r = {.id = 4, .kind = LIMIT_TOKEN_BUCKET, .rate = 2, .burst = 2, .window_ms = 1000};
    for (int i = 0; i < 4; i++) {
        struct limiter_result res = check(l, "u:4", &r, 1, 0);
        assert_true(res.allowed);
        assert_int_equal(res.verdicts[0].remaining, 3 - i);
        assert_int_equal(res.verdicts[0].reset_ms, 500);
    }
    struct limiter_result res = check(l, "u:4", &r, 1, 1);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 499);
    assert_false(check(l, "u:4", &r, 1, 499).allowed);
    res = check(l, "u:4", &r, 1, 500);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_int_equal(res.verdicts[0].reset_ms, 500);
    limiter_destroy(l);
}

static void test_sliding_window(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule r = {.id = 5, .kind = LIMIT_SLIDING_WINDOW, .rate = 4, .burst = 0, .window_ms = 1000};
    for (int i = 0; i < 4; i++)
        assert_true(check(l, "u:5", &r, 1, 10000 + i).allowed);
    struct limiter_result res = check(l, "u:5", &r, 1, 10500);
    assert_false(res.allowed);
    /* next window: the previous 4 weigh 4 * (1000 - e) / 1000; below 4 from e = 1 */
    assert_int_equal(res.verdicts[0].reset_ms, 501);
    assert_false(check(l, "u:5", &r, 1, 11000).allowed);
    res = check(l, "u:5", &r, 1, 11001);
    assert_true(res.allowed);
    /* 4 * 999 / 1000 + 1 = 4.996: nothing more until the previous weight drops under 3 */
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_int_equal(res.verdicts[0].reset_ms, 250);
    limiter_destroy(l);
}

static void test_fixed_window(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule r = {.id = 6, .kind = LIMIT_FIXED_WINDOW, .rate = 2, .burst = 0, .window_ms = 1000};
    struct limiter_result res = check(l, "u:6", &r, 1, 5200);
    assert_int_equal(res.verdicts[0].remaining, 1);
    assert_int_equal(res.verdicts[0].reset_ms, 800);
    assert_true(check(l, "u:6", &r, 1, 5300).allowed);
    res = check(l, "u:6", &r, 1, 5999);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 1);
    assert_true(check(l, "u:6", &r, 1, 6000).allowed);
    limiter_destroy(l);
}

static void test_subjects_and_rules_apart(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule a = {.id = 7, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 60000};
    struct limit_rule b = a;
    b.id = 8;
    assert_true(check(l, "u:7", &a, 1, 0).allowed);
    assert_false(check(l, "u:7", &a, 1, 0).allowed);
    assert_true(check(l, "u:7", &b, 1, 0).allowed);    /* another rule id: its own state */
    assert_true(check(l, "u:77", &a, 1, 0).allowed);   /* another subject: its own state */
    /* a subject with a NUL byte in it is another subject */
    struct capture c = {0};
    assert_int_equal(limiter_check(l, "u:7\0x", 5, &a, 1, 0, on_done, &c), 0);
    assert_true(c.res.allowed);
    limiter_destroy(l);
}

static void test_bad_arguments(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule rules[LIMITER_MAX_RULES + 1];
    for (int i = 0; i <= LIMITER_MAX_RULES; i++)
        rules[i] = (struct limit_rule){.id = i, .kind = LIMIT_SLIDING_LOG, .rate = 1, .window_ms = 1000};
    struct capture c = {0};
    assert_int_equal(limiter_check(l, "s", 1, rules, 0, 0, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check(l, "s", 1, rules, LIMITER_MAX_RULES + 1, 0, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check(l, "s", 0, rules, 1, 0, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check(l, NULL, 1, rules, 1, 0, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check(l, "s", 1, rules, 1, 0, NULL, &c), -EINVAL);
    assert_int_equal(limiter_check(NULL, "s", 1, rules, 1, 0, on_done, &c), -EINVAL);
    struct limit_rule dup[2] = {rules[1], rules[1]};
    assert_int_equal(limiter_check(l, "s", 1, dup, 2, 0, on_done, &c), -EINVAL);
    struct limit_rule bad = rules[0];
    bad.rate = 0;
    assert_int_equal(limiter_check(l, "s", 1, &bad, 1, 0, on_done, &c), -EINVAL);
    assert_int_equal(c.calls, 0);   /* done is never called on an error return */
    assert_int_equal(limiter_check(l, "s", 1, rules, LIMITER_MAX_RULES, 0, on_done, &c), 0);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.n, LIMITER_MAX_RULES);
    assert_true(limiter_available(l));
    limiter_destroy(l);
}

static void test_eviction(void **state)
{
    struct memory_store *store = *state;
    struct limiter *l = limiter_memory_create(store);
    struct limit_rule rules[2] = {
        {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 1000},
        {.id = 2, .kind = LIMIT_TOKEN_BUCKET, .rate = 3, .burst = 0, .window_ms = 1000},
    };
    char subject[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(subject, sizeof(subject), "old:%d", i);
        check(l, subject, rules, 2, 1000);
    }
    assert_int_equal(memory_store_subjects(store), 5000);
    /* a rejected check of a rule the subject has no state for adds none */
    struct limit_rule full = {.id = 3, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .window_ms = 100000};
    struct limit_rule pair[2] = {full, {.id = 4, .kind = LIMIT_SLIDING_LOG, .rate = 1, .window_ms = 100000}};
    assert_true(check(l, "full", &full, 1, 1000).allowed);
    assert_false(check(l, "full", pair, 2, 1000).allowed);
    assert_int_equal(memory_store_subjects(store), 5001);
    assert_true(check(l, "full", &pair[1], 1, 1000).allowed);   /* id 4 was not recorded */
    /* later, traffic of other subjects sweeps the idle ones away */
    for (int i = 0; i < 5000; i++) {
        snprintf(subject, sizeof(subject), "new:%d", i);
        check(l, subject, rules, 2, 3000);
    }
    size_t left = memory_store_subjects(store);
    if (left > 5000 + 1000)
        fail_msg("%zu subjects kept; the idle ones were not swept", left);
    /* an evicted subject starts afresh, the same as if it had been kept */
    struct limiter_result res = check(l, "old:1", rules, 2, 3000);
    assert_int_equal(res.verdicts[0].remaining, 2);
    assert_int_equal(res.verdicts[1].remaining, 2);
    limiter_destroy(l);
}

/* A sliding log's window grows (tierctl changed the limit in place) while its subject is
 * rejected: the rejected check keeps the log for the new window, so the requests in it
 * still count once the old window's eviction time has passed. (Redis: the key's TTL,
 * test_sliding_log_window_grows_ttl.) */
static void test_sliding_log_window_grows(void **state)
{
    struct memory_store *store = *state;
    struct limiter *l = limiter_memory_create(store);
    struct limit_rule r = {.id = 7, .kind = LIMIT_SLIDING_LOG, .rate = 2, .burst = 0, .window_ms = 2000};
    assert_true(check(l, "grow", &r, 1, 100000).allowed);
    assert_true(check(l, "grow", &r, 1, 100000).allowed);
    r.window_ms = 20000;
    assert_false(check(l, "grow", &r, 1, 101000).allowed);
    /* past the old window's eviction (dead at 102000, dropped one window later) */
    struct limiter_result res = check(l, "grow", &r, 1, 105000);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 100000 + 20000 - 105000);
    assert_true(check(l, "grow", &r, 1, 120000).allowed);
    limiter_destroy(l);
}

/* ---- concurrency leases ---- */

static struct limiter_result check_leased(struct limiter *l, const char *subject, const struct limit_rule *rules,
                                          size_t n, int64_t now, const char *lease_id)
{
    struct capture c = {0};
    assert_int_equal(limiter_check_leased(l, subject, strlen(subject), rules, n, now, lease_id, on_done, &c), 0);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.status, LIMITER_DECIDED);
    assert_int_equal(c.res.n, n);
    return c.res;
}

static void expect_verdict(const struct limit_verdict *v, bool allowed, int64_t limit, int64_t remaining,
                           int64_t reset_ms)
{
    assert_int_equal(v->allowed, allowed);
    assert_int_equal(v->limit, limit);
    assert_int_equal(v->remaining, remaining);
    assert_int_equal(v->reset_ms, reset_ms);
}

static void test_concurrency_slots(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule cc = {.id = 40, .kind = LIMIT_CONCURRENCY, .rate = 3, .burst = 0, .window_ms = 30000};
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "p:%d", i);
        struct limiter_result res = check_leased(l, "u:cc", &cc, 1, 1000, id);
        assert_true(res.allowed);
        expect_verdict(&res.verdicts[0], true, 3, 2 - i, 0);
    }
    assert_int_equal(limiter_lease_count(l), 3);
    /* full: rejected, told to come back in a second, and nothing taken */
    struct limiter_result res = check_leased(l, "u:cc", &cc, 1, 1000, "p:3");
    assert_false(res.allowed);
    expect_verdict(&res.verdicts[0], false, 3, 0, 1000);
    assert_int_equal(limiter_lease_count(l), 3);
    /* time does not free a slot in one process; a release does */
    assert_false(check_leased(l, "u:cc", &cc, 1, 1000 + 10 * 30000, "p:4").allowed);
    limiter_release(l, "u:cc", 4, &cc, 1, "p:1");
    assert_int_equal(limiter_lease_count(l), 2);
    res = check_leased(l, "u:cc", &cc, 1, 2000, "p:5");
    expect_verdict(&res.verdicts[0], true, 3, 0, 0);
    /* a second release of one lease, or of one never held, gives back nothing */
    limiter_release(l, "u:cc", 4, &cc, 1, "p:1");
    limiter_release(l, "u:cc", 4, &cc, 1, "p:3");
    limiter_release(l, "u:cc", 4, &cc, 1, "nope");
    assert_false(check_leased(l, "u:cc", &cc, 1, 2000, "p:6").allowed);
    /* another subject has its own slots */
    assert_true(check_leased(l, "u:other", &cc, 1, 2000, "p:7").allowed);
    limiter_destroy(l);
}

/* Rate and concurrency rules are one atomic step: a rejection by either records nothing. */
static void test_concurrency_with_rates(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule rules[2] = {
        {.id = 41, .kind = LIMIT_FIXED_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 42, .kind = LIMIT_CONCURRENCY, .rate = 3, .burst = 0, .window_ms = 30000},
    };
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "r:%d", i);
        struct limiter_result res = check_leased(l, "u:mix", rules, 2, 1000, id);
        assert_true(res.allowed);
        assert_int_equal(res.verdicts[0].remaining, 4 - i);
        assert_int_equal(res.verdicts[1].remaining, 2 - i);
    }
    /* the concurrency rule rejects: the rate rule allows but does not count it */
    struct limiter_result res = check_leased(l, "u:mix", rules, 2, 1000, "r:3");
    assert_false(res.allowed);
    expect_verdict(&res.verdicts[0], true, 5, 2, 59000);
    expect_verdict(&res.verdicts[1], false, 3, 0, 1000);
    limiter_release(l, "u:mix", 5, rules, 2, "r:0");
    limiter_release(l, "u:mix", 5, rules, 2, "r:1");
    assert_true(check_leased(l, "u:mix", rules, 2, 1000, "r:4").allowed);
    assert_true(check_leased(l, "u:mix", rules, 2, 1000, "r:5").allowed);
    limiter_release(l, "u:mix", 5, rules, 2, "r:2");
    /* 5 counted: the rate rule rejects, and no lease is taken */
    res = check_leased(l, "u:mix", rules, 2, 1000, "r:6");
    assert_false(res.allowed);
    expect_verdict(&res.verdicts[0], false, 5, 0, 59000);
    expect_verdict(&res.verdicts[1], true, 3, 1, 0);
    assert_int_equal(limiter_lease_count(l), 2);
    res = check_leased(l, "u:mix", &rules[1], 1, 1000, "r:7");
    expect_verdict(&res.verdicts[0], true, 3, 0, 0);   /* 2 held + this one: r:6 took none */
    limiter_destroy(l);
}

/* Every limiter of one store shares the slots; release_all and destroy give back only
 * their own. */
static void test_concurrency_shared(void **state)
{
    struct memory_store *store = *state;
    struct limiter *a = limiter_memory_create(store), *b = limiter_memory_create(store);
    struct limit_rule cc[2] = {
        {.id = 43, .kind = LIMIT_CONCURRENCY, .rate = 4, .burst = 0, .window_ms = 30000},
        {.id = 44, .kind = LIMIT_CONCURRENCY, .rate = 100, .burst = 0, .window_ms = 30000},
    };
    assert_true(check_leased(a, "u:sh", cc, 2, 0, "a:1").allowed);
    assert_true(check_leased(a, "u:sh", cc, 2, 0, "a:2").allowed);
    assert_true(check_leased(b, "u:sh", cc, 2, 0, "b:1").allowed);
    assert_true(check_leased(b, "u:sh", cc, 2, 0, "a:1").allowed);   /* lease ids are per limiter */
    assert_false(check_leased(a, "u:sh", cc, 2, 0, "a:3").allowed);
    assert_int_equal(limiter_lease_count(a), 4);   /* two leases (one per rule) per check */
    assert_int_equal(limiter_lease_count(b), 4);
    limiter_release_all(a, NULL, NULL);   /* done is optional */
    assert_int_equal(limiter_lease_count(a), 0);
    struct limiter_result res = check_leased(b, "u:sh", cc, 2, 0, "b:2");
    expect_verdict(&res.verdicts[0], true, 4, 1, 0);
    expect_verdict(&res.verdicts[1], true, 100, 97, 0);
    limiter_destroy(b);   /* gives back b's three */
    res = check_leased(a, "u:sh", cc, 2, 0, "a:4");
    expect_verdict(&res.verdicts[0], true, 4, 3, 0);
    limiter_destroy(a);
}

static void count_done(void *arg)
{
    (*(int *)arg)++;
}

static void test_concurrency_arguments(void **state)
{
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule cc = {.id = 45, .kind = LIMIT_CONCURRENCY, .rate = 2, .burst = 0, .window_ms = 30000};
    struct capture c = {0};
    /* a concurrency rule needs a lease id of 1..64 bytes */
    assert_int_equal(limiter_check(l, "s", 1, &cc, 1, 0, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check_leased(l, "s", 1, &cc, 1, 0, NULL, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check_leased(l, "s", 1, &cc, 1, 0, "", on_done, &c), -EINVAL);
    char long_id[66];
    memset(long_id, 'x', 65);
    long_id[65] = '\0';
    assert_int_equal(limiter_check_leased(l, "s", 1, &cc, 1, 0, long_id, on_done, &c), -EINVAL);
    long_id[64] = '\0';
    assert_int_equal(limiter_check_leased(l, "s", 1, &cc, 1, 0, long_id, on_done, &c), 0);
    assert_int_equal(c.calls, 1);
    /* the same lease id twice while held: refused, not counted twice */
    assert_int_equal(limiter_check_leased(l, "s", 1, &cc, 1, 0, long_id, on_done, &c), -EINVAL);
    struct limit_rule bad = cc;
    bad.burst = 1;
    assert_int_equal(limiter_check_leased(l, "s", 1, &bad, 1, 0, "x", on_done, &c), -EINVAL);
    assert_int_equal(c.calls, 1);
    assert_int_equal(limiter_lease_count(l), 1);
    /* rate rules only: the lease id is ignored and nothing is held */
    struct limit_rule rate = {.id = 46, .kind = LIMIT_FIXED_WINDOW, .rate = 2, .burst = 0, .window_ms = 1000};
    assert_int_equal(limiter_check_leased(l, "s", 1, &rate, 1, 0, NULL, on_done, &c), 0);
    assert_int_equal(limiter_check_leased(l, "s", 1, &rate, 1, 0, long_id, on_done, &c), 0);
    assert_int_equal(limiter_lease_count(l), 1);
    /* release ignores what it cannot know; release_all calls done at once */
    limiter_release(NULL, "s", 1, &cc, 1, long_id);
    limiter_release(l, "s", 1, &cc, 1, NULL);
    limiter_release(l, "s", 1, &rate, 1, long_id);
    assert_int_equal(limiter_lease_count(l), 1);
    int done = 0;
    limiter_release_all(l, count_done, &done);
    assert_int_equal(done, 1);
    assert_int_equal(limiter_lease_count(l), 0);
    limiter_release_all(NULL, count_done, &done);
    assert_int_equal(done, 2);
    assert_int_equal(limiter_lease_count(NULL), 0);
    limiter_destroy(l);
}

/* A subject whose slots are held is never evicted, however old; once given back, it is. */
static void test_concurrency_eviction(void **state)
{
    struct memory_store *store = *state;
    struct limiter *l = limiter_memory_create(store);
    struct limit_rule cc = {.id = 47, .kind = LIMIT_CONCURRENCY, .rate = 1, .burst = 0, .window_ms = 1000};
    struct limit_rule rate = {.id = 48, .kind = LIMIT_FIXED_WINDOW, .rate = 5, .burst = 0, .window_ms = 1000};
    struct limit_rule both_rules[2] = {rate, cc};
    assert_true(check_leased(l, "held", both_rules, 2, 1000, "h:1").allowed);
    char subject[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(subject, sizeof(subject), "x:%d", i);
        check(l, subject, &rate, 1, 1000000 + i);
    }
    assert_false(check_leased(l, "held", &cc, 1, 2000000, "h:2").allowed);   /* still held */
    limiter_release(l, "held", 4, &cc, 1, "h:1");
    assert_int_equal(limiter_lease_count(l), 0);
    struct limiter_result res = check_leased(l, "held", &cc, 1, 2000000, "h:3");
    expect_verdict(&res.verdicts[0], true, 1, 0, 0);
    limiter_release(l, "held", 4, &cc, 1, "h:3");
    /* the rate rule's state and the empty slot go with the next sweeps */
    for (int i = 0; i < 3000; i++) {
        snprintf(subject, sizeof(subject), "y:%d", i);
        check(l, subject, &rate, 1, 3000000 + i);
    }
    size_t left = memory_store_subjects(store);
    if (left > 3000 + 500)
        fail_msg("%zu subjects kept", left);
    limiter_destroy(l);
}

/* Threads each with a limiter of their own race for N slots: exactly N are taken. */
#define CC_THREADS 8

struct cc_hammer {
    struct memory_store *store;
    pthread_barrier_t *barrier;
    int index;
    int allowed;
    size_t held;
};

static void cc_count(void *arg, const struct limiter_result *result)
{
    struct cc_hammer *h = arg;
    if (result->allowed)
        h->allowed++;
}

static void *cc_hammer_main(void *arg)
{
    struct cc_hammer *h = arg;
    struct limiter *l = limiter_memory_create(h->store);
    struct limit_rule rules[2] = {
        {.id = 1, .kind = LIMIT_TOKEN_BUCKET, .rate = 100000, .burst = 0, .window_ms = 3600000},
        {.id = 2, .kind = LIMIT_CONCURRENCY, .rate = 10, .burst = 0, .window_ms = 30000},
    };
    char id[32];
    for (int i = 0; i < 200; i++) {
        snprintf(id, sizeof(id), "t%d:%d", h->index, i);
        limiter_check_leased(l, "race", 4, rules, 2, 5000, id, cc_count, h);
    }
    h->held = limiter_lease_count(l);
    pthread_barrier_wait(h->barrier);   /* every thread keeps its leases until all have tried */
    limiter_destroy(l);
    return NULL;
}

static void test_concurrency_threads(void **state)
{
    pthread_t t[CC_THREADS];
    struct cc_hammer h[CC_THREADS];
    pthread_barrier_t barrier;
    assert_int_equal(pthread_barrier_init(&barrier, NULL, CC_THREADS), 0);
    for (int i = 0; i < CC_THREADS; i++) {
        h[i] = (struct cc_hammer){.store = *state, .barrier = &barrier, .index = i};
        assert_int_equal(pthread_create(&t[i], NULL, cc_hammer_main, &h[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < CC_THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(h[i].held, (size_t)h[i].allowed);   /* one lease per allowed check */
        total += h[i].allowed;
    }
    pthread_barrier_destroy(&barrier);
    assert_int_equal(total, 10);
    /* every limiter was destroyed: every slot is free again */
    struct limiter *l = limiter_memory_create(*state);
    struct limit_rule cc = {.id = 2, .kind = LIMIT_CONCURRENCY, .rate = 10, .burst = 0, .window_ms = 30000};
    struct limiter_result res = check_leased(l, "race", &cc, 1, 5000, "after");
    assert_int_equal(res.verdicts[0].remaining, 9);
    limiter_destroy(l);
}

/* Several threads hammer one subject: exactly N of the sliding-log limit's N are admitted. */
#define THREADS 8
#define ATTEMPTS 600
#define LIMIT_N 1000

struct hammer {
    struct memory_store *store;
    int64_t now;
    int allowed;
};

static void count_allowed(void *arg, const struct limiter_result *result)
{
    struct hammer *h = arg;
    if (result->allowed)
        h->allowed++;
}

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    struct limiter *l = limiter_memory_create(h->store);
    struct limit_rule rules[2] = {
        {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = LIMIT_N - 10, .burst = 10, .window_ms = 3600000},
        {.id = 2, .kind = LIMIT_TOKEN_BUCKET, .rate = 100000, .burst = 0, .window_ms = 3600000},
    };
    char other[32];
    for (int i = 0; i < ATTEMPTS; i++) {
        limiter_check(l, "shared", 6, rules, 2, h->now, count_allowed, h);
        /* and some traffic on other subjects, in other stripes */
        snprintf(other, sizeof(other), "o:%d:%d", (int)(intptr_t)h % 97, i);
        struct hammer ignore = {0};
        limiter_check(l, other, strlen(other), rules, 1, h->now, count_allowed, &ignore);
    }
    limiter_destroy(l);
    return NULL;
}

static void run_hammer(struct memory_store *store, int64_t now)
{
    pthread_t t[THREADS];
    struct hammer h[THREADS];
    for (int i = 0; i < THREADS; i++) {
        h[i] = (struct hammer){.store = store, .now = now};
        assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += h[i].allowed;
    }
    assert_int_equal(total, LIMIT_N);
}

static void test_threads_real_clock(void **state)
{
    run_hammer(*state, -1);
}

static void test_threads_fixed_clock(void **state)
{
    run_hammer(*state, 123456789);
}

/* ---- [limits] memory_max_subjects ---- */

static bool admitted(struct limiter *l, const char *subject, const struct limit_rule *r, int64_t now)
{
    return check(l, subject, r, 1, now).allowed;
}

static void test_max_subjects_evicts_least_recently_used(void **state)
{
    struct memory_store *store = *state;
    memory_store_set_max_subjects(store, 3);
    struct limiter *l = limiter_memory_create(store);
    struct limit_rule r = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 1, .window_ms = 3600000};
    int64_t t = 1000000;
    assert_true(admitted(l, "A", &r, t));
    assert_true(admitted(l, "B", &r, t));
    assert_true(admitted(l, "C", &r, t));
    assert_false(admitted(l, "A", &r, t));   /* a check is a use, refused or not: B is now the oldest */
    assert_true(admitted(l, "D", &r, t));    /* a fourth: B is forgotten */
    assert_int_equal(memory_store_subjects(store), 3);
    assert_false(admitted(l, "A", &r, t));   /* A, C and D kept their counts */
    assert_false(admitted(l, "D", &r, t));
    assert_true(admitted(l, "B", &r, t));    /* B starts over, and C (now the oldest) goes */
    assert_int_equal(memory_store_subjects(store), 3);
    assert_true(admitted(l, "C", &r, t));
    /* driven far past the cap, it stays at the cap and keeps the most recent */
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        assert_true(admitted(l, name, &r, t));
        assert_true(memory_store_subjects(store) <= 3);
    }
    assert_false(admitted(l, "s4999", &r, t));
    assert_false(admitted(l, "s4998", &r, t));
    assert_true(admitted(l, "s0", &r, t));
    limiter_destroy(l);
}

static void test_max_subjects_keeps_lease_holders(void **state)
{
    struct memory_store *store = *state;
    memory_store_set_max_subjects(store, 2);
    struct limiter *l = limiter_memory_create(store);
    struct limit_rule cc = {.id = 7, .kind = LIMIT_CONCURRENCY, .rate = 1, .window_ms = 30000};
    struct limit_rule r = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 5, .window_ms = 60000};
    assert_true(check_leased(l, "holder", &cc, 1, 1000, "h:1").allowed);   /* the oldest subject */
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof(name), "s%d", i);
        assert_true(admitted(l, name, &r, 2000));
        assert_int_equal(memory_store_subjects(store), 2);
    }
    /* its slot still taken: evicting it would have let a second connection in */
    assert_false(check_leased(l, "holder", &cc, 1, 3000, "h:2").allowed);
    limiter_release(l, "holder", 6, &cc, 1, "h:1");
    assert_true(admitted(l, "s100", &r, 4000));   /* released, it is evictable like any other */
    assert_int_equal(memory_store_subjects(store), 2);
    limiter_destroy(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_brute_force),
        cmocka_unit_test(test_sliding_log_weights),
        cmocka_unit_test_setup_teardown(test_sliding_log_exact, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_rejected_not_recorded, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_clock_backwards, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_token_bucket, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_sliding_window, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_fixed_window, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_subjects_and_rules_apart, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_eviction, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_sliding_log_window_grows, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_threads_real_clock, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_threads_fixed_clock, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_concurrency_slots, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_concurrency_with_rates, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_concurrency_shared, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_concurrency_arguments, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_concurrency_eviction, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_concurrency_threads, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_max_subjects_evicts_least_recently_used, setup_store, teardown_store),
        cmocka_unit_test_setup_teardown(test_max_subjects_keeps_lease_holders, setup_store, teardown_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
