/* Unit tests for store/redis/limiter_redis.c and store/redis/check.lua, against a real redis-server
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

#include "store/clock.h"
#include "store/limiter_impl.h"

/* ---- redis-server as a child process ---- */

struct server {
    pid_t pid;
    int port;
    char sock[108];
};

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
    struct server aux;           /* a test's own server: stopped by the teardown if it fails */
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
    int64_t deadline = store_mono_ms() + max_ms;
    while (*calls < want && store_mono_ms() < deadline)
        event_base_loop(f->base, EVLOOP_ONCE);
}

static bool wait_available(struct fixture *f, struct limiter *l, bool want, int64_t max_ms)
{
    int64_t deadline = store_mono_ms() + max_ms;
    while (limiter_available(l) != want && store_mono_ms() < deadline)
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
    server_stop(&f->aux);
    memset(&f->aux, 0, sizeof(f->aux));
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
            fprintf(stderr, " id%" PRId64 "/a%d/c%" PRId64 "/w%" PRId64 "/k%" PRId64 " m[%d %" PRId64 " %" PRId64 "] r[%d %" PRId64 " %" PRId64 "]",
                    rules[i].id, rules[i].kind, rules[i].rate + rules[i].burst, rules[i].window_ms, rules[i].cost,
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
/* A request's cost, the same for every rule of the check (as the proxy sends it): 1 most
 * of the time, else up to the smallest capacity of the rules (cost 0 means 1). */
static void set_cost(struct limit_rule *rules, size_t n, bool weighted)
{
    int64_t cap = INT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (rules[i].rate + rules[i].burst < cap)
            cap = rules[i].rate + rules[i].burst;
    int64_t cost = weighted && rand() % 2 ? 1 + rand() % cap : rand() % 2;
    for (size_t i = 0; i < n; i++)
        rules[i].cost = cost;
}

static void random_walk_costs(struct fixture *f, int alg, unsigned seed, int steps, bool weighted);

static void random_walk(struct fixture *f, int alg, unsigned seed, int steps)
{
    random_walk_costs(f, alg, seed, steps, false);
}

static void random_walk_costs(struct fixture *f, int alg, unsigned seed, int steps, bool weighted)
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
                .kind = (enum limit_kind)(alg >= 0 ? alg : rand() % 4),
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
        set_cost(pick, n, weighted);
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
static void test_same_sliding_log_costs(void **state) { random_walk_costs(*state, LIMIT_SLIDING_LOG, 6, 300, true); }
static void test_same_sliding_window_costs(void **state) { random_walk_costs(*state, LIMIT_SLIDING_WINDOW, 7, 300, true); }
static void test_same_token_bucket_costs(void **state) { random_walk_costs(*state, LIMIT_TOKEN_BUCKET, 8, 300, true); }
static void test_same_fixed_window_costs(void **state) { random_walk_costs(*state, LIMIT_FIXED_WINDOW, 9, 300, true); }
static void test_same_mixed_costs(void **state) { random_walk_costs(*state, -1, 10, 400, true); }

/* A rule id whose algorithm or window changes (catalog edit): the old state, even of
 * another Redis type, is treated as empty by both stores alike. */
static void test_same_rule_changes(void **state)
{
    struct fixture *f = *state;
    int64_t now = 5000000;
    for (int k = 0; k < 12; k++) {
        struct limit_rule r = {.id = 9, .kind = (enum limit_kind)(k % 4), .rate = 2, .burst = k % 2,
                               .window_ms = k < 4 ? 60000 : 120000};
        struct limit_rule other = {.id = 10, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .window_ms = 60000};
        struct limit_rule pair[2] = {r, other};
        for (int i = 0; i < 4; i++) {
            both(f, "u:change", &r, 1, now);
            both(f, "u:change", pair, 2, now);
            now += 7000;
        }
    }
}

/* Sliding logs longer than the times check.lua keeps in the list's tail (8), so that it
 * reads on in the list: same-millisecond bursts, a clock that goes back, and catalog edits
 * of a rule (its rate or window changes; a log carries over under a new window). */
/* How the requests of sliding_log_long cost: all 1, a mix (mostly light), or a unit of
 * the subject's (2 or 3) that now and then changes, with a request of another cost here and
 * there: logs of one unit, and their passage to and from the weighted layout. */
enum walk_costs { COSTS_ONE, COSTS_MIXED, COSTS_UNIT };

static void sliding_log_long(struct fixture *f, unsigned seed, enum walk_costs costs)
{
    if (getenv("SEED"))
        seed += (unsigned)strtoul(getenv("SEED"), NULL, 10) * 1000;
    srand(seed);
    static const int64_t windows[] = {60000, 90000, 120000};
    struct limit_rule rules[2][3];
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < 3; j++)
            rules[s][j] = (struct limit_rule){.id = 300 + j, .kind = LIMIT_SLIDING_LOG, .rate = 1 + rand() % 40,
                                              .burst = rand() % 3, .window_ms = windows[rand() % 3]};
    int64_t now = 1700000000000 + rand() % 100000;
    int64_t unit[2] = {2, 3};
    for (int i = 0; i < 700; i++) {
        int r = rand() % 20;
        if (r < 5)
            ;
        else if (r < 17)
            now += rand() % 4000;
        else if (r < 19)
            now += rand() % 150000;
        else
            now -= rand() % 30000;
        int s = rand() % 2;
        if (rand() % 60 == 0) {   /* a catalog edit */
            struct limit_rule *e = &rules[s][rand() % 3];
            if (rand() % 2)
                e->window_ms = windows[rand() % 3];
            else
                e->rate = 1 + rand() % 40;
        }
        struct limit_rule pick[3];
        size_t n = 0;
        int mask = 1 + rand() % 7;
        for (int j = 0; j < 3; j++)
            if (mask & (1 << j))
                pick[n++] = rules[s][j];
        char subject[16];
        snprintf(subject, sizeof(subject), "u:L%d", s);
        int reps = rand() % 10 == 0 ? 2 + rand() % 20 : 1;   /* a burst in one millisecond */
        if (costs == COSTS_UNIT && rand() % 80 == 0)
            unit[s] = 2 + rand() % 2;
        for (int k = 0; k < reps; k++) {
            if (costs == COSTS_UNIT) {
                int64_t cost = rand() % 25 == 0 ? 1 + rand() % 4 : unit[s];
                for (size_t x = 0; x < n; x++)
                    pick[x].cost = cost;
            } else {
                /* mixed: mostly light requests, so that logs stay long */
                set_cost(pick, n, costs == COSTS_MIXED && rand() % 3 == 0);
            }
            both(f, subject, pick, n, now);
        }
    }
}

static void test_same_sliding_log_long(void **state) { sliding_log_long(*state, 11, COSTS_ONE); }

/* The same with weighted requests: the running totals in the tail, past it (LRANGE), and
 * the search for the entry a rejected request waits for (LINDEX). */
static void test_same_sliding_log_long_costs(void **state) { sliding_log_long(*state, 12, COSTS_MIXED); }

/* The same where a subject's requests mostly cost one unit (2 or 3): logs of one unit, long
 * ones read on past their tail, the entry a rejected request waits for, and the passage to
 * running totals and back. */
static void test_same_sliding_log_long_unit_costs(void **state) { sliding_log_long(*state, 13, COSTS_UNIT); }

/* Several requests in one millisecond, then the window shrinks: every one of them is still
 * counted (the sorted-set layout before lost one: two "<ms>:<count before>" members met). */
static void test_sliding_log_window_shrinks(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 310, .kind = LIMIT_SLIDING_LOG, .rate = 10, .burst = 0, .window_ms = 180000};
    int64_t t = 1700000663333;
    both(f, "u:shrink", &r, 1, t - 120000);
    both(f, "u:shrink", &r, 1, t - 2000);
    for (int i = 0; i < 3; i++)
        both(f, "u:shrink", &r, 1, t);
    r.window_ms = 60000;
    struct limiter_result res = both(f, "u:shrink", &r, 1, t);
    assert_int_equal(res.verdicts[0].remaining, 10 - 5);
    res = both(f, "u:shrink", &r, 1, t);
    assert_int_equal(res.verdicts[0].remaining, 10 - 6);
}

/* The rule's limit is lowered under a long log: a rejected request's wait comes from an
 * entry past the times kept in the tail. */
static void test_sliding_log_limit_lowered(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 311, .kind = LIMIT_SLIDING_LOG, .rate = 30, .burst = 0, .window_ms = 60000};
    int64_t t0 = 1700000000000;
    for (int i = 0; i < 25; i++)
        assert_true(both(f, "u:lower", &r, 1, t0 + 1000 * i).allowed);
    r.rate = 5;
    struct limiter_result res = both(f, "u:lower", &r, 1, t0 + 30000);
    assert_false(res.allowed);
    /* allowed again when all but 4 of the 25 left: the 21st oldest, at t0 + 20000 */
    assert_int_equal(res.verdicts[0].reset_ms, 20000 + 60000 - 30000);
    for (int64_t t = t0 + 60000; t < t0 + 90000; t += 700)
        both(f, "u:lower", &r, 1, t);
}

static redisReply *cmd_ok(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("%s", r->str);
    return r;
}

/* A log kept in the layout before (a sorted set: score = ms, member = "<ms>:<count before>",
 * TTL w) is read as the log it is, and rewritten as a list by the next admitted request,
 * weighted or not. */
