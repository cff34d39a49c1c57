/* The Redis limiter store: one asynchronous hiredis connection per event loop, one
 * EVALSHA of check.lua per check.
 *
 * Connection life: IDLE -> CONNECTING -> HANDSHAKE (AUTH, SELECT, SCRIPT LOAD pipelined)
 * -> READY. Only READY sends checks; in any other state limiter_check answers
 * LIMITER_UNAVAILABLE at once. A failed context is never reused: it is freed and a new one
 * is made after a backoff (50 ms doubling to 1 s, back to 50 ms once READY).
 *
 * Commands in flight are kept in send order (which is reply order). A watchdog timer fails
 * the connection when the oldest has waited longer than command_timeout_ms, or when
 * connecting takes too long. Failing the connection frees the hiredis context, which calls
 * every pending reply callback with a NULL reply: that is how each check's done is called
 * exactly once, and why a check's state lives until its callback (hiredis callbacks cannot
 * be cancelled).
 *
 * limiter_destroy must not be called from inside a done callback of the same limiter. */
#include "store/limiter_impl.h"

#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>
#include <openssl/evp.h>

#include "lua_scripts.h"
#include "store/redis_url.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define DEFAULT_TIMEOUT_MS 200
#define MIN_CONNECT_TIMEOUT_MS 1000
#define MAX_ARGS (4 + 5 * LIMITER_MAX_RULES)

enum conn_state { CONN_IDLE, CONN_CONNECTING, CONN_HANDSHAKE, CONN_READY };

enum pending_kind { P_CHECK, P_AUTH, P_SELECT, P_LOAD };

/* One command in flight. A check keeps its arguments to resend them as EVAL on NOSCRIPT. */
struct pending {
    struct pending *prev, *next;
    struct redis_limiter *rl;
    int64_t sent_ms;
    enum pending_kind kind;
    bool retried;
    limiter_done_fn *done;
    void *arg;
    size_t n;
    int argc;
    size_t lens[MAX_ARGS];   /* argv[2..argc-1] lie back to back in buf */
    char buf[];
};

