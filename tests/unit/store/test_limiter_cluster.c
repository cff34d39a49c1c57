/* Unit tests for store/cluster/limiter_cluster.c against fake cluster nodes: two tiny RESP servers on
 * the test's own event loop that answer CLUSTER SLOTS (A serves slots 0-8191, B the rest),
 * SCRIPT LOAD (the script's SHA1), PING, ASKING, and EVALSHA as they are told: a check
 * reply (allowed), MOVED or ASK to the other node. What is seen: a check goes to its slot's
 * master; MOVED is followed and changes the slot's owner at once; ASK sends ASKING and the
 * call back to back on the named node and changes nothing; a redirect loop ends after two;
 * a node that is gone answers LIMITER_UNAVAILABLE at once for its slots only; limiter_nodes
 * lists the masters. Plus the creation errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <openssl/evp.h>

#include "store/clock.h"
#include "store/redis/cluster_slot.h"
#include "store/limiter_impl.h"

enum fake_mode { ANSWER, MOVED_TO_PEER, ASK_TO_PEER, SAY_TRYAGAIN };

#define MAX_CONNS 16

struct fake_node {
    struct evconnlistener *listener;
    struct bufferevent *conns[MAX_CONNS];
    int port;
    enum fake_mode mode;
    struct fake_node *peer;
    int evalsha, asking, asking_then_evalsha;
    int try_again_left;          /* SAY_TRYAGAIN: this many TRYAGAIN answers, then checks answered */
    int accepted;                /* connections accepted */
    bool last_was_asking;
};

static struct fake_node node_a, node_b;
static struct event_base *base;
static bool b_in_map;            /* false: CLUSTER SLOTS says A serves every slot */

