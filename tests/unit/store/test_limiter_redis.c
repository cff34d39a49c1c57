/* Unit tests for store/limiter_redis.c and store/check.lua, against a real redis-server
 * started here (in the foreground, as a child, on a port picked by binding port 0; killed
 * and waited for by PID). The memory store is run side by side on the same sequences and
 * must give identical decisions and identical verdict numbers.
 *
 * Windows in the equivalence tests are >= 60 s: the tests pass `now` explicitly, but Redis
 * expires keys on its own clock, so a key must outlive the test's real running time. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "store/limiter_impl.h"

/* ---- redis-server as a child process ---- */

struct server {
    pid_t pid;
    int port;
    char sock[108];
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pick_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t len = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static redisContext *sync_connect(int port)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 300000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c != NULL && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c != NULL)
        redisSetTimeout(c, (struct timeval){.tv_sec = 5});
    return c;
}

/* Starts redis-server on s->port (picks one when 0) with extra arguments; waits until it
 * answers. */
static void server_start(struct server *s, const char *password, bool unix_socket)
{
    const char *bin = getenv("REDIS_SERVER");
    assert_non_null(bin);
    if (s->port == 0)
        s->port = pick_port();
    char port[16];
    snprintf(port, sizeof(port), "%d", s->port);
    if (unix_socket)
        snprintf(s->sock, sizeof(s->sock), "/tmp/tierproxy-test-%d-%d.sock", (int)getpid(), s->port);
    const char *argv[16] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"};
    int argc = 9;
    if (password != NULL) {
        argv[argc++] = "--requirepass";
        argv[argc++] = password;
    }
    if (unix_socket) {
        argv[argc++] = "--unixsocket";
        argv[argc++] = s->sock;
    }
    argv[argc] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 200; i++) {
        redisContext *c = sync_connect(s->port);
        if (c != NULL) {
            redisReply *r = redisCommand(c, "PING");
            bool up = r != NULL;   /* PONG, or NOAUTH with a password: up either way */
            freeReplyObject(r);
            redisFree(c);
            if (up)
                return;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            fail_msg("redis-server exited (status %d)", status);
        usleep(25000);
    }
    fail_msg("redis-server on port %d does not answer", s->port);
}

static void server_stop(struct server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->sock[0])
        unlink(s->sock);
}

/* ---- driving the event loop ---- */

struct fixture {
    struct server srv;
    struct event_base *base;
    struct event *tick;          /* makes every EVLOOP_ONCE return within 20 ms */
    struct memory_store *ms;
    struct limiter *mem, *redis;
    redisContext *sync;
    char prefix[64];
};

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
}

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

static void pump(struct fixture *f, const int *calls, int want, int64_t max_ms)
{
    int64_t deadline = mono_ms() + max_ms;
    while (*calls < want && mono_ms() < deadline)
        event_base_loop(f->base, EVLOOP_ONCE);
}

static bool wait_available(struct fixture *f, struct limiter *l, bool want, int64_t max_ms)
{
    int64_t deadline = mono_ms() + max_ms;
    while (limiter_available(l) != want && mono_ms() < deadline)
        event_base_loop(f->base, EVLOOP_ONCE);
    return limiter_available(l) == want;
}

static struct limiter_result run(struct fixture *f, struct limiter *l, const char *subject,
                                 const struct limit_rule *rules, size_t n, int64_t now)
{
    struct capture c = {0};
    assert_int_equal(limiter_check(l, subject, strlen(subject), rules, n, now, on_done, &c), 0);
    pump(f, &c.calls, 1, 10000);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.n, n);
    return c.res;
}

static struct limiter *redis_limiter(struct fixture *f, const char *url, const char *prefix, int64_t timeout_ms)
{
    struct redis_store_options o = {.url = url, .key_prefix = prefix, .command_timeout_ms = timeout_ms};
    char err[128];
    struct limiter *l = limiter_redis_create(f->base, &o, err, sizeof(err));
    if (l == NULL)
        fail_msg("limiter_redis_create: %s", err);
    return l;
}

static char *tcp_url(int port, char *buf, size_t len)
{
    snprintf(buf, len, "redis://127.0.0.1:%d/0", port);
    return buf;
}

