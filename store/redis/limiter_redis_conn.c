/* The Redis limiter's connection: connecting, the handshake (AUTH, SELECT, SCRIPT LOAD),
 * reconnecting with backoff, the commands in flight (in send order, which is reply order)
 * and their watchdog, what the store's failures were (store/redis/store_status.h), and the
 * packing of a command's arguments. Part of the Redis limiter (store/redis/limiter_redis.c says
 * how it works); it knows nothing of checks or leases: a command carries its own reply
 * callback, and a connection ready again calls the limiter's connected(). */
#include "store/redis/limiter_redis_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/clock.h"
#include "store/redis/redis_async.h"
#include "store/redis/resp_format.h"

/* After a reconnect, concurrency checks wait this long (answered as unavailable): a Redis
 * that restarted empty holds only the leases of the proxies that have renewed so far,
 * and every proxy reconnects and renews within BACKOFF_MAX_MS of it coming back. */
#define LEASE_GRACE_MS 400
#define MAX_ARGS (5 + 6 * LIMITER_MAX_RULES)

/* Records why the store failed: unreachable (the connection) or an error reply. */
static void note_down(struct redis_limiter *rl, const char *what, const char *detail)
{
    store_status_fail(&rl->status, LIMITER_HEALTH_UNREACHABLE, what, detail);
}

/* An error reply's state ends when the store has answered no command with an error for
 * this long (or at once when it admits a check): a refusal writes nothing, so it proves
 * nothing under OOM, and a worker that meets no traffic must not say error for good. */
#define ERROR_SETTLE_MS 1000

void redis_note_error(struct redis_limiter *rl, const char *what, const char *detail)
{
    rl->last_error_ms = store_mono_ms();
    store_status_fail(&rl->status, LIMITER_HEALTH_ERROR, what, detail);
    if (!evtimer_pending(&rl->settle, NULL)) {
        struct timeval tv = store_ms_to_timeval(ERROR_SETTLE_MS);
        evtimer_add(&rl->settle, &tv);
    }
}

void redis_conn_on_settle(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    int64_t quiet = store_mono_ms() - rl->last_error_ms;
    if (quiet < ERROR_SETTLE_MS) {
        struct timeval tv = store_ms_to_timeval(ERROR_SETTLE_MS - quiet);
        evtimer_add(&rl->settle, &tv);
    } else if (rl->state == CONN_READY) {
        store_status_ok(&rl->status);   /* not READY: its own failure, or READY, says */
    }
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

void redis_inflight_remove(struct redis_limiter *rl, struct pending *p)
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
    int64_t wait = deadline - store_mono_ms();
    struct timeval tv = store_ms_to_timeval(wait > 0 ? wait + 1 : 0);
    evtimer_add(rl->watchdog, &tv);
}

static void schedule_reconnect(struct redis_limiter *rl)
{
    if (rl->destroying || rl->parked || evtimer_pending(rl->retry, NULL))
        return;
    struct timeval tv = store_ms_to_timeval(rl->backoff_ms);
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
void redis_conn_drop(struct redis_limiter *rl)
{
    redisAsyncContext *ac = rl->ac;
    if (ac == NULL)
        return;
    ac->data = NULL;   /* its disconnect callback is then ours no more */
    lost_connection(rl);
    redisAsyncFree(ac); /* inside a reply callback hiredis defers this until it returns */
}

void redis_conn_on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    if (rl->ac == NULL && !rl->parked)
        redis_conn_start(rl);
}

void redis_conn_on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct redis_limiter *rl = arg;
    int64_t now = store_mono_ms();
    if (rl->ac != NULL && rl->state != CONN_READY && now >= rl->attempt_ms + rl->connect_timeout_ms) {
        note_down(rl, "connect", "timed out");
        redis_conn_drop(rl);
    } else if (rl->head != NULL && now >= rl->head->sent_ms + rl->timeout_ms) {
        note_down(rl, "command", "timed out");
        redis_conn_drop(rl);
    }
    watchdog_arm(rl);
}

/* A pending command with room for max_args arguments of bufsize bytes in all. */
struct pending *redis_pending_new(struct redis_limiter *rl, enum pending_kind kind, redisCallbackFn *on_reply,
                                  size_t max_args, size_t bufsize)
{
    struct pending *p = calloc(1, sizeof(*p) + max_args * sizeof(size_t) + bufsize);
    if (p != NULL) {
        p->rl = rl;
        p->on_reply = on_reply;
        p->kind = kind;
        p->buf = (char *)(p->lens + max_args);
    }
    return p;
}

void redis_pending_free(struct pending *p)
{
    free(p->lease);
    free(p);
}