static void reply(struct bufferevent *bev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(struct bufferevent *bev, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    evbuffer_add_vprintf(bufferevent_get_output(bev), fmt, ap);
    va_end(ap);
}

/* check.lua's answer for one allowed rule (struct '>i7BBi7i7i7'): now 1000, limit 10,
 * remaining 9, reset 0. */
static void reply_check_allowed(struct bufferevent *bev)
{
    unsigned char answer[30] = {0};
    answer[5] = 1000 >> 8;   /* now, bytes 0-6 */
    answer[6] = 1000 & 0xff;
    answer[7] = 1;           /* every rule allowed */
    answer[8] = 1;           /* rule 1: allowed, limit (9-15), remaining (16-22), reset (23-29) */
    answer[15] = 10;
    answer[22] = 9;
    struct evbuffer *out = bufferevent_get_output(bev);
    evbuffer_add_printf(out, "$%zu\r\n", sizeof(answer));
    evbuffer_add(out, answer, sizeof(answer));
    evbuffer_add(out, "\r\n", 2);
}

static void slots_reply(struct bufferevent *bev)
{
    if (!b_in_map) {
        reply(bev, "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$1\r\na\r\n", node_a.port);
        return;
    }
    reply(bev,
          "*2\r\n"
          "*3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$1\r\na\r\n"
          "*3\r\n:8192\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$1\r\nb\r\n",
          node_a.port, node_b.port);
}

static void sha1_hex(const char *text, size_t len, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    assert_int_equal(EVP_Digest(text, len, md, &mdlen, EVP_sha1(), NULL), 1);
    for (unsigned i = 0; i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* One command: argv[i] (argl[i] bytes). */
static void serve(struct fake_node *n, struct bufferevent *bev, int argc, char **argv, size_t *argl)
{
    bool asking = argc == 1 && strcasecmp(argv[0], "ASKING") == 0;
    if (asking) {
        n->asking++;
        reply(bev, "+OK\r\n");
    } else if (argc == 2 && strcasecmp(argv[0], "CLUSTER") == 0) {
        slots_reply(bev);
    } else if (argc == 3 && strcasecmp(argv[0], "SCRIPT") == 0) {
        char sha[41];
        sha1_hex(argv[2], argl[2], sha);
        reply(bev, "$40\r\n%s\r\n", sha);
    } else if (argc >= 1 && strcasecmp(argv[0], "EVALSHA") == 0) {
        n->evalsha++;
        if (n->last_was_asking)
            n->asking_then_evalsha++;
        /* the slot of the first key (argv[3]) */
        unsigned slot = cluster_key_slot(argv[3], argl[3]);
        if (n->mode == MOVED_TO_PEER && !n->last_was_asking)
            reply(bev, "-MOVED %u 127.0.0.1:%d\r\n", slot, n->peer->port);
        else if (n->mode == ASK_TO_PEER && !n->last_was_asking)
            reply(bev, "-ASK %u 127.0.0.1:%d\r\n", slot, n->peer->port);
        else if (n->mode == SAY_TRYAGAIN && n->try_again_left-- > 0)
            reply(bev, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
        else   /* check.lua for one rule, packed: now 1000, allowed; allowed, limit 10, remaining 9, reset 0 */
            reply_check_allowed(bev);
    } else if (argc == 1 && strcasecmp(argv[0], "PING") == 0) {
        reply(bev, "+PONG\r\n");
    } else {
        reply(bev, "-ERR fake node: unknown command\r\n");
    }
    n->last_was_asking = asking;
}

/* Parses whole commands ("*N\r\n" then N "$len\r\n<bytes>\r\n") off the input. */
static void on_read(struct bufferevent *bev, void *arg)
{
    struct fake_node *n = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        size_t avail = evbuffer_get_length(in);
        if (avail == 0)
            return;
        char *data = (char *)evbuffer_pullup(in, -1);
        char *p = data, *end = data + avail;
        char *argv[64];
        size_t argl[64];
        if (*p != '*')
            fail_msg("fake node: not an array");
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            return;
        int argc = (int)strtol(p + 1, NULL, 10);
        assert_true(argc > 0 && argc <= 64);
        p = nl + 1;
        for (int i = 0; i < argc; i++) {
            nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
            if (nl == NULL)
                return;
            size_t len = (size_t)strtoul(p + 1, NULL, 10);
            p = nl + 1;
            if ((size_t)(end - p) < len + 2)
                return;
            argv[i] = p;
            argl[i] = len;
            p += len + 2;
        }
        /* copies: the input is drained before serving */
        size_t used = (size_t)(p - data);
        char *copy = malloc(used);
        assert_non_null(copy);
        memcpy(copy, data, used);
        for (int i = 0; i < argc; i++)
            argv[i] = copy + (argv[i] - data);
        evbuffer_drain(in, used);
        char *owned[64];
        for (int i = 0; i < argc; i++) {
            owned[i] = malloc(argl[i] + 1);
            memcpy(owned[i], argv[i], argl[i]);
            owned[i][argl[i]] = '\0';
        }
        serve(n, bev, argc, owned, argl);
        for (int i = 0; i < argc; i++)
            free(owned[i]);
        free(copy);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct fake_node *n = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        for (int i = 0; i < MAX_CONNS; i++)
            if (n->conns[i] == bev)
                n->conns[i] = NULL;
        bufferevent_free(bev);
    }
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct fake_node *n = arg;
    n->accepted++;
    struct bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    assert_non_null(bev);
    int slot = 0;
    while (slot < MAX_CONNS && n->conns[slot] != NULL)
        slot++;
    assert_true(slot < MAX_CONNS);
    n->conns[slot] = bev;
    bufferevent_setcb(bev, on_read, NULL, on_event, n);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* Listens on port (0: any free one). */
static void fake_listen(struct fake_node *n, int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    n->listener = evconnlistener_new_bind(base, on_accept, n, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                          (struct sockaddr *)&sin, sizeof(sin));
    assert_non_null(n->listener);
    socklen_t len = sizeof(sin);
    assert_int_equal(getsockname(evconnlistener_get_fd(n->listener), (struct sockaddr *)&sin, &len), 0);
    n->port = ntohs(sin.sin_port);
}

static void fake_start(struct fake_node *n, struct fake_node *peer)
{
    memset(n, 0, sizeof(*n));
    n->peer = peer;
    fake_listen(n, 0);
}

/* The node goes away: no listener, its connections closed. */
static void fake_stop(struct fake_node *n)
{
    if (n->listener != NULL)
        evconnlistener_free(n->listener);
    n->listener = NULL;
    for (int i = 0; i < MAX_CONNS; i++) {
        if (n->conns[i] != NULL)
            bufferevent_free(n->conns[i]);
        n->conns[i] = NULL;
    }
}

/* Runs the loop until *flag is true or ms pass. */
static bool run_until(const bool *flag, int64_t ms)
{
    int64_t until = store_mono_ms() + ms;
    while (!*flag && store_mono_ms() < until) {
        struct timeval tick = {0, 5000};
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
    return *flag;
}

struct answer {
    bool done;
    struct limiter_result result;
};

static void on_done(void *arg, const struct limiter_result *result)
{
    struct answer *a = arg;
    a->done = true;
    a->result = *result;
}

static const struct limit_rule ten_per_min = {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 10, .window_ms = 60000};

static struct limiter_result check(struct limiter *l, const char *subject)
{
    struct answer a = {0};
    assert_int_equal(limiter_check(l, subject, strlen(subject), &ten_per_min, 1, -1, on_done, &a), 0);
    if (!run_until(&a.done, 3000))
        fail_msg("no answer for %s in 3 s", subject);
    return a.result;
}

/* A subject whose slot (prefix "t:") A serves (want_a) or B does. */
static void subject_on(bool want_a, char *out, size_t outlen)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(out, outlen, "u:%d", i);
        unsigned slot = cluster_limiter_key_slot("t:", 2, out, strlen(out), ten_per_min.id);
        if ((slot < 8192) == want_a)
            return;
    }
    fail_msg("no subject found");
}

static struct limiter *make(void)
{
    base = event_base_new();
    assert_non_null(base);
    b_in_map = true;
    fake_start(&node_a, &node_b);
    fake_start(&node_b, &node_a);
    char seeds[64], err[256];
    snprintf(seeds, sizeof(seeds), "redis://127.0.0.1:%d/0", node_a.port);
    struct redis_store_options o = {.url = seeds, .key_prefix = "t:", .command_timeout_ms = 500};
    struct limiter *l = limiter_redis_cluster_create(base, &o, err, sizeof(err));
    if (l == NULL)
        fail_msg("%s", err);
    /* the map from the seed, then a connection to each master */
    int64_t until = store_mono_ms() + 3000;
    while (!limiter_available(l) && store_mono_ms() < until) {
        bool never = false;
        run_until(&never, 10);
    }
    assert_true(limiter_available(l));
    return l;
}

static void unmake(struct limiter *l)
{
    limiter_destroy(l);
    fake_stop(&node_a);
    fake_stop(&node_b);
    event_base_free(base);
}

static void test_checks_go_to_their_slots_master(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_a[32], on_b[32];
    subject_on(true, on_a, sizeof(on_a));
    subject_on(false, on_b, sizeof(on_b));
    struct limiter_result r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_DECIDED);
    assert_true(r.allowed);
    assert_int_equal(node_a.evalsha, 1);
    assert_int_equal(node_b.evalsha, 0);
    r = check(l, on_b);
    assert_int_equal(r.status, LIMITER_DECIDED);
    assert_int_equal(node_a.evalsha, 1);
    assert_int_equal(node_b.evalsha, 1);
    unmake(l);
}

static void test_moved_is_followed_and_moves_the_slot(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_a[32];
    subject_on(true, on_a, sizeof(on_a));
    node_a.mode = MOVED_TO_PEER;
    struct limiter_result r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_DECIDED);
    assert_true(r.allowed);
    assert_int_equal(node_a.evalsha, 1);
    assert_int_equal(node_b.evalsha, 1);
    /* the slot's owner changed at once: the next check goes straight to B */
    r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_DECIDED);
    assert_int_equal(node_a.evalsha, 1);
    assert_int_equal(node_b.evalsha, 2);
    assert_int_equal(node_b.asking, 0);
    unmake(l);
}