struct redis_limiter {
    struct limiter base;
    struct event_base *evbase;
    struct redis_url url;
    char *prefix;
    size_t prefix_len;
    int64_t timeout_ms, connect_timeout_ms;
    redisAsyncContext *ac;
    _Atomic enum conn_state state;   /* read by the admin thread for /health */
    struct event *retry, *watchdog;
    int64_t backoff_ms;
    int64_t attempt_ms;       /* when the current connection attempt started */
    struct pending *head, *tail;
    char sha[41];
    size_t script_len;
    bool destroying;
    char last_error[160];     /* for a debugger */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval ms_to_tv(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

static void note_error(struct redis_limiter *rl, const char *what, const char *detail)
{
    snprintf(rl->last_error, sizeof(rl->last_error), "%s: %s", what, detail ? detail : "?");
}

/* ---- in-flight list ---- */

static void inflight_append(struct redis_limiter *rl, struct pending *p)
{
    p->prev = rl->tail;
    p->next = NULL;
    if (rl->tail != NULL)
        rl->tail->next = p;
    else
        rl->head = p;
    rl->tail = p;
}

static void inflight_remove(struct redis_limiter *rl, struct pending *p)
{
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        rl->head = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    else
        rl->tail = p->prev;
    p->prev = p->next = NULL;
}

/* ---- connection management ---- */

static void start_connect(struct redis_limiter *rl);

static void watchdog_arm(struct redis_limiter *rl)
{
    if (evtimer_pending(rl->watchdog, NULL))
        return;
    int64_t deadline = INT64_MAX;
    if (rl->ac != NULL && rl->state != CONN_READY)
        deadline = rl->attempt_ms + rl->connect_timeout_ms;
    if (rl->head != NULL && rl->head->sent_ms + rl->timeout_ms < deadline)
        deadline = rl->head->sent_ms + rl->timeout_ms;
    if (deadline == INT64_MAX)
        return;
    int64_t wait = deadline - mono_ms();
    struct timeval tv = ms_to_tv(wait > 0 ? wait + 1 : 0);
    evtimer_add(rl->watchdog, &tv);
}

static void schedule_reconnect(struct redis_limiter *rl)
{
    if (rl->destroying || evtimer_pending(rl->retry, NULL))
        return;
    struct timeval tv = ms_to_tv(rl->backoff_ms);
    evtimer_add(rl->retry, &tv);
    rl->backoff_ms = rl->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : rl->backoff_ms * 2;
}

/* The connection is gone or going: stop using it, come back later. */
static void lost_connection(struct redis_limiter *rl)
{
    rl->ac = NULL;
    rl->state = CONN_IDLE;
    schedule_reconnect(rl);
}

/* Frees the context now (from a timer or limiter_destroy, never from a hiredis callback
 * other than a reply callback): its pending callbacks run with NULL replies. */
static void drop_connection(struct redis_limiter *rl)
{
    redisAsyncContext *ac = rl->ac;
    if (ac == NULL)
        return;
    ac->data = NULL;   /* its disconnect callback is then ours no more */
    lost_connection(rl);
    redisAsyncFree(ac); /* inside a reply callback hiredis defers this until it returns */
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    if (rl->ac == NULL)
        start_connect(rl);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    int64_t now = mono_ms();
    if (rl->ac != NULL && rl->state != CONN_READY && now >= rl->attempt_ms + rl->connect_timeout_ms) {
        note_error(rl, "connect", "timed out");
        drop_connection(rl);
    } else if (rl->head != NULL && now >= rl->head->sent_ms + rl->timeout_ms) {
        note_error(rl, "command", "timed out");
        drop_connection(rl);
    }
    watchdog_arm(rl);
}

static struct pending *pending_new(struct redis_limiter *rl, enum pending_kind kind, size_t bufsize)
{
    struct pending *p = calloc(1, sizeof(*p) + bufsize);
    if (p != NULL) {
        p->rl = rl;
        p->kind = kind;
    }
    return p;
}

/* Sends a command and puts it in flight. Returns 0, or -1 (p is then still the caller's). */
static int send_command(struct redis_limiter *rl, struct pending *p, redisCallbackFn *fn, int argc,
                        const char **argv, const size_t *lens)
{
    if (rl->ac == NULL || redisAsyncCommandArgv(rl->ac, fn, p, argc, argv, lens) != REDIS_OK)
        return -1;
    p->sent_ms = mono_ms();
    inflight_append(rl, p);
    watchdog_arm(rl);
    return 0;
}

static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    enum pending_kind kind = p->kind;
    inflight_remove(rl, p);
    free(p);
    if (reply == NULL || rl->ac != ac)
        return;   /* the connection is going away; that is handled where it goes */
    bool good = reply->type != REDIS_REPLY_ERROR;
    if (kind == P_LOAD)
        good = good && reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
               memcmp(reply->str, rl->sha, 40) == 0;
    if (!good) {
        note_error(rl, kind == P_AUTH ? "AUTH" : kind == P_SELECT ? "SELECT" : "SCRIPT LOAD",
                   reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        drop_connection(rl);
        return;
    }
    if (kind == P_LOAD) {
        rl->state = CONN_READY;
        rl->backoff_ms = BACKOFF_MIN_MS;
        evtimer_del(rl->watchdog);   /* the connect deadline no longer applies */
        watchdog_arm(rl);
    }
}

static int send_setup(struct redis_limiter *rl, enum pending_kind kind, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    struct pending *p = pending_new(rl, kind, 0);
    if (p == NULL)
        return -1;
    if (send_command(rl, p, on_setup_reply, argc, argv, lens) != 0) {
        free(p);
        return -1;
    }
    return 0;
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    struct redis_limiter *rl = cac->data;
    if (rl == NULL || rl->ac != cac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context when this returns */
        note_error(rl, "connect", cac->errstr);
        rl->ac->data = NULL;
        lost_connection(rl);
        return;
    }
    rl->state = CONN_HANDSHAKE;
    /* Pipelined; if one cannot be sent the watchdog's connect deadline drops the connection. */
    if (rl->url.has_password) {
        const char *argv[3] = {"AUTH", rl->url.username, rl->url.password};
        if (rl->url.username[0] != '\0') {
            if (send_setup(rl, P_AUTH, 3, argv) != 0)
                return;
        } else {
            argv[1] = rl->url.password;
            if (send_setup(rl, P_AUTH, 2, argv) != 0)
                return;
        }
    }
    if (rl->url.db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", rl->url.db);
        const char *argv[2] = {"SELECT", db};
        if (send_setup(rl, P_SELECT, 2, argv) != 0)
            return;
    }
    const char *argv[3] = {"SCRIPT", "LOAD", lua_check};
    send_setup(rl, P_LOAD, 3, argv);
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    struct redis_limiter *rl = cac->data;
    if (rl == NULL || rl->ac != cac)
        return;
    note_error(rl, "disconnected", cac->errstr);
    lost_connection(rl);
}

static void start_connect(struct redis_limiter *rl)
{
    redisAsyncContext *ac = rl->url.is_unix ? redisAsyncConnectUnix(rl->url.path)
                                            : redisAsyncConnect(rl->url.host, rl->url.port);
    if (ac == NULL || ac->err || redisLibeventAttach(ac, rl->evbase) != REDIS_OK) {
        note_error(rl, "connect", ac ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        schedule_reconnect(rl);
        return;
    }
    ac->data = rl;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    rl->ac = ac;
    rl->state = CONN_CONNECTING;
    rl->attempt_ms = mono_ms();
    watchdog_arm(rl);
}

/* ---- checks ---- */

static int send_check(struct redis_limiter *rl, struct pending *p);

static int parse_reply(const redisReply *reply, size_t n, struct limiter_result *res)
{
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 + 4 * n)
        return -1;
    for (size_t i = 0; i < reply->elements; i++)
        if (reply->element[i]->type != REDIS_REPLY_INTEGER)
            return -1;
    memset(res, 0, sizeof(*res));
    res->status = LIMITER_DECIDED;
    res->n = n;
    res->now_ms = reply->element[0]->integer;
    res->allowed = reply->element[1]->integer == 1;
    for (size_t i = 0; i < n; i++) {
        redisReply **e = &reply->element[2 + 4 * i];
        res->verdicts[i].allowed = e[0]->integer == 1;
        res->verdicts[i].limit = e[1]->integer;
        res->verdicts[i].remaining = e[2]->integer;
        res->verdicts[i].reset_ms = e[3]->integer;
    }
    return 0;
}

static void on_check_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    inflight_remove(rl, p);

    if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
        note_error(rl, "check", reply->str);
        /* The script cache was flushed (or a failover): send the script itself, once. */
        if (!p->retried && strncmp(reply->str, "NOSCRIPT", 8) == 0 && rl->ac == ac && rl->state == CONN_READY) {
            p->retried = true;
            if (send_check(rl, p) == 0)
                return;
        }
    }