/* Commands up to this size (every check but an EVAL after NOSCRIPT) are framed on the stack. */
#define FRAME_STACK_BYTES 2048

/* Sends a command and puts it in flight. Returns 0, or -1 (p is then still the caller's). */
static int send_command(struct redis_limiter *rl, struct pending *p, redisCallbackFn *fn, int argc,
                        const char **argv, const size_t *lens)
{
    if (rl->ac == NULL)
        return -1;
    size_t total = 0;
    for (int i = 0; i < argc; i++)
        total += lens[i];
    size_t bound = resp_format_bound(argc, total);
    char stack_frame[FRAME_STACK_BYTES];
    char *frame = bound <= sizeof(stack_frame) ? stack_frame : malloc(bound);
    if (frame == NULL)
        return -1;
    size_t len = resp_format(frame, argc, argv, lens);
    int rc = redisAsyncFormattedCommand(rl->ac, fn, p, frame, len);
    if (frame != stack_frame)
        free(frame);
    if (rc != REDIS_OK)
        return -1;
    p->sent_ms = store_mono_ms();
    inflight_append(rl, p);
    watchdog_arm(rl);
    return 0;
}

static void send_after_login(struct redis_limiter *rl);

static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    struct redis_limiter *rl = p->rl;
    redisReply *reply = r;
    enum pending_kind kind = p->kind;
    redis_inflight_remove(rl, p);
    free(p);
    if (reply == NULL || rl->ac != ac)
        return;   /* the connection is going away; that is handled where it goes */
    bool good = reply->type != REDIS_REPLY_ERROR;
    const struct script *script = kind == P_LOAD ? &rl->check : &rl->renew;
    if (kind == P_LOAD || kind == P_LOAD_RENEW)
        good = good && reply->type == REDIS_REPLY_STRING && reply->len == 40 &&
               memcmp(reply->str, script->sha, 40) == 0;
    if (!good) {
        redis_note_error(rl, kind == P_AUTH ? "AUTH" : kind == P_SELECT ? "SELECT" : "SCRIPT LOAD",
                   reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        redis_conn_drop(rl);
        return;
    }
    if (kind == P_AUTH)
        send_after_login(rl);
    if (kind == P_LOAD) {   /* the last of the handshake */
        if (rl->was_ready)
            rl->lease_grace_until_ms = store_mono_ms() + LEASE_GRACE_MS;
        rl->was_ready = true;
        rl->state = CONN_READY;
        rl->backoff_ms = BACKOFF_MIN_MS;
        evtimer_del(rl->watchdog);   /* the connect deadline no longer applies */
        watchdog_arm(rl);
        store_status_ok(&rl->status);
        rl->connected(rl);   /* first on this connection, before any check */
    }
}

static int send_setup(struct redis_limiter *rl, enum pending_kind kind, int argc, const char **argv)
{
    size_t lens[4];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    struct pending *p = redis_pending_new(rl, kind, on_setup_reply, 0, 0);
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
        /* hiredis frees the context when this returns. A TLS certificate that is not
           trusted is a store that answers wrongly, as a refused login is: an error. */
        if (cac->err == REDIS_ERR_OTHER)
            redis_note_error(rl, "connect", cac->errstr);
        else
            note_down(rl, "connect", cac->errstr);
        rl->ac->data = NULL;
        lost_connection(rl);
        return;
    }
    rl->state = CONN_HANDSHAKE;
    if (!rl->url.has_password) {
        send_after_login(rl);
        return;
    }
    /* Alone: the rest waits for its answer (send_after_login). */
    const char *argv[3] = {"AUTH", rl->url.username, rl->url.password};
    if (rl->url.username[0] != '\0') {
        send_setup(rl, P_AUTH, 3, argv);
    } else {
        argv[1] = rl->url.password;
        send_setup(rl, P_AUTH, 2, argv);
    }
}

/* The handshake after the login, pipelined: SELECT, then both scripts. Redis drops a client
 * that sends a command over 16 KiB before it has logged in (the check script is larger), and
 * the drop would hide AUTH's answer, so these wait for it. If one cannot be sent, the
 * watchdog's connect deadline drops the connection. */
static void send_after_login(struct redis_limiter *rl)
{
    if (rl->url.db != 0 && !rl->cluster_node) {
        char db[16];
        snprintf(db, sizeof(db), "%d", rl->url.db);
        const char *argv[2] = {"SELECT", db};
        if (send_setup(rl, P_SELECT, 2, argv) != 0)
            return;
    }
    const char *load_renew[3] = {"SCRIPT", "LOAD", rl->renew.text};
    if (send_setup(rl, P_LOAD_RENEW, 3, load_renew) != 0)
        return;
    const char *argv[3] = {"SCRIPT", "LOAD", rl->check.text};
    send_setup(rl, P_LOAD, 3, argv);
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    struct redis_limiter *rl = cac->data;
    if (rl == NULL || rl->ac != cac)
        return;
    note_down(rl, "disconnected", cac->errstr[0] != '\0' ? cac->errstr : "connection closed");
    lost_connection(rl);
}