static void test_sliding_log_old_layout(void **state)
{
    struct fixture *f = *state;
    /* list (either layout) -> sorted set holding the log's live entries (those after the
     * dead ones) */
    static const char to_zset[] =
        "local r = redis.call('LRANGE', KEYS[1], 0, -1) "
        "local h, w, dead "
        "if string.byte(r[#r], 1) == 1 then h = {struct.unpack('>xI7I7I7I7', r[#r])} w, dead = h[2], h[4] "
        "else h = {struct.unpack('>xI7I7I7I7I7', r[#r])} w, dead = h[3], h[5] end "
        "redis.call('DEL', KEYS[1]) "
        "for i = dead + 1, #r do local t = struct.unpack('>xI7', r[i]) "
        "  redis.call('ZADD', KEYS[1], string.format('%d', t), string.format('%d:%d', t, i - dead - 1)) end "
        "redis.call('PEXPIRE', KEYS[1], w) "
        "return #r - dead";
    struct limit_rule pair[2] = {
        {.id = 320, .kind = LIMIT_SLIDING_LOG, .rate = 12, .burst = 2, .window_ms = 60000},
        {.id = 321, .kind = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 90000},
    };
    srand(21);
    int64_t now = 1700000000000;
    for (int round = 0; round < 6; round++) {
        for (int i = 0; i < 40; i++) {
            now += rand() % 5000;
            both(f, "u:old", &pair[rand() % 2], 1, now);
            if (rand() % 8 == 0)
                both(f, "u:old", pair, 2, now);
        }
        for (int j = 0; j < 2; j++) {
            char key[128];
            snprintf(key, sizeof(key), "%s{u:old}:%lld", f->prefix, (long long)pair[j].id);
            freeReplyObject(cmd_ok(f->sync, "EVAL %s 1 %s", to_zset, key));
            redisReply *r = cmd_ok(f->sync, "TYPE %s", key);
            assert_string_equal(r->str, "zset");
            freeReplyObject(r);
        }
        if (round == 3)
            pair[0].window_ms = 30000;   /* and read under another window */
    }
    /* the sorted set holds weight-1 entries only; the next requests weigh 2 (rule 321's
     * log is rewritten with running totals) */
    pair[0].cost = pair[1].cost = 2;
    both(f, "u:old", &pair[1], 1, now);
    both(f, "u:old", &pair[1], 1, now + 1);
    char key[128];
    snprintf(key, sizeof(key), "%s{u:old}:320", f->prefix);
    while (!both(f, "u:old", &pair[0], 1, now).allowed)
        now += 1000;
    for (int i = 0; i < 20; i++)
        both(f, "u:old", pair, 2, now += 1500);
    redisReply *r = cmd_ok(f->sync, "TYPE %s", key);
    assert_string_equal(r->str, "list");
    freeReplyObject(r);
}

/* A sliding-log key holding something else (a string, another list, a hash) is empty to
 * both stores, and replaced by the first admitted request. */
static void test_sliding_log_stale_types(void **state)
{
    struct fixture *f = *state;
    static const char *const writes[] = {"SET %s{u:st%d}:330 x", "RPUSH %s{u:st%d}:330 a b c", "HSET %s{u:st%d}:330 a 0:60000"};
    struct limit_rule r = {.id = 330, .kind = LIMIT_SLIDING_LOG, .rate = 2, .burst = 0, .window_ms = 60000};
    for (int i = 0; i < 3; i++) {
        freeReplyObject(cmd_ok(f->sync, writes[i], f->prefix, i));
        char subject[16];
        snprintf(subject, sizeof(subject), "u:st%d", i);
        struct limit_rule other = {.id = 331, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .window_ms = 60000};
        struct limit_rule pair[2] = {r, other};
        both(f, subject, pair, 2, 1000000);
        assert_false(both(f, subject, pair, 2, 1000001).allowed);   /* the fixed window rejects */
        for (int k = 0; k < 3; k++)
            both(f, subject, &r, 1, 1000002 + k);
        redisReply *t = cmd_ok(f->sync, "TYPE %s{%s}:330", f->prefix, subject);
        assert_string_equal(t->str, "list");
        freeReplyObject(t);
    }
}

/* ---- exact numbers, asserted on both stores ---- */

static void test_sliding_log_exact(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 2, .burst = 1, .window_ms = 60000};
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
    /* several requests in one millisecond are each counted (one list entry each) */
    struct limit_rule big = {.id = 2, .kind = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000};
    for (int i = 0; i < 5; i++)
        assert_true(both(f, "u:samems", &big, 1, t0).allowed);
    assert_false(both(f, "u:samems", &big, 1, t0).allowed);
    char key[128];
    snprintf(key, sizeof(key), "%s{u:samems}:2", f->prefix);
    redisReply *rep = redisCommand(f->sync, "LLEN %s", key);   /* one list entry each */
    assert_non_null(rep);
    assert_int_equal(rep->integer, 5);
    freeReplyObject(rep);
}

static void test_other_algorithms_exact(void **state)
{
    struct fixture *f = *state;
    /* token bucket: 2 per minute + burst 2: capacity 4, one token every 30 s */
    struct limit_rule tb = {.id = 3, .kind = LIMIT_TOKEN_BUCKET, .rate = 2, .burst = 2, .window_ms = 60000};
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
    struct limit_rule fw = {.id = 4, .kind = LIMIT_FIXED_WINDOW, .rate = 2, .burst = 0, .window_ms = 60000};
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
    struct limit_rule sw = {.id = 5, .kind = LIMIT_SLIDING_WINDOW, .rate = 4, .burst = 0, .window_ms = 60000};
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
    static const char *const cmds[] = {"zadd", "zremrangebyscore", "hset", "pexpire", "del", "rpush", "ltrim"};
    long long total = 0;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        total += commandstat(c, cmds[i]);
    return total;
}

/* The server's clock, a short window: the key's TTL is set at the first request of each
 * window-aligned period only, and still outlives the newest entry by at least the window. */
static void test_sliding_log_ttl_real_clock(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 340, .kind = LIMIT_SLIDING_LOG, .rate = 1000, .burst = 0, .window_ms = 300};
    char key[128];
    snprintf(key, sizeof(key), "%s{u:ttl}:340", f->prefix);
    long long pexpire = commandstat(f->sync, "pexpire");
    int64_t end = store_mono_ms() + 1500;
    int n = 0;
    while (store_mono_ms() < end) {
        struct limiter_result res = run(f, f->redis, "u:ttl", &r, 1, -1);
        assert_true(res.allowed);
        n++;
        redisReply *t = cmd_ok(f->sync, "PTTL %s", key);
        if (t->integer < 300 - 10 || t->integer > 600)   /* 10 ms: the round trip to read it */
            fail_msg("request %d: PTTL %lld", n, t->integer);
        freeReplyObject(t);
        usleep(7000);
    }
    long long sets = commandstat(f->sync, "pexpire") - pexpire;
    if (n < 50 || sets > 1500 / 300 + 2)
        fail_msg("%d requests, %lld PEXPIRE", n, sets);
}

/* A sliding log's window grows (tierctl changed the limit in place) while its subject is
 * rejected: the rejected check makes the key live for the new window, so the requests in
 * it still count once the old TTL (2 old windows) has passed. A second limiter makes the
 * last check: the first one remembers its rejection. (Memory store:
 * test_sliding_log_window_grows.) */
static void test_sliding_log_window_grows_ttl(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 341, .kind = LIMIT_SLIDING_LOG, .rate = 2, .burst = 0, .window_ms = 200};
    assert_true(run(f, f->redis, "u:grow", &r, 1, -1).allowed);
    assert_true(run(f, f->redis, "u:grow", &r, 1, -1).allowed);
    r.window_ms = 5000;
    assert_false(run(f, f->redis, "u:grow", &r, 1, -1).allowed);
    usleep(700 * 1000);   /* past the old TTL, 2 x 200 ms */
    char url[64];
    struct limiter *other = redis_limiter(f, tcp_url(f->srv.port, url, sizeof(url)), f->prefix, 2000);
    assert_true(wait_available(f, other, true, 5000));
    assert_false(run(f, other, "u:grow", &r, 1, -1).allowed);
    limiter_destroy(other);
}

/* ---- quotas and costs ---- */

#define DAY_MS 86400000LL

/* Quotas of every period with rate rules beside them, on both stores, from just before a
 * calendar edge over the next days: time mostly moves minutes, sometimes hours, now and
 * then steps back; costs vary. */
static void quota_walk_of(struct fixture *f, unsigned seed, int64_t start, int steps, int rate_kind)
{
    if (getenv("SEED"))
        seed += (unsigned)strtoul(getenv("SEED"), NULL, 10) * 1000;
    srand(seed);
    struct limit_rule rules[2][4];
    for (int s = 0; s < 2; s++) {
        for (int j = 0; j < 3; j++)
            rules[s][j] = (struct limit_rule){.id = 400 + j, .kind = LIMIT_QUOTA, .rate = 3 + rand() % 30,
                                              .period = (enum limit_period)(1 + (j + s) % 3)};
        rules[s][3] = (struct limit_rule){.id = 403, .kind = (enum limit_kind)(rand() % 4), .rate = 5 + rand() % 10,
                                          .burst = rand() % 3, .window_ms = 60000 * (1 + rand() % 3)};
        if (rate_kind >= 0)
            rules[s][3].kind = (enum limit_kind)rate_kind;
    }
    int64_t now = start;
    for (int i = 0; i < steps; i++) {
        int r = rand() % 20;
        if (r < 4)
            ;
        else if (r < 16)
            now += rand() % 900000;            /* up to 15 min */
        else if (r < 19)
            now += rand() % (10 * 3600000);    /* up to 10 h */
        else
            now -= rand() % 30000;             /* the clock goes back, across an edge sometimes */
        int s = rand() % 2;
        struct limit_rule pick[4];
        size_t n = 0;
        int mask = 1 + rand() % 15;
        for (int j = 0; j < 4; j++)
            if (mask & (1 << j))
                pick[n++] = rules[s][j];
        set_cost(pick, n, true);
        char subject[16];
        snprintf(subject, sizeof(subject), "u:Q%d", s);
        both(f, subject, pick, n, now);
    }
}

static void quota_walk(struct fixture *f, unsigned seed, int64_t start, int steps)
{
    quota_walk_of(f, seed, start, steps, -1);
}

/* 2027-01-31 21:00 UTC: the end of a month (and of a day, and Sunday 01-31: of a week). */
static void test_same_quota_month_end(void **state) { quota_walk(*state, 31, 1801440000000 - 3 * 3600000, 300); }
/* 2028-02-27 20:00 UTC: 02-28, the leap day, 03-01. */
static void test_same_quota_leap_day(void **state) { quota_walk(*state, 32, 1835308800000 - 4 * 3600000, 400); }
/* 2027-01-10 (a Sunday) 18:00 UTC: into Monday's new week. */
static void test_same_quota_week(void **state) { quota_walk(*state, 33, 1799625600000 - 6 * 3600000, 300); }

/* A sliding log beside the quotas: the script's short way (the log's tail and one HINCRBY
 * per quota, undone when a quota goes over or its period starts), over the same edges. */