    struct limiter_result res;
    if (reply == NULL || parse_reply(reply, p->n, &res) != 0)
        limiter_result_unavailable(&res, p->n);
    limiter_done_fn *done = p->done;
    void *arg = p->arg;
    free(p);
    done(arg, &res);
}

static int send_check(struct redis_limiter *rl, struct pending *p)
{
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    if (p->retried) {
        argv[0] = "EVAL";
        argv[1] = lua_check;
        lens[1] = rl->script_len;
    } else {
        argv[0] = "EVALSHA";
        argv[1] = rl->sha;
        lens[1] = 40;
    }
    lens[0] = strlen(argv[0]);
    const char *b = p->buf;
    for (int i = 2; i < p->argc; i++) {
        argv[i] = b;
        lens[i] = p->lens[i];
        b += p->lens[i];
    }
    return send_command(rl, p, on_check_reply, p->argc, argv, lens);
}

static void put_arg(struct pending *p, size_t *off, const char *s, size_t len)
{
    memcpy(p->buf + *off, s, len);
    *off += len;
    p->lens[p->argc++] = len;
}

static void put_int(struct pending *p, size_t *off, int64_t v)
{
    char tmp[24];
    int len = snprintf(tmp, sizeof(tmp), "%" PRId64, v);
    put_arg(p, off, tmp, (size_t)len);
}