static void test_ask_sends_asking_then_the_call_and_keeps_the_map(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_a[32];
    subject_on(true, on_a, sizeof(on_a));
    node_a.mode = ASK_TO_PEER;
    for (int i = 1; i <= 2; i++) {
        struct limiter_result r = check(l, on_a);
        assert_int_equal(r.status, LIMITER_DECIDED);
        assert_true(r.allowed);
        /* each check asks A first (the slot is still A's), then B with ASKING right before */
        assert_int_equal(node_a.evalsha, i);
        assert_int_equal(node_b.evalsha, i);
        assert_int_equal(node_b.asking, i);
        assert_int_equal(node_b.asking_then_evalsha, i);
    }
    unmake(l);
}

static void test_a_redirect_loop_ends_unavailable(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_a[32];
    subject_on(true, on_a, sizeof(on_a));
    node_a.mode = MOVED_TO_PEER;
    node_b.mode = MOVED_TO_PEER;
    struct limiter_result r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_UNAVAILABLE);
    /* the first call and two redirects, no more */
    assert_int_equal(node_a.evalsha + node_b.evalsha, 3);
    unmake(l);
}

/* A check whose keys are half migrated (TRYAGAIN) is sent again a moment later, until the
 * node answers it, or at most 10 times more. */
static void test_tryagain_is_retried_a_moment_later(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_a[32];
    subject_on(true, on_a, sizeof(on_a));
    node_a.mode = SAY_TRYAGAIN;
    node_a.try_again_left = 2;
    struct limiter_result r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_DECIDED);
    assert_true(r.allowed);
    assert_int_equal(node_a.evalsha, 3);
    node_a.try_again_left = 1000;
    node_a.evalsha = 0;
    r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_UNAVAILABLE);
    assert_int_equal(node_a.evalsha, 11);
    /* destroyed while a check waits to be sent again: it is answered, once */
    struct answer a = {0};
    assert_int_equal(limiter_check(l, on_a, strlen(on_a), &ten_per_min, 1, -1, on_done, &a), 0);
    int64_t until = store_mono_ms() + 2000;
    while (node_a.evalsha < 12 && store_mono_ms() < until) {
        bool never = false;
        run_until(&never, 1);
    }
    assert_int_equal(node_a.evalsha, 12);
    assert_false(a.done);
    limiter_destroy(l);
    assert_true(a.done);
    assert_int_equal(a.result.status, LIMITER_UNAVAILABLE);
    fake_stop(&node_a);
    fake_stop(&node_b);
    event_base_free(base);
}