static void test_same_quota_sliding_log_month_end(void **state)
{
    quota_walk_of(*state, 34, 1801440000000 - 3 * 3600000, 400, LIMIT_SLIDING_LOG);
}
static void test_same_quota_sliding_log_leap_day(void **state)
{
    quota_walk_of(*state, 35, 1835308800000 - 4 * 3600000, 400, LIMIT_SLIDING_LOG);
}
static void test_same_quota_sliding_log_week(void **state)
{
    quota_walk_of(*state, 36, 1799625600000 - 6 * 3600000, 400, LIMIT_SLIDING_LOG);
}

static void expect_verdict_of(const struct limiter_result *res, size_t i, bool allowed, int64_t limit,
                              int64_t remaining, int64_t reset_ms)
{
    const struct limit_verdict *v = &res->verdicts[i];
    if (v->allowed != allowed || v->limit != limit || v->remaining != remaining || v->reset_ms != reset_ms)
        fail_msg("rule %zu: [%d %lld %lld %lld], want [%d %lld %lld %lld]", i, v->allowed, (long long)v->limit,
                 (long long)v->remaining, (long long)v->reset_ms, allowed, (long long)limit, (long long)remaining,
                 (long long)reset_ms);
}

/* A monthly quota at the end of January 2027 (28 days in February). */
static void test_quota_month_end_exact(void **state)
{
    struct fixture *f = *state;
    const int64_t feb1 = 1801440000000, mar1 = 1803859200000;
    struct limit_rule q = {.id = 410, .kind = LIMIT_QUOTA, .rate = 3, .period = LIMIT_PERIOD_MONTH};
    struct limiter_result res = both(f, "u:qm", &q, 1, feb1 - 10 * DAY_MS);
    expect_verdict_of(&res, 0, true, 3, 2, 10 * DAY_MS);
    q.cost = 2;
    res = both(f, "u:qm", &q, 1, feb1 - 1000);
    expect_verdict_of(&res, 0, true, 3, 0, 1000);
    q.cost = 0;
    res = both(f, "u:qm", &q, 1, feb1 - 1);   /* over it: Retry-After to the month's end */
    assert_false(res.allowed);
    expect_verdict_of(&res, 0, false, 3, 0, 1);
    res = both(f, "u:qm", &q, 1, feb1);       /* February starts from 0 */
    expect_verdict_of(&res, 0, true, 3, 2, mar1 - feb1);
    q.cost = 3;                               /* 1 used: a request of 3 waits for March */
    res = both(f, "u:qm", &q, 1, feb1 + 5);
    expect_verdict_of(&res, 0, false, 3, 0, mar1 - feb1 - 5);
    q.cost = 2;
    res = both(f, "u:qm", &q, 1, feb1 + 6);
    expect_verdict_of(&res, 0, true, 3, 0, mar1 - feb1 - 6);
}

/* Daily and monthly quotas over 2028-02-28 -> the leap day -> 03-01. */
static void test_quota_leap_day_exact(void **state)
{
    struct fixture *f = *state;
    const int64_t feb1 = 1832976000000, feb28 = 1835308800000, feb29 = 1835395200000, mar1 = 1835481600000;
    struct limit_rule q[2] = {
        {.id = 420, .kind = LIMIT_QUOTA, .rate = 2, .period = LIMIT_PERIOD_DAY},
        {.id = 421, .kind = LIMIT_QUOTA, .rate = 5, .period = LIMIT_PERIOD_MONTH},
    };
    assert_true(feb29 - feb1 == 28 * DAY_MS && mar1 - feb29 == DAY_MS);
    both(f, "u:ql", q, 2, feb29 - 2000);
    struct limiter_result res = both(f, "u:ql", q, 2, feb29 - 1);
    expect_verdict_of(&res, 0, true, 2, 0, 1);
    expect_verdict_of(&res, 1, true, 5, 3, mar1 - feb29 + 1);
    res = both(f, "u:ql", q, 2, feb29 - 1);   /* the day's quota is spent; the month's is not */
    assert_false(res.allowed);
    expect_verdict_of(&res, 0, false, 2, 0, 1);
    expect_verdict_of(&res, 1, true, 5, 3, mar1 - feb29 + 1);
    res = both(f, "u:ql", q, 2, feb29);       /* the leap day: a new day, the same month */
    expect_verdict_of(&res, 0, true, 2, 1, DAY_MS);
    expect_verdict_of(&res, 1, true, 5, 2, DAY_MS);
    both(f, "u:ql", q, 2, feb29 + 1);
    both(f, "u:ql", q, 2, mar1 - 1);          /* the leap day's quota is spent */
    res = both(f, "u:ql", q, 2, mar1 - 1);
    assert_false(res.allowed);
    expect_verdict_of(&res, 0, false, 2, 0, 1);
    res = both(f, "u:ql", q, 2, mar1);        /* March: both start over */
    expect_verdict_of(&res, 0, true, 2, 1, DAY_MS);
    expect_verdict_of(&res, 1, true, 5, 4, 31 * DAY_MS);
    (void)feb28;
}

/* A weekly quota: Sunday 23:59:59.999 is the old week, Monday 00:00 UTC the new one. */
static void test_quota_week_exact(void **state)
{
    struct fixture *f = *state;
    const int64_t mon = 1799625600000;   /* Monday 2027-01-11 */
    struct limit_rule q = {.id = 430, .kind = LIMIT_QUOTA, .rate = 4, .period = LIMIT_PERIOD_WEEK, .cost = 4};
    struct limiter_result res = both(f, "u:qw", &q, 1, mon - 6 * DAY_MS);   /* Tuesday */
    expect_verdict_of(&res, 0, true, 4, 0, 6 * DAY_MS);
    q.cost = 1;
    res = both(f, "u:qw", &q, 1, mon - 1);
    expect_verdict_of(&res, 0, false, 4, 0, 1);
    res = both(f, "u:qw", &q, 1, mon);
    expect_verdict_of(&res, 0, true, 4, 3, 7 * DAY_MS);
}

/* A cost-10 request under 100 per minute: exactly 10 are admitted, by every algorithm and
 * a quota of 100 a day, and the 11th waits for what the first one used. */
static void test_cost_ten_under_hundred(void **state)
{
    struct fixture *f = *state;
    const int64_t t0 = 1800000000000;   /* a multiple of the minute: a window starts there */
    for (int kind = LIMIT_SLIDING_LOG; kind <= LIMIT_QUOTA; kind++) {
        if (kind == LIMIT_CONCURRENCY)
            continue;
        struct limit_rule r = {.id = 440 + kind, .kind = (enum limit_kind)kind, .rate = 100, .window_ms = 60000,
                               .cost = 10};
        if (kind == LIMIT_QUOTA)
            r.period = LIMIT_PERIOD_DAY;
        char subject[16];
        snprintf(subject, sizeof(subject), "u:c10-%d", kind);
        int admitted = 0;
        for (int i = 0; i < 15; i++) {
            struct limiter_result res = both(f, subject, &r, 1, t0);   /* one ms: no refill */
            if (res.allowed) {
                admitted++;
                assert_int_equal(res.verdicts[0].remaining, 100 - 10 * admitted);
            } else {
                assert_int_equal(res.verdicts[0].remaining, 0);
            }
        }
        if (admitted != 10)
            fail_msg("%s: %d cost-10 requests admitted under 100", limit_kind_name(r.kind), admitted);
        struct limiter_result res = both(f, subject, &r, 1, t0 + 1500);
        assert_false(res.allowed);
        /* how long until 10 units are free again */
        static const int64_t wait[] = {
            [LIMIT_SLIDING_LOG] = 60000 - 1500,        /* the first entry (10 units) leaves */
            /* the next window, once 100 * (w - e) + 9 * w < 100 * w: e > 5400 */
            [LIMIT_SLIDING_WINDOW] = 60000 - 1500 + 5401,
            /* a token every 600 ms: 10 of them 6 s after t0 */
            [LIMIT_TOKEN_BUCKET] = 6000 - 1500,
            [LIMIT_FIXED_WINDOW] = 60000 - 1500,
            [LIMIT_QUOTA] = DAY_MS - (t0 % DAY_MS) - 1500,
        };
        if (res.verdicts[0].reset_ms != wait[kind])
            fail_msg("%s: reset %lld, want %lld", limit_kind_name(r.kind), (long long)res.verdicts[0].reset_ms,
                     (long long)wait[kind]);
        /* a cost-1 request is another question: the bucket has 2.5 tokens for it */
        r.cost = 1;
        assert_int_equal(both(f, subject, &r, 1, t0 + 1500).allowed, kind == LIMIT_TOKEN_BUCKET);
    }
}

/* A long weighted log: a rejected request waits for an entry far past the ones the tail
 * knows (found by running total), and checks after many entries expired read on past
 * them (gallop and bisect by time), on both stores alike. */
static void test_sliding_log_weighted_deep(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 480, .kind = LIMIT_SLIDING_LOG, .rate = 300, .window_ms = 60000};
    const int64_t t0 = 1800000000000;
    int64_t used = 0;
    for (int i = 0; i < 100; i++) {
        r.cost = 1 + i % 3;
        used += r.cost;
        assert_true(both(f, "u:deep", &r, 1, t0 + 100 * i).allowed);
    }
    assert_int_equal(used, 199);
    long long lindex = commandstat(f->sync, "lindex");
    int checks = 0;
    for (int64_t cost = 102; cost <= 300; cost += 7) {   /* waits for entries all over the log */
        r.cost = cost;
        struct limiter_result res = both(f, "u:deep", &r, 1, t0 + 10000);
        assert_false(res.allowed);
        checks++;
    }
    /* one LINDEX for the tail per check, the others searched the log */
    long long searched = commandstat(f->sync, "lindex") - lindex - checks;
    if (searched < 3 * checks)
        fail_msg("%lld LINDEX beyond the tails for %d rejections", searched, checks);
    srand(48);
    int64_t now = t0 + 60000 + 3050;   /* 31 entries have left: past the known ones */
    for (int i = 0; i < 200; i++) {
        r.cost = rand() % 4 == 0 ? 1 + rand() % 300 : 1 + rand() % 3;
        both(f, "u:deep", &r, 1, now);
        now += rand() % 700;
    }
}

static size_t tail_len(struct fixture *f, const char *key)
{
    redisReply *r = cmd_ok(f->sync, "LINDEX %s -1", key);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    size_t len = r->len;
    freeReplyObject(r);
    return len;
}