static int redis_check(struct limiter *limiter, const char *subject, size_t subject_len,
                       const struct limit_rule *rules, size_t n, int64_t now_ms,
                       limiter_done_fn *done, void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    struct limiter_result res;
    if (rl->state != CONN_READY || rl->ac == NULL) {
        limiter_result_unavailable(&res, n);
        done(arg, &res);
        return 0;
    }

    size_t key_max = rl->prefix_len + subject_len + 24;   /* {subject}: and a 20-digit id */
    struct pending *p = pending_new(rl, P_CHECK, 24 + n * key_max + 24 + n * 4 * 24);
    if (p == NULL)
        return -ENOMEM;
    p->done = done;
    p->arg = arg;
    p->n = n;
    p->argc = 2;

    /* EVALSHA sha numkeys key... now (algorithm rate burst window)... */
    size_t off = 0;
    put_int(p, &off, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        char id[24];
        int idlen = snprintf(id, sizeof(id), "%" PRId64, rules[i].id);
        char *k = p->buf + off;
        memcpy(k, rl->prefix, rl->prefix_len);
        size_t kl = rl->prefix_len;
        k[kl++] = '{';
        memcpy(k + kl, subject, subject_len);
        kl += subject_len;
        k[kl++] = '}';
        k[kl++] = ':';
        memcpy(k + kl, id, (size_t)idlen);
        kl += (size_t)idlen;
        off += kl;
        p->lens[p->argc++] = kl;
    }
    put_int(p, &off, now_ms >= 0 ? now_ms : -1);
    for (size_t i = 0; i < n; i++) {
        put_int(p, &off, (int64_t)rules[i].algorithm);
        put_int(p, &off, rules[i].rate);
        put_int(p, &off, rules[i].burst);
        put_int(p, &off, rules[i].window_ms);
    }

    if (send_check(rl, p) != 0) {
        free(p);
        limiter_result_unavailable(&res, n);
        done(arg, &res);
    }
    return 0;
}

static void redis_destroy(struct limiter *limiter)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    rl->destroying = true;
    drop_connection(rl);   /* fails every pending check */
    event_free(rl->retry);
    event_free(rl->watchdog);
    free(rl->prefix);
    memset(&rl->url, 0, sizeof(rl->url));
    free(rl);
}

static bool redis_available(const struct limiter *limiter)
{
    const struct redis_limiter *rl = (const struct redis_limiter *)limiter;
    return rl->state == CONN_READY;
}

static const struct limiter_ops redis_ops = {
    .check = redis_check,
    .destroy = redis_destroy,
    .available = redis_available,
};

static int sha1_hex(const char *text, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
        return -1;
    for (unsigned i = 0; i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

struct limiter *limiter_redis_create(struct event_base *base, const struct redis_store_options *options,
                                     char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (base == NULL || options == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "no event loop or options");
        return NULL;
    }
    struct redis_limiter *rl = calloc(1, sizeof(*rl));
    if (rl == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        return NULL;
    }
    const char *url = options->url ? options->url : "redis://127.0.0.1:6379/0";
    if (redis_url_parse(url, &rl->url, err, errlen) != 0) {
        free(rl);
        return NULL;
    }
    const char *prefix = options->key_prefix ? options->key_prefix : "tierproxy:";
    rl->base.ops = &redis_ops;
    rl->evbase = base;
    rl->prefix = strdup(prefix);
    rl->prefix_len = strlen(prefix);
    rl->timeout_ms = options->command_timeout_ms > 0 ? options->command_timeout_ms : DEFAULT_TIMEOUT_MS;
    rl->connect_timeout_ms = rl->timeout_ms > MIN_CONNECT_TIMEOUT_MS ? rl->timeout_ms : MIN_CONNECT_TIMEOUT_MS;
    rl->backoff_ms = BACKOFF_MIN_MS;
    rl->script_len = strlen(lua_check);
    rl->retry = evtimer_new(base, on_retry, rl);
    rl->watchdog = evtimer_new(base, on_watchdog, rl);
    if (rl->prefix == NULL || rl->retry == NULL || rl->watchdog == NULL || sha1_hex(lua_check, rl->sha) != 0) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory");
        if (rl->retry)
            event_free(rl->retry);
        if (rl->watchdog)
            event_free(rl->watchdog);
        free(rl->prefix);
        free(rl);
        return NULL;
    }
    start_connect(rl);
    return &rl->base;
}