struct listed {
    int n, up;
    char names[4][64];
};

static void on_node(void *arg, const struct limiter_node_info *info)
{
    struct listed *ls = arg;
    if (ls->n < 4)
        snprintf(ls->names[ls->n], sizeof(ls->names[0]), "%s", info->name);
    ls->n++;
    ls->up += info->up;
}

static void test_a_dead_master_fails_only_its_slots_at_once(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_a[32], on_b[32];
    subject_on(true, on_a, sizeof(on_a));
    subject_on(false, on_b, sizeof(on_b));
    struct listed ls = {0};
    assert_int_equal(limiter_nodes(l, on_node, &ls), 2);
    assert_int_equal(ls.up, 2);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d", node_b.port);
    assert_true(strcmp(ls.names[0], want) == 0 || strcmp(ls.names[1], want) == 0);

    fake_stop(&node_b);
    /* the limiter sees the connection go */
    int64_t until = store_mono_ms() + 2000;
    while (limiter_available(l) && store_mono_ms() < until) {
        bool never = false;
        run_until(&never, 10);
    }
    assert_false(limiter_available(l));
    /* B's subjects: unavailable before limiter_check returns (no wait on a dead node) */
    struct answer a = {0};
    assert_int_equal(limiter_check(l, on_b, strlen(on_b), &ten_per_min, 1, -1, on_done, &a), 0);
    assert_true(a.done);
    assert_int_equal(a.result.status, LIMITER_UNAVAILABLE);
    /* A's subjects: decided as before */
    struct limiter_result r = check(l, on_a);
    assert_int_equal(r.status, LIMITER_DECIDED);
    memset(&ls, 0, sizeof(ls));
    assert_int_equal(limiter_nodes(l, on_node, &ls), 2);
    assert_int_equal(ls.up, 1);
    unmake(l);
}