static long long list_len(struct fixture *f, const char *key)
{
    redisReply *r = cmd_ok(f->sync, "LLEN %s", key);
    long long len = r->integer;
    freeReplyObject(r);
    return len;
}

/* A log of cost-1 requests keeps the unweighted layout (86-byte entries, the layout of
 * the proxies before costs); the first heavier request rewrites it with running totals
 * (156-byte tail); once that one has left the window, a cost-1 request makes it
 * unweighted again. */
static void test_sliding_log_layouts(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 490, .kind = LIMIT_SLIDING_LOG, .rate = 10, .window_ms = 60000};
    const int64_t t0 = 1800000000000;
    char key[128];
    snprintf(key, sizeof(key), "%s{u:lay}:490", f->prefix);
    for (int i = 0; i < 3; i++)
        both(f, "u:lay", &r, 1, t0 + i);
    assert_int_equal(tail_len(f, key), 86);
    r.cost = 2;
    struct limiter_result res = both(f, "u:lay", &r, 1, t0 + 10);
    expect_verdict_of(&res, 0, true, 10, 5, 60000 - 10);
    assert_int_equal(tail_len(f, key), 156);
    assert_int_equal(list_len(f, key), 4);   /* the 3 rewritten, and the new one */
    r.cost = 1;
    res = both(f, "u:lay", &r, 1, t0 + 20);  /* the 2 is still in the window */
    expect_verdict_of(&res, 0, true, 10, 4, 60000 - 20);
    assert_int_equal(tail_len(f, key), 156);
    res = both(f, "u:lay", &r, 1, t0 + 60010);   /* it left: unweighted again */
    expect_verdict_of(&res, 0, true, 10, 8, 10);
    assert_int_equal(tail_len(f, key), 86);
    for (int i = 0; i < 12; i++)
        both(f, "u:lay", &r, 1, t0 + 60020 + i);
}

/* A route whose requests all cost 3: the log keeps one unit (93-byte tail, no running
 * totals) and counts 3 a request; a rejected one waits for the entry that frees enough
 * units. A request of another cost rewrites it with running totals; once the log is empty
 * it takes the unit of the request it admits. */
static void test_sliding_log_unit_layout(void **state)
{
    struct fixture *f = *state;
    struct limit_rule r = {.id = 491, .kind = LIMIT_SLIDING_LOG, .rate = 10, .window_ms = 60000, .cost = 3};
    const int64_t t0 = 1800000000000;
    char key[128];
    snprintf(key, sizeof(key), "%s{u:unit}:491", f->prefix);
    struct limiter_result res;
    for (int i = 0; i < 3; i++) {
        res = both(f, "u:unit", &r, 1, t0 + 100 * i);
        expect_verdict_of(&res, 0, true, 10, 10 - 3 * (i + 1), 60000 - 100 * i);
    }
    assert_int_equal(tail_len(f, key), 93);
    res = both(f, "u:unit", &r, 1, t0 + 1000);    /* 9 + 3 > 10: the first entry frees 3 */
    expect_verdict_of(&res, 0, false, 10, 0, 59000);
    r.cost = 1;
    res = both(f, "u:unit", &r, 1, t0 + 1000);    /* 9 + 1 fits: running totals from here */
    expect_verdict_of(&res, 0, true, 10, 0, 59000);
    assert_int_equal(tail_len(f, key), 156);
    assert_int_equal(list_len(f, key), 4);        /* the 3 rewritten, and the new one */
    r.cost = 2;
    res = both(f, "u:unit", &r, 1, t0 + 60050);   /* the first left: 7 used, 2 more fit */
    expect_verdict_of(&res, 0, true, 10, 1, 50);
    assert_int_equal(tail_len(f, key), 156);
    res = both(f, "u:unit", &r, 1, t0 + 130000);  /* every entry left: unit 2 */
    expect_verdict_of(&res, 0, true, 10, 8, 60000);
    assert_int_equal(tail_len(f, key), 93);
    for (int i = 0; i < 6; i++)                   /* 4 more fit, then it waits for the first */
        both(f, "u:unit", &r, 1, t0 + 130010 + i);
    res = both(f, "u:unit", &r, 1, t0 + 130020);
    expect_verdict_of(&res, 0, false, 10, 0, 59980);
}

/* A rejected check adds nothing to any rule, costs and quotas included. */
static void test_cost_rejected_adds_nothing(void **state)
{
    struct fixture *f = *state;
    const int64_t t0 = 1800000000000;
    struct limit_rule rules[3] = {
        {.id = 450, .kind = LIMIT_SLIDING_LOG, .rate = 100, .window_ms = 60000},
        {.id = 451, .kind = LIMIT_QUOTA, .rate = 120, .period = LIMIT_PERIOD_DAY},
        {.id = 452, .kind = LIMIT_TOKEN_BUCKET, .rate = 100, .window_ms = 60000},
    };
    for (int i = 0; i < 9; i++) {
        for (int j = 0; j < 3; j++)
            rules[j].cost = 10;
        assert_true(both(f, "u:rej-c", rules, 3, t0 + i).allowed);
    }
    long long before = writes(f->sync);
    for (int j = 0; j < 3; j++)
        rules[j].cost = 20;   /* 90 + 20 > 100: the log and the bucket reject, the quota would allow */
    struct limiter_result res = both(f, "u:rej-c", rules, 3, t0 + 10);
    assert_false(res.allowed);
    expect_verdict_of(&res, 0, false, 100, 0, 60000 - 10);
    expect_verdict_of(&res, 1, true, 120, 30, DAY_MS - (t0 % DAY_MS) - 10);
    assert_false(res.verdicts[2].allowed);
    assert_int_equal(writes(f->sync), before);   /* not one write command on Redis */
    for (int j = 0; j < 3; j++)
        rules[j].cost = 10;   /* the 20 counted nowhere: 10 more fit everywhere */
    res = both(f, "u:rej-c", rules, 3, t0 + 11);
    assert_true(res.allowed);
    expect_verdict_of(&res, 0, true, 100, 0, 60000 - 11);
    expect_verdict_of(&res, 1, true, 120, 20, DAY_MS - (t0 % DAY_MS) - 11);
    /* the quota alone rejects a request the others would admit */
    struct limit_rule pair[2] = {rules[1], {.id = 453, .kind = LIMIT_FIXED_WINDOW, .rate = 50, .window_ms = 60000}};
    pair[0].cost = pair[1].cost = 21;
    before = writes(f->sync);
    res = both(f, "u:rej-c", pair, 2, t0 + 12);
    assert_false(res.allowed);
    expect_verdict_of(&res, 1, true, 50, 50, 0);
    assert_int_equal(writes(f->sync), before);
}

static struct limiter_result run_peek(struct fixture *f, struct limiter *l, const char *subject,
                                      const struct limit_rule *rules, size_t n, int64_t now)
{
    struct capture c = {0};
    assert_int_equal(limiter_peek(l, subject, strlen(subject), rules, n, now, on_done, &c), 0);
    pump(f, &c.calls, 1, 10000);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.n, n);
    return c.res;
}

static struct limiter_result peek_both(struct fixture *f, const char *subject, const struct limit_rule *rules,
                                       size_t n, int64_t now)
{
    struct limiter_result m = run_peek(f, f->mem, subject, rules, n, now);
    struct limiter_result r = run_peek(f, f->redis, subject, rules, n, now);
    char what[128];
    snprintf(what, sizeof(what), "peek of %s, %zu rules, now %" PRId64, subject, n, now);
    expect_same(&m, &r, what);
    assert_false(r.remembered);
    return r;
}

/* limiter_peek answers what a check would, on both stores alike, and records nothing: no
 * write on Redis, and the next check sees the same state. */
static void test_peek(void **state)
{
    struct fixture *f = *state;
    const int64_t t0 = 1800000000000;
    struct limit_rule rules[6] = {
        {.id = 460, .kind = LIMIT_SLIDING_LOG, .rate = 10, .burst = 2, .window_ms = 60000},
        {.id = 461, .kind = LIMIT_SLIDING_WINDOW, .rate = 10, .window_ms = 60000},
        {.id = 462, .kind = LIMIT_TOKEN_BUCKET, .rate = 10, .window_ms = 60000},
        {.id = 463, .kind = LIMIT_FIXED_WINDOW, .rate = 10, .window_ms = 60000},
        {.id = 464, .kind = LIMIT_QUOTA, .rate = 30, .period = LIMIT_PERIOD_MONTH},
        {.id = 465, .kind = LIMIT_CONCURRENCY, .rate = 3, .window_ms = 600000},
    };
    /* nothing yet: everything free */
    struct limiter_result res = peek_both(f, "u:peek", rules, 6, t0);
    assert_true(res.allowed);
    for (int i = 0; i < 5; i++)
        assert_int_equal(res.verdicts[i].remaining, res.verdicts[i].limit);
    srand(46);
    int64_t now = t0;
    for (int i = 0; i < 60; i++) {
        now += rand() % 5000;
        set_cost(rules, 5, true);
        long long before = writes(f->sync);
        struct limiter_result p = peek_both(f, "u:peek", rules, 5, now);
        assert_int_equal(writes(f->sync), before);
        struct limiter_result again = peek_both(f, "u:peek", rules, 5, now);
        expect_same(&p, &again, "a second peek");
        /* the check decides as the peek did (and answers as it when it records nothing) */
        struct limiter_result c = both(f, "u:peek", rules, 5, now);
        assert_int_equal(c.allowed, p.allowed);
        for (int j = 0; j < 5; j++)
            assert_int_equal(c.verdicts[j].allowed, p.verdicts[j].allowed);
        if (!c.allowed)
            expect_same(&p, &c, "peek then a rejected check");
    }
    /* the quota's use: limit - remaining */
    rules[4].cost = 0;
    res = peek_both(f, "u:peek", &rules[4], 1, now);
    int64_t used = res.verdicts[0].limit - res.verdicts[0].remaining;
    assert_true(used > 0);
    /* a concurrency rule shows the leases held; a peek needs no lease id */
    struct capture c = {0};
    assert_int_equal(limiter_check_leased(f->redis, "u:peek", 6, &rules[5], 1, now, "l:1", on_done, &c), 0);
    pump(f, &c.calls, 1, 10000);
    assert_true(c.res.allowed);
    res = run_peek(f, f->redis, "u:peek", &rules[5], 1, now);
    expect_verdict_of(&res, 0, true, 3, 2, 0);
    limiter_release(f->redis, "u:peek", 6, &rules[5], 1, "l:1");
    /* the denial cache: a peek on the store's clock is never answered from it */
    struct limit_rule one = {.id = 466, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .window_ms = 60000};
    assert_true(run(f, f->redis, "u:peek2", &one, 1, -1).allowed);
    assert_false(run(f, f->redis, "u:peek2", &one, 1, -1).allowed);
    assert_true(run(f, f->redis, "u:peek2", &one, 1, -1).remembered);
    res = run_peek(f, f->redis, "u:peek2", &one, 1, -1);
    assert_false(res.remembered);
    assert_false(res.allowed);
}