static int group_setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    server_start(&f->srv, NULL, false);
    f->base = event_base_new();
    f->tick = event_new(f->base, -1, EV_PERSIST, on_tick, NULL);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 20000};
    event_add(f->tick, &tv);
    f->sync = sync_connect(f->srv.port);
    assert_non_null(f->sync);
    *state = f;
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *f = *state;
    redisFree(f->sync);
    server_stop(&f->srv);
    event_free(f->tick);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* Each test: fresh memory store, a Redis limiter with its own key prefix. */
static int test_setup(void **state)
{
    static int counter;
    struct fixture *f = *state;
    snprintf(f->prefix, sizeof(f->prefix), "t%d:", ++counter);
    f->ms = memory_store_create();
    f->mem = limiter_memory_create(f->ms);
    char url[64];
    f->redis = redis_limiter(f, tcp_url(f->srv.port, url, sizeof(url)), f->prefix, 2000);
    assert_true(wait_available(f, f->redis, true, 5000));
    return 0;
}

static int test_teardown(void **state)
{
    struct fixture *f = *state;
    limiter_destroy(f->redis);
    limiter_destroy(f->mem);
    memory_store_destroy(f->ms);
    return 0;
}

/* ---- both stores, same answers ---- */

static void expect_same(const struct limiter_result *m, const struct limiter_result *r, const char *what)
{
    bool same = m->status == LIMITER_DECIDED && r->status == LIMITER_DECIDED && m->allowed == r->allowed &&
                m->now_ms == r->now_ms && m->n == r->n;
    for (size_t i = 0; same && i < m->n; i++)
        same = m->verdicts[i].allowed == r->verdicts[i].allowed && m->verdicts[i].limit == r->verdicts[i].limit &&
               m->verdicts[i].remaining == r->verdicts[i].remaining &&
               m->verdicts[i].reset_ms == r->verdicts[i].reset_ms;
    if (same)
        return;
    print_error("%s: memory and redis differ\n", what);
    const struct limiter_result *x[2] = {m, r};
    for (int k = 0; k < 2; k++) {
        print_error("  %s: status %d allowed %d now %" PRId64 ":", k ? "redis " : "memory", x[k]->status,
                    x[k]->allowed, x[k]->now_ms);
        for (size_t i = 0; i < x[k]->n; i++)
            print_error(" [%d %" PRId64 " %" PRId64 " %" PRId64 "]", x[k]->verdicts[i].allowed,
                        x[k]->verdicts[i].limit, x[k]->verdicts[i].remaining, x[k]->verdicts[i].reset_ms);
        print_error("\n");
    }
    fail();
}

static struct limiter_result both(struct fixture *f, const char *subject, const struct limit_rule *rules, size_t n,
                                  int64_t now)
{
    struct limiter_result m = run(f, f->mem, subject, rules, n, now);
    struct limiter_result r = run(f, f->redis, subject, rules, n, now);
    char what[128];
    snprintf(what, sizeof(what), "subject %s, %zu rules, now %" PRId64, subject, n, now);
    if (getenv("TRACE")) {
        fprintf(stderr, "%s ->", what);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " id%" PRId64 "/a%d/c%" PRId64 "/w%" PRId64 " m[%d %" PRId64 " %" PRId64 "] r[%d %" PRId64 " %" PRId64 "]",
                    rules[i].id, rules[i].algorithm, rules[i].rate + rules[i].burst, rules[i].window_ms,
                    m.verdicts[i].allowed, m.verdicts[i].remaining, m.verdicts[i].reset_ms, r.verdicts[i].allowed,
                    r.verdicts[i].remaining, r.verdicts[i].reset_ms);
        fprintf(stderr, "\n");
    }
    expect_same(&m, &r, what);
    return r;
}

/* A random walk over several subjects, each with three rules of `alg` (or mixed when
 * alg < 0); each check takes a random subset of them, so that one rule often rejects while
 * others allow. Time mostly moves forward, sometimes stands still, sometimes jumps back. */