/* A dead master the map no longer lists (its replica took over) is not reconnected to over
 * and over; its slots go to the master the map names. */
static void test_a_master_gone_from_the_map_is_not_called_again(void **state)
{
    (void)state;
    struct limiter *l = make();
    char on_b[32];
    subject_on(false, on_b, sizeof(on_b));
    b_in_map = false;
    fake_stop(&node_b);
    /* B's subjects meet the dead node: unavailable, and a new map is asked for */
    int64_t until = store_mono_ms() + 3000;
    struct limiter_result r;
    do {
        r = check(l, on_b);
        bool never = false;
        run_until(&never, 20);
    } while (r.status != LIMITER_DECIDED && store_mono_ms() < until);
    assert_int_equal(r.status, LIMITER_DECIDED);   /* now on A, which the map says serves it */
    assert_true(limiter_available(l));
    struct listed ls = {0};
    assert_int_equal(limiter_nodes(l, on_node, &ls), 1);
    /* B's address answers again: nothing connects to it (no attempts while it is out) */
    fake_listen(&node_b, node_b.port);
    node_b.accepted = 0;
    bool never = false;
    run_until(&never, 1000);
    assert_int_equal(node_b.accepted, 0);
    unmake(l);
}

static void test_creation_errors(void **state)
{
    (void)state;
    struct event_base *b = event_base_new();
    char err[256];
    struct redis_store_options o = {.url = "redis://127.0.0.1:7000/0", .key_prefix = "tp{x}:"};
    assert_null(limiter_redis_cluster_create(b, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "'{'"));
    o.key_prefix = "t:";
    o.url = "redis://:s3cret@127.0.0.1:7000/0,unix:///tmp/x.sock";
    assert_null(limiter_redis_cluster_create(b, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "seed 2"));
    assert_null(strstr(err, "s3cret"));
    /* no seed answers: checks are unavailable at once, nothing listed */
    o.url = "redis://127.0.0.1:1/0";
    struct limiter *l = limiter_redis_cluster_create(b, &o, err, sizeof(err));
    assert_non_null(l);
    struct answer a = {0};
    assert_int_equal(limiter_check(l, "u:1", 3, &ten_per_min, 1, -1, on_done, &a), 0);
    assert_true(a.done);
    assert_int_equal(a.result.status, LIMITER_UNAVAILABLE);
    assert_false(limiter_available(l));
    struct listed ls = {0};
    assert_int_equal(limiter_nodes(l, on_node, &ls), 0);
    limiter_destroy(l);
    event_base_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checks_go_to_their_slots_master),
        cmocka_unit_test(test_moved_is_followed_and_moves_the_slot),
        cmocka_unit_test(test_ask_sends_asking_then_the_call_and_keeps_the_map),
        cmocka_unit_test(test_a_redirect_loop_ends_unavailable),
        cmocka_unit_test(test_tryagain_is_retried_a_moment_later),
        cmocka_unit_test(test_a_dead_master_fails_only_its_slots_at_once),
        cmocka_unit_test(test_a_master_gone_from_the_map_is_not_called_again),
        cmocka_unit_test(test_creation_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