/* A quota's key: a hash in the subject's slot, living until a minute past the period's
 * end (the server's clock). */
static void test_quota_key_expiry(void **state)
{
    struct fixture *f = *state;
    struct limit_rule q = {.id = 470, .kind = LIMIT_QUOTA, .rate = 5, .period = LIMIT_PERIOD_DAY};
    struct limiter_result res = run(f, f->redis, "u:qkey", &q, 1, -1);
    assert_true(res.allowed);
    int64_t end = limit_period_end_ms(LIMIT_PERIOD_DAY, res.now_ms);
    assert_int_equal(res.verdicts[0].reset_ms, end - res.now_ms);
    char key[128];
    snprintf(key, sizeof(key), "%s{u:qkey}:470", f->prefix);
    redisReply *r = cmd_ok(f->sync, "PTTL %s", key);
    long long want = end - res.now_ms + 60000;
    if (r->integer > want || r->integer < want - 5000)
        fail_msg("PTTL %lld, want about %lld", r->integer, want);
    freeReplyObject(r);
    r = cmd_ok(f->sync, "TYPE %s", key);
    assert_string_equal(r->str, "hash");
    freeReplyObject(r);
}

/* A quota's field in its hash: the period's start and end, 7 bytes big-endian each. */
static void quota_field(unsigned char field[14], int64_t from, int64_t to)
{
    for (int i = 0; i < 7; i++) {
        field[i] = (unsigned char)((uint64_t)from >> (48 - 8 * i));
        field[7 + i] = (unsigned char)((uint64_t)to >> (48 - 8 * i));
    }
}

/* A log and a daily quota of 3: the quota rejects the 4th while the log would admit it,
 * and neither moves (the quota's count taken back at once, no log entry); the next day the
 * quota's hash holds the new day's count alone. */
static void test_quota_over_beside_log_takes_nothing(void **state)
{
    struct fixture *f = *state;
    const int64_t day = 1800057600000;   /* 2027-01-15 00:00 UTC */
    struct limit_rule rules[2] = {
        {.id = 480, .kind = LIMIT_SLIDING_LOG, .rate = 100, .window_ms = 60000},
        {.id = 481, .kind = LIMIT_QUOTA, .rate = 3, .period = LIMIT_PERIOD_DAY},
    };
    for (int i = 0; i < 3; i++)
        assert_true(both(f, "u:qlog", rules, 2, day + 1000 + i).allowed);
    struct limiter_result res = both(f, "u:qlog", rules, 2, day + 2000);
    expect_verdict_of(&res, 0, true, 100, 97, 59000);
    expect_verdict_of(&res, 1, false, 3, 0, DAY_MS - 2000);
    char key[128];
    snprintf(key, sizeof(key), "%s{u:qlog}:481", f->prefix);
    unsigned char field[14];
    quota_field(field, day, day + DAY_MS);
    redisReply *r = cmd_ok(f->sync, "HGET %s %b", key, field, sizeof(field));
    assert_string_equal(r->str, "3");
    freeReplyObject(r);
    snprintf(key, sizeof(key), "%s{u:qlog}:480", f->prefix);
    r = cmd_ok(f->sync, "LLEN %s", key);
    assert_int_equal(r->integer, 3);
    freeReplyObject(r);
    res = both(f, "u:qlog", rules, 2, day + DAY_MS + 5);
    expect_verdict_of(&res, 1, true, 3, 2, DAY_MS - 5);
    snprintf(key, sizeof(key), "%s{u:qlog}:481", f->prefix);
    r = cmd_ok(f->sync, "HGETALL %s", key);
    assert_int_equal(r->elements, 2);
    quota_field(field, day + DAY_MS, day + 2 * DAY_MS);
    assert_int_equal(r->element[0]->len, sizeof(field));
    assert_memory_equal(r->element[0]->str, field, sizeof(field));
    assert_string_equal(r->element[1]->str, "1");
    freeReplyObject(r);
}

/* A quota's hash as the proxies before wrote it (a=<tag> s=<period start> n=<used>) still
 * counts for its period, beside a log (the short way) and alone. */
static void test_quota_layout_before(void **state)
{
    struct fixture *f = *state;
    const int64_t day = 1800057600000;
    struct limit_rule rules[2] = {
        {.id = 490, .kind = LIMIT_SLIDING_LOG, .rate = 100, .window_ms = 60000},
        {.id = 491, .kind = LIMIT_QUOTA, .rate = 5, .period = LIMIT_PERIOD_DAY},
    };
    const char *subjects[2] = {"u:qold1", "u:qold2"};
    for (int i = 0; i < 2; i++) {
        char key[128];
        snprintf(key, sizeof(key), "%s{%s}:491", f->prefix, subjects[i]);
        freeReplyObject(cmd_ok(f->sync, "HSET %s a 5:1 s %lld n 3", key, (long long)day));
        const struct limit_rule *pick = i == 0 ? rules : &rules[1];
        size_t n = i == 0 ? 2 : 1;
        struct limiter_result res = run(f, f->redis, subjects[i], pick, n, day + 3600000);
        expect_verdict_of(&res, n - 1, true, 5, 1, DAY_MS - 3600000);
        res = run(f, f->redis, subjects[i], pick, n, day + 3600001);
        expect_verdict_of(&res, n - 1, true, 5, 0, DAY_MS - 3600001);
        res = run(f, f->redis, subjects[i], pick, n, day + 3600002);
        assert_false(res.allowed);
        redisReply *r = cmd_ok(f->sync, "HGETALL %s", key);
        assert_int_equal(r->elements, 2);
        assert_string_equal(r->element[1]->str, "5");
        freeReplyObject(r);
    }
}

static void test_rejected_writes_nothing(void **state)
{
    struct fixture *f = *state;
    struct limit_rule rules[4] = {
        {.id = 20, .kind = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 21, .kind = LIMIT_SLIDING_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 22, .kind = LIMIT_TOKEN_BUCKET, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 23, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 60000},
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
        {.id = 30, .kind = LIMIT_SLIDING_LOG, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 31, .kind = LIMIT_SLIDING_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 32, .kind = LIMIT_TOKEN_BUCKET, .rate = 5, .burst = 1, .window_ms = 60000},
        {.id = 33, .kind = LIMIT_FIXED_WINDOW, .rate = 1, .burst = 0, .window_ms = 60000},
    };
    /* real clock: the Redis server's TIME */
    int64_t before = real_ms();
    struct limiter_result res = run(f, f->redis, "u:keys", rules, 4, -1);
    assert_int_equal(res.status, LIMITER_DECIDED);
    assert_true(res.allowed);
    assert_true(res.now_ms >= before - 5000 && res.now_ms <= real_ms() + 5000);
    static const long long max_ttl[4] = {120000, 120000, 60000, 60000};   /* sliding log, window: 2w */
    static const char *const type[4] = {"list", "hash", "hash", "hash"};
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
        {.id = 40, .kind = LIMIT_SLIDING_LOG, .rate = 50, .burst = 0, .window_ms = 60000},
        {.id = 41, .kind = LIMIT_TOKEN_BUCKET, .rate = 50, .burst = 0, .window_ms = 60000},
        {.id = 42, .kind = LIMIT_FIXED_WINDOW, .rate = 50, .burst = 0, .window_ms = 60000},
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
    struct limit_rule r = {.id = 50, .kind = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 60000};
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
    struct limit_rule r = {.id = 60, .kind = LIMIT_SLIDING_LOG, .rate = 90, .burst = 10, .window_ms = 60000};
    enum { N = 300 };
    static struct capture c[N];
    memset(c, 0, sizeof(c));
    int calls = 0;
    for (int i = 0; i < N; i++)
        assert_int_equal(limiter_check(i % 2 ? second : f->redis, "u:pipe", 6, &r, 1, -1, on_done, &c[i]), 0);
    int64_t deadline = store_mono_ms() + 10000;
    while (store_mono_ms() < deadline) {
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
    struct limit_rule r = {.id = 70, .kind = LIMIT_FIXED_WINDOW, .rate = 3, .burst = 0, .window_ms = 60000};
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
    struct limit_rule r = {.id = 80, .kind = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 60000};
    struct capture c = {0};
    int64_t t = store_mono_ms();
    assert_int_equal(limiter_check(l, "u:down", 6, &r, 1, -1, on_done, &c), 0);
    /* answered at once: done ran before limiter_check returned */
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.status, LIMITER_UNAVAILABLE);
    assert_true(store_mono_ms() - t < 1000);
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
    int64_t t = store_mono_ms();
    assert_true(wait_available(f, l, true, 5000));
    assert_true(store_mono_ms() - t < 2500);
    struct limit_rule r = {.id = 81, .kind = LIMIT_SLIDING_LOG, .rate = 3, .burst = 0, .window_ms = 60000};
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
    t = store_mono_ms();
    assert_true(wait_available(f, l, true, 5000));
    assert_true(store_mono_ms() - t < 2500);
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
    struct limit_rule r = {.id = 90, .kind = LIMIT_TOKEN_BUCKET, .rate = 3, .burst = 0, .window_ms = 60000};

    /* a server that stops answering: the check fails after the timeout, not never */
    kill(s.pid, SIGSTOP);
    struct capture c[3] = {0};
    int64_t t = store_mono_ms();
    for (int i = 0; i < 3; i++)
        assert_int_equal(limiter_check(l, "u:slow", 6, &r, 1, -1, on_done, &c[i]), 0);
    pump(f, &c[2].calls, 1, 5000);
    int64_t took = store_mono_ms() - t;
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
    struct limit_rule r = {.id = 95, .kind = LIMIT_FIXED_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000};
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

/* ---- concurrency leases ---- */

static struct limiter_result run_leased(struct fixture *f, struct limiter *l, const char *subject,
                                        const struct limit_rule *rules, size_t n, int64_t now, const char *lease_id)
{
    struct capture c = {0};
    assert_int_equal(limiter_check_leased(l, subject, strlen(subject), rules, n, now, lease_id, on_done, &c), 0);
    pump(f, &c.calls, 1, 10000);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.res.n, n);
    return c.res;
}