static void random_walk(struct fixture *f, int alg, unsigned seed, int steps)
{
    if (getenv("SEED"))
        seed += (unsigned)strtoul(getenv("SEED"), NULL, 10) * 1000;   /* to explore more sequences by hand */
    srand(seed);
    struct limit_rule rules[3][3];
    static const int64_t windows[] = {60000, 90000, 120000};
    for (int s = 0; s < 3; s++)
        for (int j = 0; j < 3; j++)
            rules[s][j] = (struct limit_rule){
                .id = 100 + j,
                .algorithm = (enum limit_algorithm)(alg >= 0 ? alg : rand() % 4),
                .rate = 1 + rand() % 5,
                .burst = rand() % 3,
                .window_ms = windows[rand() % 3],
            };
    int64_t now = 1000000000 + rand() % 100000;
    for (int i = 0; i < steps; i++) {
        int r = rand() % 20;
        if (r < 6)
            ;
        else if (r < 17)
            now += rand() % 20000;
        else if (r < 19)
            now += rand() % 250000;
        else
            now -= rand() % 30000;   /* the clock goes backwards */
        int s = rand() % 3;
        struct limit_rule pick[3];
        size_t n = 0;
        int mask = 1 + rand() % 7;
        for (int j = 0; j < 3; j++)
            if (mask & (1 << j))
                pick[n++] = rules[s][j];
        char subject[16];
        snprintf(subject, sizeof(subject), "u:%d", s);
        both(f, subject, pick, n, now);
    }
}

static void test_same_sliding_log(void **state) { random_walk(*state, LIMIT_SLIDING_LOG, 1, 300); }
static void test_same_sliding_window(void **state) { random_walk(*state, LIMIT_SLIDING_WINDOW, 2, 300); }
static void test_same_token_bucket(void **state) { random_walk(*state, LIMIT_TOKEN_BUCKET, 3, 300); }
static void test_same_fixed_window(void **state) { random_walk(*state, LIMIT_FIXED_WINDOW, 4, 300); }
static void test_same_mixed(void **state) { random_walk(*state, -1, 5, 400); }

/* A rule id whose algorithm or window changes (catalog edit): the old state, even of
 * another Redis type, is treated as empty by both stores alike. */
static void test_same_rule_changes(void **state)
{
    struct fixture *f = *state;
    int64_t now = 5000000;
    for (int k = 0; k < 12; k++) {
        struct limit_rule r = {.id = 9, .algorithm = (enum limit_algorithm)(k % 4), .rate = 2, .burst = k % 2,
                               .window_ms = k < 4 ? 60000 : 120000};
        struct limit_rule other = {.id = 10, .algorithm = LIMIT_FIXED_WINDOW, .rate = 1, .window_ms = 60000};
        struct limit_rule pair[2] = {r, other};
        for (int i = 0; i < 4; i++) {
            both(f, "u:change", &r, 1, now);
            both(f, "u:change", pair, 2, now);
            now += 7000;
        }
    }
}

/* ---- exact numbers, asserted on both stores ---- */

static void test_sliding_log_exact(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 1, .algorithm = LIMIT_SLIDING_LOG, .rate = 2, .burst = 1, .window_ms = 60000};
    int64_t t0 = 1700000000000;
    for (int i = 0; i < 3; i++) {
        struct limiter_result res = both(f, "u:exact", &r, 1, t0 + 100 * i);
        assert_true(res.allowed);
        assert_int_equal(res.now_ms, t0 + 100 * i);
        assert_int_equal(res.verdicts[0].limit, 3);
        assert_int_equal(res.verdicts[0].remaining, 2 - i);
        assert_int_equal(res.verdicts[0].reset_ms, 60000 - 100 * i);
    }
    /* rate + burst admitted: the next one in the window is rejected with the exact wait */
    struct limiter_result res = both(f, "u:exact", &r, 1, t0 + 300);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_int_equal(res.verdicts[0].reset_ms, 59700);
    res = both(f, "u:exact", &r, 1, t0 + 59999);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 1);
    /* allowed again exactly at oldest + window */
    res = both(f, "u:exact", &r, 1, t0 + 60000);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 100);
    res = both(f, "u:exact", &r, 1, t0 + 60000);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 100);
    /* several requests in one millisecond are each counted (unique zset members) */
    struct limit_rule big = {.id = 2, .algorithm = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000};
    for (int i = 0; i < 5; i++)
        assert_true(both(f, "u:samems", &big, 1, t0).allowed);
    assert_false(both(f, "u:samems", &big, 1, t0).allowed);
    char key[128];
    snprintf(key, sizeof(key), "%s{u:samems}:2", f->prefix);
    redisReply *rep = redisCommand(f->sync, "ZCARD %s", key);
    assert_non_null(rep);
    assert_int_equal(rep->integer, 5);
    freeReplyObject(rep);
}