void redis_conn_start(struct redis_limiter *rl)
{
    char why[128];
    redisAsyncContext *ac = redis_async_open(rl->evbase, rl->tls, rl->url.host, rl->url.port,
                                             rl->url.is_unix ? rl->url.path : NULL, rl, on_connect, on_disconnect,
                                             why, sizeof(why));
    if (ac == NULL) {
        note_down(rl, "connect", why);
        schedule_reconnect(rl);
        return;
    }
    rl->ac = ac;
    rl->state = CONN_CONNECTING;
    rl->attempt_ms = store_mono_ms();
    watchdog_arm(rl);
}

/* ---- script calls ---- */

static void on_asking_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct pending *p = privdata;
    redis_inflight_remove(p->rl, p);
    free(p);   /* an error here shows in the call that follows: it gets MOVED */
}

/* Sends p (again, after NOSCRIPT: as EVAL). Returns 0, or -1 (p is then still the caller's). */
int redis_send_pending(struct redis_limiter *rl, struct pending *p)
{
    if (p->asking) {
        /* back to back on one connection: Redis applies ASKING to the next command alone */
        struct pending *a = redis_pending_new(rl, P_ASKING, on_asking_reply, 0, 0);
        static const char *asking[1] = {"ASKING"};
        static const size_t asking_len[1] = {6};
        if (a == NULL)
            return -1;
        if (send_command(rl, a, on_asking_reply, 1, asking, asking_len) != 0) {
            free(a);
            return -1;
        }
    }
    const char *stack_argv[MAX_ARGS];
    const char **argv = stack_argv;
    if (p->argc > MAX_ARGS) {
        argv = malloc((size_t)p->argc * sizeof(*argv));
        if (argv == NULL)
            return -1;
    }
    int first = 0;
    if (p->script != NULL) {
        if (p->retried) {
            argv[0] = "EVAL";
            argv[1] = p->script->text;
            p->lens[0] = 4;
            p->lens[1] = p->script->len;
        } else {
            argv[0] = "EVALSHA";
            argv[1] = p->script->sha;
            p->lens[0] = 7;
            p->lens[1] = 40;
        }
        first = 2;
    }
    const char *b = p->buf;
    for (int i = first; i < p->argc; i++) {
        argv[i] = b;
        b += p->lens[i];
    }
    int r = send_command(rl, p, p->on_reply, p->argc, argv, p->lens);
    if (argv != stack_argv)
        free(argv);
    return r;
}

bool redis_script_sent_again(redisAsyncContext *ac, struct pending *p, const redisReply *reply)
{
    struct redis_limiter *rl = p->rl;
    redis_inflight_remove(rl, p);
    if (reply == NULL || reply->type != REDIS_REPLY_ERROR)
        return false;
    if (p->script == NULL || p->retried || strncmp(reply->str, "NOSCRIPT", 8) != 0 || rl->ac != ac ||
        rl->state != CONN_READY)
        return false;
    p->retried = true;
    return redis_send_pending(rl, p) == 0;
}

void redis_put_arg(struct pending *p, size_t *off, const char *s, size_t len)
{
    memcpy(p->buf + *off, s, len);
    *off += len;
    p->lens[p->argc++] = len;
}

/* An argument already written at p->buf + *off. */
void redis_put_arg_length(struct pending *p, size_t *off, size_t len)
{
    *off += len;
    p->lens[p->argc++] = len;
}

void redis_put_int(struct pending *p, size_t *off, int64_t v)
{
    redis_put_arg_length(p, off, resp_write_int(p->buf + *off, v));
}

/* Bytes a key takes at most: "<prefix>{<subject>}:<rule id>". */
size_t redis_key_max(const struct redis_limiter *rl, size_t subject_len)
{
    return rl->prefix_len + subject_len + 24;
}

void redis_put_key(struct redis_limiter *rl, struct pending *p, size_t *off, const char *subject,
                    size_t subject_len, int64_t rule_id)
{
    char *k = p->buf + *off;
    memcpy(k, rl->prefix, rl->prefix_len);
    size_t kl = rl->prefix_len;
    k[kl++] = '{';
    memcpy(k + kl, subject, subject_len);
    kl += subject_len;
    k[kl++] = '}';
    k[kl++] = ':';
    kl += resp_write_int(k + kl, rule_id);
    *off += kl;
    p->lens[p->argc++] = kl;
}