static struct limiter_result both_leased(struct fixture *f, const char *subject, const struct limit_rule *rules,
                                         size_t n, int64_t now, const char *lease_id)
{
    struct limiter_result m = run_leased(f, f->mem, subject, rules, n, now, lease_id);
    struct limiter_result r = run_leased(f, f->redis, subject, rules, n, now, lease_id);
    char what[160];
    snprintf(what, sizeof(what), "subject %s, %zu rules, now %" PRId64 ", lease %s", subject, n, now, lease_id);
    expect_same(&m, &r, what);
    return r;
}

static void release_both(struct fixture *f, const char *subject, const struct limit_rule *rules, size_t n,
                         const char *lease_id)
{
    limiter_release(f->mem, subject, strlen(subject), rules, n, lease_id);
    limiter_release(f->redis, subject, strlen(subject), rules, n, lease_id);
}

static void expect_verdict(const struct limit_verdict *v, bool allowed, int64_t limit, int64_t remaining,
                           int64_t reset_ms)
{
    assert_int_equal(v->allowed, allowed);
    assert_int_equal(v->limit, limit);
    assert_int_equal(v->remaining, remaining);
    assert_int_equal(v->reset_ms, reset_ms);
}

static struct limiter *lease_limiter(struct fixture *f, int port, const char *prefix, int64_t lease_ttl_ms)
{
    char url[64];
    struct redis_store_options o = {.url = tcp_url(port, url, sizeof(url)), .key_prefix = prefix,
                                    .command_timeout_ms = 2000, .lease_ttl_ms = lease_ttl_ms};
    char err[128];
    struct limiter *l = limiter_redis_create(f->base, &o, err, sizeof(err));
    if (l == NULL)
        fail_msg("limiter_redis_create: %s", err);
    assert_true(wait_available(f, l, true, 5000));
    return l;
}

static long long zcard(redisContext *c, const char *prefix, const char *subject, int64_t id)
{
    redisReply *r = redisCommand(c, "ZCARD %s{%s}:%lld", prefix, subject, (long long)id);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static void wait_ms(struct fixture *f, int64_t ms)
{
    int dummy = 0;
    pump(f, &dummy, 1, ms);
}

static void count_done(void *arg)
{
    (*(int *)arg)++;
}

/* Exact verdicts of rate and concurrency rules checked together, on both stores. */
static void test_same_concurrency_exact(void **state)
{
    struct fixture *f = *state;
    struct limit_rule rules[2] = {
        {.id = 200, .kind = LIMIT_FIXED_WINDOW, .rate = 5, .burst = 0, .window_ms = 60000},
        {.id = 201, .kind = LIMIT_CONCURRENCY, .rate = 3, .burst = 0, .window_ms = 600000},
    };
    int64_t t = 1000000;
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "r:%d", i);
        struct limiter_result res = both_leased(f, "u:ccx", rules, 2, t, id);
        assert_true(res.allowed);
        expect_verdict(&res.verdicts[0], true, 5, 4 - i, 20000);
        expect_verdict(&res.verdicts[1], true, 3, 2 - i, 0);
    }
    /* the concurrency rule rejects: the rate rule allows but does not count it */
    struct limiter_result res = both_leased(f, "u:ccx", rules, 2, t, "r:3");
    assert_false(res.allowed);
    expect_verdict(&res.verdicts[0], true, 5, 2, 20000);
    expect_verdict(&res.verdicts[1], false, 3, 0, 1000);
    release_both(f, "u:ccx", rules, 2, "r:0");
    release_both(f, "u:ccx", rules, 2, "r:1");
    assert_true(both_leased(f, "u:ccx", rules, 2, t, "r:4").allowed);
    assert_true(both_leased(f, "u:ccx", rules, 2, t, "r:5").allowed);
    release_both(f, "u:ccx", rules, 2, "r:2");
    release_both(f, "u:ccx", rules, 2, "r:2");   /* twice: the second gives back nothing */
    /* 5 counted: the rate rule rejects, and no lease is taken */
    res = both_leased(f, "u:ccx", rules, 2, t, "r:6");
    assert_false(res.allowed);
    expect_verdict(&res.verdicts[0], false, 5, 0, 20000);
    expect_verdict(&res.verdicts[1], true, 3, 1, 0);
    assert_int_equal(zcard(f->sync, f->prefix, "u:ccx", 201), 2);
    res = both_leased(f, "u:ccx", &rules[1], 1, t, "r:7");
    expect_verdict(&res.verdicts[0], true, 3, 0, 0);
    assert_int_equal(limiter_lease_count(f->redis), 3);
    assert_int_equal(limiter_lease_count(f->mem), 3);
    /* a lease member scored with its expiry; the key lives at least the TTL (renewed to
     * twice the TTL when less was left) */
    redisReply *r = redisCommand(f->sync, "ZSCORE %s{u:ccx}:201 r:7", f->prefix);
    assert_string_equal(r->str, "1600000");
    freeReplyObject(r);
    r = redisCommand(f->sync, "PTTL %s{u:ccx}:201", f->prefix);
    assert_true(r->integer > 600000 && r->integer <= 1200000);
    freeReplyObject(r);
}

/* A random walk of checks (random subsets of a concurrency rule and two rate rules) and
 * releases over three subjects: both stores agree on every verdict. The lease TTL is far
 * longer than the walk's span, so that no lease expires in Redis. */
/* log_beside: rule 2 a sliding log and rule 3 a daily quota (check.lua's short way for a
 * log with a concurrency rule and quotas beside it); else two rate rules of random kinds. */
/* The rules beside the concurrency rule: two of any rate kind; a sliding log and a daily
 * quota; or those and a second log, of a longer window (a burst and a sustained rate). */
enum walk_rules { BESIDE_RATES, BESIDE_LOG_QUOTA, BESIDE_TWO_LOGS_QUOTA };

static void concurrency_walk(struct fixture *f, unsigned seed, enum walk_rules beside)
{
    srand(seed);
    struct limit_rule rules[3][4];
    size_t nrules = beside == BESIDE_TWO_LOGS_QUOTA ? 4 : 3;
    for (int s = 0; s < 3; s++) {
        rules[s][0] = (struct limit_rule){.id = 210, .kind = LIMIT_CONCURRENCY, .rate = 1 + rand() % 4,
                                          .burst = 0, .window_ms = 86400000};
        for (int j = 1; j < 3; j++)
            rules[s][j] = (struct limit_rule){.id = 210 + j, .kind = (enum limit_kind)(rand() % 4),
                                              .rate = 2 + rand() % 6, .burst = rand() % 2, .window_ms = 60000};
        if (beside != BESIDE_RATES) {
            rules[s][1].kind = LIMIT_SLIDING_LOG;
            rules[s][2] = (struct limit_rule){.id = 212, .kind = LIMIT_QUOTA, .rate = 40 + rand() % 40,
                                              .period = LIMIT_PERIOD_DAY};
        }
        rules[s][3] = (struct limit_rule){.id = 213, .kind = LIMIT_SLIDING_LOG, .rate = 6 + rand() % 10,
                                          .burst = rand() % 2, .window_ms = 600000};
    }
    struct held {
        int s, mask;
        char id[16];
    } held[400];
    int nheld = 0, allowed = 0, rejected_cc = 0;
    int64_t now = 1000000000;
    for (int step = 0; step < 400; step++) {
        now += rand() % 8000;
        if (nheld > 0 && rand() % 3 == 0) {
            int k = rand() % nheld;
            char subject[16];
            snprintf(subject, sizeof(subject), "w:%d", held[k].s);
            release_both(f, subject, rules[held[k].s], nrules, held[k].id);
            held[k] = held[--nheld];
            continue;
        }
        int s = rand() % 3, mask = 1 + rand() % ((1 << nrules) - 1);
        struct limit_rule pick[4];
        size_t n = 0;
        for (size_t j = 0; j < nrules; j++)
            if (mask & (1 << j))
                pick[n++] = rules[s][j];
        char subject[16], id[16];
        snprintf(subject, sizeof(subject), "w:%d", s);
        snprintf(id, sizeof(id), "id:%d", step);
        struct limiter_result res = both_leased(f, subject, pick, n, now, id);
        if (res.allowed && (mask & 1)) {
            held[nheld] = (struct held){.s = s, .mask = mask};
            snprintf(held[nheld].id, sizeof(held[nheld].id), "%s", id);
            nheld++;
        }
        allowed += res.allowed;
        rejected_cc += (mask & 1) && !res.verdicts[0].allowed;
    }
    assert_int_equal(limiter_lease_count(f->redis), (size_t)nheld);
    assert_int_equal(limiter_lease_count(f->mem), (size_t)nheld);
    assert_true(allowed > 50 && rejected_cc > 10);   /* the walk saw both outcomes */
}

static void test_same_concurrency_walk(void **state) { concurrency_walk(*state, 42, BESIDE_RATES); }
static void test_same_concurrency_log_quota_walk(void **state) { concurrency_walk(*state, 43, BESIDE_LOG_QUOTA); }
static void test_same_concurrency_two_logs_quota_walk(void **state)
{
    concurrency_walk(*state, 44, BESIDE_TWO_LOGS_QUOTA);
}