static void test_other_algorithms_exact(void **state)
{
    struct fixture *f = *state;
    /* token bucket: 2 per minute + burst 2: capacity 4, one token every 30 s */
    struct limit_rule tb = {.id = 3, .algorithm = LIMIT_TOKEN_BUCKET, .rate = 2, .burst = 2, .window_ms = 60000};
    for (int i = 0; i < 4; i++) {
        struct limiter_result res = both(f, "u:tb", &tb, 1, 0);
        assert_int_equal(res.verdicts[0].remaining, 3 - i);
        assert_int_equal(res.verdicts[0].reset_ms, 30000);
    }
    struct limiter_result res = both(f, "u:tb", &tb, 1, 1);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 29999);
    assert_true(both(f, "u:tb", &tb, 1, 30000).allowed);

    /* fixed window */
    struct limit_rule fw = {.id = 4, .algorithm = LIMIT_FIXED_WINDOW, .rate = 2, .burst = 0, .window_ms = 60000};
    res = both(f, "u:fw", &fw, 1, 600000 + 15000);
    assert_int_equal(res.verdicts[0].remaining, 1);
    assert_int_equal(res.verdicts[0].reset_ms, 45000);
    both(f, "u:fw", &fw, 1, 600000 + 16000);
    res = both(f, "u:fw", &fw, 1, 600000 + 59999);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 1);
    assert_true(both(f, "u:fw", &fw, 1, 660000).allowed);

    /* sliding window: 4 at the start of a window; the next window's estimate weighs them
     * by 4 * (60000 - e) / 60000 */
    struct limit_rule sw = {.id = 5, .algorithm = LIMIT_SLIDING_WINDOW, .rate = 4, .burst = 0, .window_ms = 60000};
    for (int i = 0; i < 4; i++)
        assert_true(both(f, "u:sw", &sw, 1, 600000 + i).allowed);
    res = both(f, "u:sw", &sw, 1, 630000);
    assert_false(res.allowed);
    assert_int_equal(res.verdicts[0].reset_ms, 30001);
    assert_false(both(f, "u:sw", &sw, 1, 660000).allowed);
    res = both(f, "u:sw", &sw, 1, 660001);
    assert_true(res.allowed);
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_int_equal(res.verdicts[0].reset_ms, 15000);
}

static long long commandstat(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char pat[64];
    snprintf(pat, sizeof(pat), "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, pat);
    long long v = p ? strtoll(p + strlen(pat), NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

static long long writes(redisContext *c)
{
    static const char *const cmds[] = {"zadd", "zremrangebyscore", "hset", "pexpire", "del"};
    long long total = 0;
    for (size_t i = 0; i < 5; i++)
        total += commandstat(c, cmds[i]);
    return total;
}

static void test_rejected_writes_nothing(void **state)
{
    struct fixture *f = *state;
    struct limit_rule rules[4] = {
        {.id = 20, .algorithm = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 21, .algorithm = LIMIT_SLIDING_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 22, .algorithm = LIMIT_TOKEN_BUCKET, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 23, .algorithm = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 60000},
    };
    assert_true(both(f, "u:rej", rules, 4, 120000).allowed);
    long long before = writes(f->sync);
    /* the fixed window rejects; the other three allow but must not count it */
    for (int i = 0; i < 5; i++) {
        struct limiter_result res = both(f, "u:rej", rules, 4, 120000 + i);
        assert_false(res.allowed);
        for (int j = 0; j < 3; j++) {
            assert_true(res.verdicts[j].allowed);
            assert_int_equal(res.verdicts[j].remaining, 4);
        }
        assert_false(res.verdicts[3].allowed);
    }
    assert_int_equal(writes(f->sync), before);   /* not one write command on Redis */
    /* rule 20 alone is allowed and sees only the first request */
    struct limiter_result res = both(f, "u:rej", rules, 1, 120010);
    assert_int_equal(res.verdicts[0].remaining, 3);
}

static void test_keys_and_expiry(void **state)
{
    struct fixture *f = *state;
    struct limit_rule rules[4] = {
        {.id = 30, .algorithm = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 31, .algorithm = LIMIT_SLIDING_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 32, .algorithm = LIMIT_TOKEN_BUCKET, .rate = 5, .burst = 1, .window_ms = 60000},
        {.id = 33, .algorithm = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 60000},
    };
    /* real clock: the Redis server's TIME */
    int64_t before = real_ms();
    struct limiter_result res = run(f, f->redis, "u:keys", rules, 4, -1);
    assert_int_equal(res.status, LIMITER_DECIDED);
    assert_true(res.allowed);
    assert_true(res.now_ms >= before - 5000 && res.now_ms <= real_ms() + 5000);
    static const long long max_ttl[4] = {60000, 120000, 60000, 60000};
    static const char *const type[4] = {"zset", "hash", "hash", "hash"};
    for (int i = 0; i < 4; i++) {
        /* one hash tag per subject: every key of a check is in one cluster slot */
        char key[128];
        snprintf(key, sizeof(key), "%s{u:keys}:%d", f->prefix, 30 + i);
        redisReply *r = redisCommand(f->sync, "PTTL %s", key);
        assert_non_null(r);
        if (r->integer <= 0 || r->integer > max_ttl[i])
            fail_msg("%s: PTTL %lld", key, r->integer);
        freeReplyObject(r);
        r = redisCommand(f->sync, "TYPE %s", key);
        assert_string_equal(r->str, type[i]);
        freeReplyObject(r);
    }
    /* nothing else was written for this subject (KEYS: test only, never in the store) */
    redisReply *r = redisCommand(f->sync, "KEYS %s{u:keys}*", f->prefix);
    assert_int_equal(r->elements, 4);
    freeReplyObject(r);
}

/* One EVALSHA per check, however many rules (and no EVAL while the script is cached). */
static void test_one_call_per_check(void **state)
{
    struct fixture *f = *state;
    struct limit_rule rules[3] = {
        {.id = 40, .algorithm = LIMIT_SLIDING_LOG, .rate = 50, .burst = 0, .window_ms = 60000},
        {.id = 41, .algorithm = LIMIT_TOKEN_BUCKET, .rate = 50, .burst = 0, .window_ms = 60000},
        {.id = 42, .algorithm = LIMIT_FIXED_WINDOW, .rate = 50, .burst = 0, .window_ms = 60000},
    };
    long long evalsha = commandstat(f->sync, "evalsha"), eval = commandstat(f->sync, "eval");
    for (int i = 0; i < 10; i++)
        run(f, f->redis, "u:calls", rules, 3, 1000 + i);
    assert_int_equal(commandstat(f->sync, "evalsha") - evalsha, 10);
    assert_int_equal(commandstat(f->sync, "eval") - eval, 0);
}

static void test_noscript_recovery(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 50, .algorithm = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 60000};
    assert_true(run(f, f->redis, "u:ns", &r, 1, 1000).allowed);
    redisReply *rep = redisCommand(f->sync, "SCRIPT FLUSH");
    freeReplyObject(rep);
    /* the script is gone from the server: the check still gets decided (EVAL, once) */
    struct limiter_result res = run(f, f->redis, "u:ns", &r, 1, 1001);
    assert_int_equal(res.status, LIMITER_DECIDED);
    assert_int_equal(res.verdicts[0].remaining, 1);
    res = run(f, f->redis, "u:ns", &r, 1, 1002);
    assert_int_equal(res.status, LIMITER_DECIDED);
    assert_int_equal(res.verdicts[0].remaining, 0);
    assert_true(limiter_available(f->redis));
}

/* Many checks in flight at once (pipelined), and two "proxies" on one Redis: never more
 * than the limit admitted. */
static void test_pipelined_two_limiters(void **state)
{
    struct fixture *f = *state;
    char url[64];
    struct limiter *second = redis_limiter(f, tcp_url(f->srv.port, url, sizeof(url)), f->prefix, 2000);
    assert_true(wait_available(f, second, true, 5000));
    struct limit_rule r = {.id = 60, .algorithm = LIMIT_SLIDING_LOG, .rate = 90, .burst = 10, .window_ms = 60000};
    enum { N = 300 };
    static struct capture c[N];
    memset(c, 0, sizeof(c));
    int calls = 0;
    for (int i = 0; i < N; i++)
        assert_int_equal(limiter_check(i % 2 ? second : f->redis, "u:pipe", 6, &r, 1, -1, on_done, &c[i]), 0);
    int64_t deadline = mono_ms() + 10000;
    while (mono_ms() < deadline) {
        calls = 0;
        for (int i = 0; i < N; i++)
            calls += c[i].calls;
        if (calls == N)
            break;
        event_base_loop(f->base, EVLOOP_ONCE);
    }
    assert_int_equal(calls, N);
    int allowed = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(c[i].calls, 1);
        assert_int_equal(c[i].res.status, LIMITER_DECIDED);
        allowed += c[i].res.allowed;
    }
    assert_int_equal(allowed, 100);
    limiter_destroy(second);
}

static void test_destroy_fails_pending(void **state)
{
    struct fixture *f = *state;
    char url[64];
    struct limiter *l = redis_limiter(f, tcp_url(f->srv.port, url, sizeof(url)), f->prefix, 2000);
    assert_true(wait_available(f, l, true, 5000));
    struct limit_rule r = {.id = 70, .algorithm = LIMIT_FIXED_WINDOW, .rate = 3, .burst = 0, .window_ms = 60000};
    struct capture c[5] = {0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(limiter_check(l, "u:destroy", 9, &r, 1, 1000, on_done, &c[i]), 0);
    limiter_destroy(l);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(c[i].calls, 1);   /* before limiter_destroy returned */
        assert_int_equal(c[i].res.status, LIMITER_UNAVAILABLE);
    }
    /* nothing arrives later */
    int dummy = 0;
    pump(f, &dummy, 1, 200);
    for (int i = 0; i < 5; i++)
        assert_int_equal(c[i].calls, 1);
}

/* ---- faults, each on a redis-server of its own ---- */

static void expect_unavailable_now(struct limiter *l)
{
    struct limit_rule r = {.id = 80, .algorithm = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 60000};
    struct capture c = {0};
    int64_t t = mono_ms();
    assert_int_equal(limiter_check(l, "u:down", 6, &r, 1, -1, on_done, &c), 0);
    /* answered at once: done ran before limiter_check returned */
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.status, LIMITER_UNAVAILABLE);
    assert_true(mono_ms() - t < 1000);
}