/* A rejected leased check writes nothing to Redis. */
static void test_concurrency_rejected_writes_nothing(void **state)
{
    struct fixture *f = *state;
    struct limit_rule rules[2] = {
        {.id = 220, .kind = LIMIT_SLIDING_LOG, .rate = 100, .burst = 0, .window_ms = 60000},
        {.id = 221, .kind = LIMIT_CONCURRENCY, .rate = 1, .burst = 0, .window_ms = 600000},
    };
    assert_true(run_leased(f, f->redis, "u:ccrej", rules, 2, 5000, "a").allowed);
    long long before = writes(f->sync), evalsha = commandstat(f->sync, "evalsha");
    for (int i = 0; i < 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "b%d", i);
        struct limiter_result res = run_leased(f, f->redis, "u:ccrej", rules, 2, 5001 + i, id);
        assert_false(res.allowed);
        expect_verdict(&res.verdicts[1], false, 1, 0, 1000);
    }
    assert_int_equal(writes(f->sync), before);
    /* one EVALSHA per check, rate and concurrency rules together */
    assert_int_equal(commandstat(f->sync, "evalsha") - evalsha, 5);
    assert_int_equal(limiter_lease_count(f->redis), 1);
    /* a concurrency rule needs a lease id; limiter_check has none */
    struct capture c = {0};
    assert_int_equal(limiter_check(f->redis, "u:ccrej", 7, rules, 2, 5000, on_done, &c), -EINVAL);
    assert_int_equal(limiter_check_leased(f->redis, "u:ccrej", 7, rules, 2, 5000, "a", on_done, &c), -EINVAL);
    assert_int_equal(c.calls, 0);
}

static void test_release_frees_slot(void **state)
{
    struct fixture *f = *state;
    struct limit_rule cc = {.id = 230, .kind = LIMIT_CONCURRENCY, .rate = 2, .burst = 0, .window_ms = 600000};
    assert_true(run_leased(f, f->redis, "u:rel", &cc, 1, -1, "x1").allowed);
    assert_true(run_leased(f, f->redis, "u:rel", &cc, 1, -1, "x2").allowed);
    assert_false(run_leased(f, f->redis, "u:rel", &cc, 1, -1, "x3").allowed);
    long long zrem = commandstat(f->sync, "zrem");
    limiter_release(f->redis, "u:rel", 5, &cc, 1, "x1");
    limiter_release(f->redis, "u:rel", 5, &cc, 1, "x1");   /* not held any more: nothing sent */
    assert_int_equal(limiter_lease_count(f->redis), 1);
    struct limiter_result res = run_leased(f, f->redis, "u:rel", &cc, 1, -1, "x4");
    assert_true(res.allowed);
    expect_verdict(&res.verdicts[0], true, 2, 0, 0);
    assert_int_equal(commandstat(f->sync, "zrem") - zrem, 1);
    redisReply *r = redisCommand(f->sync, "ZSCORE %s{u:rel}:230 x1", f->prefix);
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    assert_int_equal(zcard(f->sync, f->prefix, "u:rel", 230), 2);
}

/* limiter_release_notify calls back only once Redis has applied the release, so an
 * answer sent after the callback can never meet its own old slot from another
 * connection (another worker or proxy). */
struct notified {
    struct fixture *f;
    int calls;
    long long zcard_seen;
};

static void on_release_notified(void *arg)
{
    struct notified *n = arg;
    n->calls++;
    n->zcard_seen = zcard(n->f->sync, n->f->prefix, "u:ack", 231);
}

static void test_release_notify_waits_for_redis(void **state)
{
    struct fixture *f = *state;
    struct limit_rule cc = {.id = 231, .kind = LIMIT_CONCURRENCY, .rate = 1, .burst = 0, .window_ms = 600000};
    assert_true(run_leased(f, f->redis, "u:ack", &cc, 1, -1, "a1").allowed);
    struct notified n = {.f = f, .calls = 0, .zcard_seen = -1};
    limiter_release_notify(f->redis, "u:ack", 5, &cc, 1, "a1", on_release_notified, &n);
    assert_int_equal(n.calls, 0);   /* not before Redis has answered */
    for (int i = 0; i < 200 && n.calls == 0; i++)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.zcard_seen, 0);   /* free, as any other connection sees it */
    assert_int_equal(limiter_lease_count(f->redis), 0);
    /* nothing held: the callback still comes, exactly once */
    struct notified again = {.f = f, .calls = 0, .zcard_seen = -1};
    limiter_release_notify(f->redis, "u:ack", 5, &cc, 1, "a1", on_release_notified, &again);
    for (int i = 0; i < 200 && again.calls == 0; i++)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(again.calls, 1);
}

/* A proxy that dies holding slots (its limiter destroyed without a release) stops counting
 * once its leases pass the TTL; until then they count. */
static void test_crashed_proxy_expires(void **state)
{
    struct fixture *f = *state;
    struct limit_rule cc = {.id = 240, .kind = LIMIT_CONCURRENCY, .rate = 2, .burst = 0, .window_ms = 500};
    struct limiter *dead = lease_limiter(f, f->srv.port, f->prefix, 500);
    int64_t t0 = store_mono_ms();
    assert_true(run_leased(f, dead, "u:crash", &cc, 1, -1, "d1").allowed);
    assert_true(run_leased(f, dead, "u:crash", &cc, 1, -1, "d2").allowed);
    limiter_destroy(dead);
    struct limiter_result res = run_leased(f, f->redis, "u:crash", &cc, 1, -1, "live1");
    if (store_mono_ms() - t0 >= 450)
        fail_msg("too slow to test a 500 ms TTL (%lld ms)", (long long)(store_mono_ms() - t0));
    assert_false(res.allowed);   /* the dead proxy's two still count */
    wait_ms(f, 600 - (store_mono_ms() - t0));
    res = run_leased(f, f->redis, "u:crash", &cc, 1, -1, "live2");
    assert_true(res.allowed);
    expect_verdict(&res.verdicts[0], true, 2, 1, 0);   /* both expired; only live2 held */
    assert_int_equal(zcard(f->sync, f->prefix, "u:crash", 240), 1);   /* and the expired were dropped */
}

/* A live limiter's leases outlive many TTLs: one renewal call per interval keeps them, even
 * when the script cache is flushed in between. */
static void test_renewal_keeps_leases(void **state)
{
    struct fixture *f = *state;
    struct limit_rule cc = {.id = 250, .kind = LIMIT_CONCURRENCY, .rate = 1, .burst = 0, .window_ms = 300};
    struct limiter *l = lease_limiter(f, f->srv.port, f->prefix, 300);
    enum { SUBJECTS = 25 };
    char subject[16];
    for (int i = 0; i < SUBJECTS; i++) {
        snprintf(subject, sizeof(subject), "u:ren%d", i);
        assert_true(run_leased(f, l, subject, &cc, 1, -1, "keep").allowed);
    }
    long long evalsha = commandstat(f->sync, "evalsha"), eval = commandstat(f->sync, "eval");
    int64_t t0 = store_mono_ms();
    wait_ms(f, 700);
    freeReplyObject(redisCommand(f->sync, "SCRIPT FLUSH"));
    wait_ms(f, 800);
    int64_t took = store_mono_ms() - t0;
    long long calls = commandstat(f->sync, "evalsha") - evalsha + commandstat(f->sync, "eval") - eval;
    /* every 100 ms one call for all 25 leases (one per lease would be 25 times more) */
    if (calls < 3 || calls > took / 100 + 3)
        fail_msg("%lld renewal calls in %lld ms", calls, (long long)took);
    assert_true(commandstat(f->sync, "eval") - eval >= 1);   /* NOSCRIPT: sent as EVAL once */
    /* five TTLs later every lease still counts */
    for (int i = 0; i < SUBJECTS; i++) {
        snprintf(subject, sizeof(subject), "u:ren%d", i);
        struct limiter_result res = run_leased(f, f->redis, subject, &cc, 1, -1, "other");
        assert_false(res.allowed);
        expect_verdict(&res.verdicts[0], false, 1, 0, 1000);
    }
    /* given back in one call: done comes from the loop, once */
    evalsha = commandstat(f->sync, "evalsha");
    int done = 0;
    limiter_release_all(l, count_done, &done);
    assert_int_equal(limiter_lease_count(l), 0);
    assert_int_equal(done, 0);
    pump(f, &done, 1, 5000);
    assert_int_equal(done, 1);
    assert_int_equal(commandstat(f->sync, "evalsha") - evalsha, 1);
    for (int i = 0; i < SUBJECTS; i++) {
        snprintf(subject, sizeof(subject), "u:ren%d", i);
        assert_int_equal(zcard(f->sync, f->prefix, subject, 250), 0);
    }
    snprintf(subject, sizeof(subject), "u:ren%d", 3);
    assert_true(run_leased(f, f->redis, subject, &cc, 1, -1, "other2").allowed);
    /* nothing held: done at once */
    limiter_release_all(l, count_done, &done);
    assert_int_equal(done, 2);
    wait_ms(f, 100);
    assert_int_equal(done, 2);
    limiter_destroy(l);
}

/* 10,000 leases held by one limiter: one renewal call per interval renews them all, and
 * one call gives them all back. */
static void test_many_leases(void **state)
{
    struct fixture *f = *state;
    enum { N = 10000 };
    struct limit_rule cc = {.id = 260, .kind = LIMIT_CONCURRENCY, .rate = 3, .burst = 0, .window_ms = 3000};
    struct limiter *l = lease_limiter(f, f->srv.port, f->prefix, 3000);
    static struct capture c[N];
    memset(c, 0, sizeof(c));
    char subject[32], id[32];
    for (int i = 0; i < N; i++) {
        snprintf(subject, sizeof(subject), "m:%d", i % (N / 2));
        snprintf(id, sizeof(id), "lease:%d", i);
        assert_int_equal(limiter_check_leased(l, subject, strlen(subject), &cc, 1, -1, id, on_done, &c[i]), 0);
    }
    int64_t deadline = store_mono_ms() + 30000;
    int calls = 0;
    while (store_mono_ms() < deadline) {
        calls = 0;
        for (int i = 0; i < N; i++)
            calls += c[i].calls;
        if (calls == N)
            break;
        event_base_loop(f->base, EVLOOP_ONCE);
    }
    assert_int_equal(calls, N);
    for (int i = 0; i < N; i++)
        assert_true(c[i].res.allowed);
    assert_int_equal(limiter_lease_count(l), N);
    redisReply *r = redisCommand(f->sync, "ZSCORE %s{m:7}:260 lease:7", f->prefix);
    long long score0 = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    long long evalsha = commandstat(f->sync, "evalsha");
    wait_ms(f, 1300);   /* one renewal at 1000 ms */
    long long renewals = commandstat(f->sync, "evalsha") - evalsha;
    if (renewals < 1 || renewals > 2)
        fail_msg("%lld renewal calls for %d leases", renewals, N);
    r = redisCommand(f->sync, "ZSCORE %s{m:7}:260 lease:7", f->prefix);
    assert_true(strtoll(r->str, NULL, 10) > score0);
    freeReplyObject(r);
    r = redisCommand(f->sync, "ZSCORE %s{m:4999}:260 lease:9999", f->prefix);
    assert_true(strtoll(r->str, NULL, 10) > score0);
    freeReplyObject(r);
    evalsha = commandstat(f->sync, "evalsha");
    int done = 0;
    limiter_release_all(l, count_done, &done);
    pump(f, &done, 1, 10000);
    assert_int_equal(done, 1);
    assert_int_equal(commandstat(f->sync, "evalsha") - evalsha, 1);
    assert_int_equal(zcard(f->sync, f->prefix, "m:7", 260), 0);
    assert_int_equal(zcard(f->sync, f->prefix, "m:4999", 260), 0);
    limiter_destroy(l);
}