static void test_down_and_back(void **state)
{
    struct fixture *f = *state;
    struct server s = {0};
    s.port = pick_port();
    char url[64];
    /* not yet connected (nothing listens): unavailable, without waiting */
    struct limiter *l = redis_limiter(f, tcp_url(s.port, url, sizeof(url)), "down:", 200);
    assert_false(limiter_available(l));
    expect_unavailable_now(l);
    int dummy = 0;
    pump(f, &dummy, 1, 300);   /* a few reconnect attempts fail */
    expect_unavailable_now(l);

    /* redis comes up: decided again within about a second */
    server_start(&s, NULL, false);
    int64_t t = mono_ms();
    assert_true(wait_available(f, l, true, 5000));
    assert_true(mono_ms() - t < 2500);
    struct limit_rule r = {.id = 81, .algorithm = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 60000};
    assert_int_equal(run(f, l, "u:db", &r, 1, -1).status, LIMITER_DECIDED);

    /* killed: noticed, then unavailable at once */
    server_stop(&s);
    struct capture inflight = {0};
    assert_int_equal(limiter_check(l, "u:db", 4, &r, 1, -1, on_done, &inflight), 0);
    pump(f, &inflight.calls, 1, 3000);
    assert_int_equal(inflight.calls, 1);   /* exactly once, decided or not */
    assert_true(wait_available(f, l, false, 3000));
    expect_unavailable_now(l);

    /* restarted on the same port (its data is gone): decided again */
    server_start(&s, NULL, false);
    t = mono_ms();
    assert_true(wait_available(f, l, true, 5000));
    assert_true(mono_ms() - t < 2500);
    struct limiter_result res = run(f, l, "u:db", &r, 1, -1);
    assert_int_equal(res.status, LIMITER_DECIDED);
    assert_int_equal(res.verdicts[0].remaining, 2);
    limiter_destroy(l);
    server_stop(&s);
}