/* Two proxies race for ten slots: 200 checks in flight at once, exactly ten allowed. */
static void test_concurrency_race(void **state)
{
    struct fixture *f = *state;
    struct limiter *second = lease_limiter(f, f->srv.port, f->prefix, 30000);
    struct limit_rule rules[2] = {
        {.id = 270, .kind = LIMIT_TOKEN_BUCKET, .rate = 100000, .burst = 0, .window_ms = 60000},
        {.id = 271, .kind = LIMIT_CONCURRENCY, .rate = 10, .burst = 0, .window_ms = 30000},
    };
    enum { N = 200 };
    static struct capture c[N];
    memset(c, 0, sizeof(c));
    char id[16];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof(id), "race:%d", i);
        assert_int_equal(limiter_check_leased(i % 2 ? second : f->redis, "u:race", 6, rules, 2, -1, id, on_done, &c[i]),
                         0);
    }
    int64_t deadline = store_mono_ms() + 10000;
    int calls = 0;
    while (store_mono_ms() < deadline) {
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
        assert_int_equal(c[i].res.status, LIMITER_DECIDED);
        allowed += c[i].res.allowed;
    }
    assert_int_equal(allowed, 10);
    assert_int_equal(limiter_lease_count(f->redis) + limiter_lease_count(second), 10);
    assert_int_equal(zcard(f->sync, f->prefix, "u:race", 271), 10);
    limiter_destroy(second);
}

/* Redis restarts empty while leases are held: right after the reconnect, the renewal puts
 * them back. While it is down, releases are just forgotten. */
static void test_restart_reestablishes(void **state)
{
    struct fixture *f = *state;
    struct server *s = &f->aux;
    server_start(s, NULL, false);
    struct limiter *l = lease_limiter(f, s->port, "rs:", 30000);
    struct limit_rule rules[2] = {
        {.id = 280, .kind = LIMIT_CONCURRENCY, .rate = 5, .burst = 0, .window_ms = 30000},
        {.id = 281, .kind = LIMIT_CONCURRENCY, .rate = 5, .burst = 0, .window_ms = 30000},
    };
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "a%d", i);
        assert_true(run_leased(f, l, "u:a", rules, 2, -1, id).allowed);
    }
    for (int i = 0; i < 2; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        assert_true(run_leased(f, l, "u:b", &rules[0], 1, -1, id).allowed);
    }
    assert_int_equal(limiter_lease_count(l), 8);

    server_stop(s);
    assert_true(wait_available(f, l, false, 3000));
    /* down: a release is forgotten here (in Redis it would end at its TTL) */
    limiter_release(l, "u:b", 3, rules, 2, "b1");
    assert_int_equal(limiter_lease_count(l), 7);

    server_start(s, NULL, false);   /* empty */
    assert_true(wait_available(f, l, true, 5000));
    redisContext *c = sync_connect(s->port);
    assert_non_null(c);
    int64_t deadline = store_mono_ms() + 1000;   /* well before the next tick (10 s) */
    while (store_mono_ms() < deadline &&
           zcard(c, "rs:", "u:a", 280) + zcard(c, "rs:", "u:a", 281) + zcard(c, "rs:", "u:b", 280) != 7)
        wait_ms(f, 20);
    assert_int_equal(zcard(c, "rs:", "u:a", 280), 3);
    assert_int_equal(zcard(c, "rs:", "u:a", 281), 3);
    assert_int_equal(zcard(c, "rs:", "u:b", 280), 1);
    redisReply *r = redisCommand(c, "PTTL rs:{u:b}:280");
    assert_true(r->integer > 25000 && r->integer <= 30000);
    freeReplyObject(r);
    /* and they count again, once the reconnect's grace (in which concurrency checks wait
       for every proxy of the fleet to renew into the restarted Redis) is over */
    wait_ms(f, 450);
    struct limiter_result res = run_leased(f, l, "u:a", rules, 2, -1, "a9");
    expect_verdict(&res.verdicts[0], true, 5, 1, 0);

    /* down again: release_all forgets everything and calls done at once */
    redisFree(c);
    server_stop(s);
    assert_true(wait_available(f, l, false, 3000));
    int done = 0;
    limiter_release_all(l, count_done, &done);
    assert_int_equal(done, 1);
    assert_int_equal(limiter_lease_count(l), 0);
    limiter_destroy(l);
}

/* A Redis that lost the leases of running requests (FLUSHALL, or restarted empty under a
 * live connection) counts those the proxy says it holds (rule.held), on the script's short
 * way (a log beside the concurrency rule) and its full one (a fixed window beside), and the
 * limiter puts its own leases back at once, long before its next renewal. */
static void test_lost_leases_count_and_come_back(void **state)
{
    struct fixture *f = *state;
    struct limit_rule beside[2] = {
        {.id = 290, .kind = LIMIT_SLIDING_LOG, .rate = 100, .window_ms = 60000},
        {.id = 291, .kind = LIMIT_FIXED_WINDOW, .rate = 100, .window_ms = 60000},
    };
    for (int way = 0; way < 2; way++) {
        struct limit_rule rules[2] = {
            beside[way],
            {.id = 292 + way, .kind = LIMIT_CONCURRENCY, .rate = 1, .burst = 0, .window_ms = 600000},
        };
        assert_true(run_leased(f, f->redis, "u:lost", rules, 2, -1, way ? "w1" : "w0").allowed);
        freeReplyObject(cmd_ok(f->sync, "DEL %s{u:lost}:%lld", f->prefix, (long long)rules[1].id));
        /* the proxy holds one: refused though the set is empty */
        rules[1].held = 1;
        struct limiter_result res = run_leased(f, f->redis, "u:lost", rules, 2, -1, "probe");
        assert_false(res.allowed);
        expect_verdict(&res.verdicts[1], false, 1, 0, 1000);
        int64_t deadline = store_mono_ms() + 2000;   /* the renewal timer is 200 s away */
        while (store_mono_ms() < deadline && zcard(f->sync, f->prefix, "u:lost", rules[1].id) != 1)
            wait_ms(f, 20);
        assert_int_equal(zcard(f->sync, f->prefix, "u:lost", rules[1].id), 1);
        /* held within the set's count changes nothing */
        res = run_leased(f, f->redis, "u:lost", rules, 2, -1, "probe2");
        assert_false(res.allowed);
        rules[1].held = 0;
        release_both(f, "u:lost", rules, 2, way ? "w1" : "w0");
    }
}

int main(void)
{
    const char *bin = getenv("REDIS_SERVER");
    if (bin == NULL || bin[0] == '\0' || access(bin, X_OK) != 0) {
        /* a failure, not a skip: etc/setup.sh installs redis-server, and a skip would
         * hide a broken set-up among passing tests */
        fprintf(stderr, "redis-server is not installed (Debian package redis-server; "
                        "etc/setup.sh installs it)\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);   /* writes to a killed server */
#define T(fn) cmocka_unit_test_setup_teardown(fn, test_setup, test_teardown)
    const struct CMUnitTest tests[] = {
        T(test_same_sliding_log),
        T(test_same_sliding_window),
        T(test_same_token_bucket),
        T(test_same_fixed_window),
        T(test_same_mixed),
        T(test_same_sliding_log_costs),
        T(test_same_sliding_window_costs),
        T(test_same_token_bucket_costs),
        T(test_same_fixed_window_costs),
        T(test_same_mixed_costs),
        T(test_same_sliding_log_long_costs),
        T(test_same_sliding_log_long_unit_costs),
        T(test_same_quota_month_end),
        T(test_same_quota_leap_day),
        T(test_same_quota_week),
        T(test_same_quota_sliding_log_month_end),
        T(test_same_quota_sliding_log_leap_day),
        T(test_same_quota_sliding_log_week),
        T(test_quota_over_beside_log_takes_nothing),
        T(test_quota_layout_before),
        T(test_quota_month_end_exact),
        T(test_quota_leap_day_exact),
        T(test_quota_week_exact),
        T(test_cost_ten_under_hundred),
        T(test_cost_rejected_adds_nothing),
        T(test_sliding_log_weighted_deep),
        T(test_sliding_log_layouts),
        T(test_sliding_log_unit_layout),
        T(test_peek),
        T(test_quota_key_expiry),
        T(test_same_rule_changes),
        T(test_sliding_log_exact),
        T(test_same_sliding_log_long),
        T(test_sliding_log_window_shrinks),
        T(test_sliding_log_limit_lowered),
        T(test_sliding_log_old_layout),
        T(test_sliding_log_stale_types),
        T(test_sliding_log_ttl_real_clock),
        T(test_other_algorithms_exact),
        T(test_sliding_log_window_grows_ttl),
        T(test_rejected_writes_nothing),
        T(test_keys_and_expiry),
        T(test_one_call_per_check),
        T(test_noscript_recovery),
        T(test_pipelined_two_limiters),
        T(test_destroy_fails_pending),
        T(test_down_and_back),
        T(test_command_timeout),
        T(test_auth_select_unix),
        T(test_same_concurrency_exact),
        T(test_same_concurrency_walk),
        T(test_same_concurrency_log_quota_walk),
        T(test_same_concurrency_two_logs_quota_walk),
        T(test_concurrency_rejected_writes_nothing),
        T(test_release_frees_slot),
        T(test_release_notify_waits_for_redis),
        T(test_crashed_proxy_expires),
        T(test_renewal_keeps_leases),
        T(test_many_leases),
        T(test_concurrency_race),
        T(test_restart_reestablishes),
        T(test_lost_leases_count_and_come_back),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