static void test_command_timeout(void **state)
{
    struct fixture *f = *state;
    struct server s = {0};
    server_start(&s, NULL, false);
    char url[64];
    struct limiter *l = redis_limiter(f, tcp_url(s.port, url, sizeof(url)), "slow:", 150);
    assert_true(wait_available(f, l, true, 5000));
    struct limit_rule r = {.id = 90, .algorithm = LIMIT_TOKEN_BUCKET, .rate = 3, .burst = 0, .window_ms = 60000};

    /* a server that stops answering: the check fails after the timeout, not never */
    kill(s.pid, SIGSTOP);
    struct capture c[3] = {0};
    int64_t t = mono_ms();
    for (int i = 0; i < 3; i++)
        assert_int_equal(limiter_check(l, "u:slow", 6, &r, 1, -1, on_done, &c[i]), 0);
    pump(f, &c[2].calls, 1, 5000);
    int64_t took = mono_ms() - t;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(c[i].calls, 1);
        assert_int_equal(c[i].res.status, LIMITER_UNAVAILABLE);
    }
    assert_true(took >= 100 && took < 3000);
    assert_false(limiter_available(l));
    expect_unavailable_now(l);

    /* it answers again: a new connection, decided again */
    kill(s.pid, SIGCONT);
    assert_true(wait_available(f, l, true, 5000));
    assert_int_equal(run(f, l, "u:slow", &r, 1, -1).status, LIMITER_DECIDED);
    for (int i = 0; i < 3; i++)
        assert_int_equal(c[i].calls, 1);   /* the late replies of the dropped connection change nothing */
    limiter_destroy(l);
    server_stop(&s);
}

static void test_auth_select_unix(void **state)
{
    struct fixture *f = *state;
    struct server s = {0};
    server_start(&s, "s3cret", true);
    struct limit_rule r = {.id = 95, .algorithm = LIMIT_FIXED_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000};
    char url[200];

    snprintf(url, sizeof(url), "redis://:s3cret@127.0.0.1:%d/3", s.port);
    struct limiter *l = redis_limiter(f, url, "auth:", 500);
    assert_true(wait_available(f, l, true, 5000));
    assert_int_equal(run(f, l, "u:tcp", &r, 1, -1).status, LIMITER_DECIDED);
    limiter_destroy(l);

    snprintf(url, sizeof(url), "unix://:s3cret@%s?db=3", s.sock);
    l = redis_limiter(f, url, "auth:", 500);
    assert_true(wait_available(f, l, true, 5000));
    assert_int_equal(run(f, l, "u:unix", &r, 1, -1).status, LIMITER_DECIDED);
    limiter_destroy(l);

    /* both landed in database 3 */
    redisContext *c = sync_connect(s.port);
    assert_non_null(c);
    freeReplyObject(redisCommand(c, "AUTH s3cret"));
    freeReplyObject(redisCommand(c, "SELECT 3"));
    redisReply *rep = redisCommand(c, "EXISTS auth:{u:tcp}:95 auth:{u:unix}:95");
    assert_int_equal(rep->integer, 2);
    freeReplyObject(rep);
    redisFree(c);

    /* a wrong password never gets READY: checks are unavailable, at once */
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d/0", s.port);
    l = redis_limiter(f, url, "auth:", 500);
    int dummy = 0;
    pump(f, &dummy, 1, 500);
    assert_false(limiter_available(l));
    expect_unavailable_now(l);
    limiter_destroy(l);

    char err[128];
    struct redis_store_options bad = {.url = "http://nope", .key_prefix = "x:"};
    assert_null(limiter_redis_create(f->base, &bad, err, sizeof(err)));
    assert_true(err[0] != '\0');
    server_stop(&s);
}

int main(void)
{
    const char *bin = getenv("REDIS_SERVER");
    if (bin == NULL || bin[0] == '\0' || access(bin, X_OK) != 0) {
        fprintf(stderr, "redis-server not found (REDIS_SERVER): skipped\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);   /* writes to a killed server */
#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)
    const struct CMUnitTest tests[] = {
        T(test_same_sliding_log),
        T(test_same_sliding_window),
        T(test_same_token_bucket),
        T(test_same_fixed_window),
        T(test_same_mixed),
        T(test_same_rule_changes),
        T(test_sliding_log_exact),
        T(test_other_algorithms_exact),
        T(test_rejected_writes_nothing),
        T(test_keys_and_expiry),
        T(test_one_call_per_check),
        T(test_noscript_recovery),
        T(test_pipelined_two_limiters),
        T(test_destroy_fails_pending),
        T(test_down_and_back),
        T(test_command_timeout),
        T(test_auth_select_unix),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
