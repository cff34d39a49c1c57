/* The Redis limiter's checks: one check.lua call per check (EVALSHA, the keys, the clock,
 * the rules packed in one argument, the lease id), its packed answer, and what an allowed
 * leased check adds to the limiter's leases. Part of the Redis limiter
 * (store/redis/limiter_redis.c says how it works). */
#include "store/redis/limiter_redis_private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/clock.h"

/* Raised by any limiter of the process whose check found that Redis had lost leases this
 * process holds (a FLUSHALL, a Redis restarted empty under a live connection): each
 * limiter renews its own leases at its next check, so they are all back at once rather
 * than at each one's next timer. */
static _Atomic uint64_t leases_lost_epoch;

/* Bytes a rule takes in check.lua's ARGV[2]. */
#define RULE_BYTES 43

/* The rules as check.lua's ARGV[2], one argument: per rule its kind (a byte), then rate,
 * burst, window (a quota: its period), cost, and a quota's period [from, to) holding now
 * on this clock (a concurrency rule: the leases held, 0; others 0, 0), each 7 bytes
 * big-endian (every one is below 2^52:
 * limit_rule_validate). One string instead of 5 arguments a rule, because Redis makes a
 * Lua string and a table slot of every argument on every call; the period spares the
 * script its calendar arithmetic whenever the clocks agree on it. */
static void put_rules(struct pending *p, size_t *off, const struct limit_rule *rules, size_t n, int64_t now_ms)
{
    unsigned char *out = (unsigned char *)p->buf + *off;
    int64_t clock_ms = now_ms;
    for (size_t i = 0; i < n; i++) {
        const struct limit_rule *r = &rules[i];
        bool quota = r->kind == LIMIT_QUOTA;
        if (quota && clock_ms < 0)
            clock_ms = store_realtime_ms();
        const int64_t fields[6] = {
            r->rate,
            r->burst,
            quota ? (int64_t)r->period : r->window_ms,
            r->kind == LIMIT_CONCURRENCY ? 1 : limit_rule_cost(r),
            quota ? limit_period_start_ms(r->period, clock_ms) : r->kind == LIMIT_CONCURRENCY ? r->held : 0,
            quota ? limit_period_end_ms(r->period, clock_ms) : 0,
        };
        *out++ = (unsigned char)r->kind;
        for (int f = 0; f < 6; f++)
            for (int shift = 48; shift >= 0; shift -= 8)
                *out++ = (unsigned char)((uint64_t)fields[f] >> shift);
    }
    redis_put_arg_length(p, off, n * RULE_BYTES);
}

/* A signed 56-bit big-endian integer (check.lua's struct 'i7'). */
static int64_t read_i7(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 7; i++)
        v = v << 8 | b[i];
    if (v & ((uint64_t)1 << 55))
        v |= ~(((uint64_t)1 << 56) - 1);   /* negative: extend the sign */
    return (int64_t)v;
}

/* check.lua's answer: one string, now (i7) and all allowed (a byte), then per rule allowed
 * (a byte), limit, remaining and reset (i7 each). */
static int parse_reply(const redisReply *reply, size_t n, struct limiter_result *res, bool *plost)
{
    if (reply->type != REDIS_REPLY_STRING || reply->len != 8 + 22 * n)
        return -1;
    const unsigned char *b = (const unsigned char *)reply->str;
    memset(res, 0, sizeof(*res));
    res->status = LIMITER_DECIDED;
    res->n = n;
    res->now_ms = read_i7(b);
    res->allowed = (b[7] & 1) != 0;
    *plost = (b[7] & 2) != 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *v = b + 8 + 22 * i;
        res->verdicts[i].allowed = v[0] == 1;
        res->verdicts[i].limit = read_i7(v + 1);
        res->verdicts[i].remaining = read_i7(v + 8);
        res->verdicts[i].reset_ms = read_i7(v + 15);
    }
    return 0;
}

void redis_on_check_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply *reply = r;
    struct pending *p = privdata;
    if (redis_script_sent_again(ac, p, reply))
        return;
    struct redis_limiter *rl = p->rl;
    struct cluster_redirect redirect;
    if (p->redirected != NULL && reply != NULL && reply->type == REDIS_REPLY_ERROR) {
        /* nothing was recorded: the cluster limiter sends the call where it is told, or
           again in a moment (TRYAGAIN: the keys of its slot are half migrated) */
        int parsed = cluster_redirect_parse(reply->str, reply->len, &redirect);
        bool again = parsed == 1 && reply->len >= 8 && memcmp(reply->str, "TRYAGAIN", 8) == 0;
        if (parsed == 0 || again) {
            if (parsed == 0 && redirect.host[0] == '\0')
                snprintf(redirect.host, sizeof(redirect.host), "%s", rl->url.host);
            limiter_redirect_fn *redirected = p->redirected;
            void *arg = p->arg;
            redis_pending_free(p);
            redirected(arg, parsed == 0 ? &redirect : NULL);
            return;
        }
    }

    struct limiter_result res;
    if (reply == NULL && p->lease != NULL) {
        /* Sent, never answered (timed out, or the connection went): Redis may still have
           recorded the leases (a frozen Redis runs what it had read once it thaws). The
           check counts as failed and holds nothing here, so they are taken back: the ZREMs
           go first on the next connection. (Should Redis run the old connection's check
           after them, the lease ends at its TTL, as before.) */
        for (size_t i = 0; i < p->lease->n; i++)
            redis_send_zrem(rl, p->lease->subject, p->lease->subject_len, p->lease->rule_id[i], p->lease->id,
                      p->lease->id_len);
    }
    bool lost = false;
    if (reply == NULL || parse_reply(reply, p->n, &res, &lost) != 0) {
        if (reply != NULL)
            redis_note_error(rl, "check", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        limiter_result_unavailable(&res, p->n);
    } else if (res.allowed && p->lease != NULL && redis_track_leases(rl, p->lease) != 0) {
        limiter_result_unavailable(&res, p->n);
    } else if (res.allowed) {
        store_status_ok(&rl->status);
    }
    if (lost) {
        /* Redis holds fewer of this process's leases than it has: put them all back */
        rl->lost_epoch_seen = atomic_fetch_add(&leases_lost_epoch, 1) + 1;
        redis_renew_now(rl);
    }
    limiter_done_fn *done = p->done;
    void *arg = p->arg;
    redis_pending_free(p);
    done(arg, &res);
}

/* Answers a check that was not sent: every rule store_unavailable. */
static void answer_unavailable(size_t n, limiter_done_fn *done, void *arg)
{
    struct limiter_result res;
    limiter_result_unavailable(&res, n);
    done(arg, &res);
}

/* What an allowed leased check adds to the limiter's leases: the subject, the lease id and
 * each concurrency rule with its TTL. NULL when out of memory. */
static struct lease_req *lease_req_new(const char *subject, size_t subject_len, const struct limit_rule *rules,
                                       size_t n, const char *lease_id, size_t lease_id_len)
{
    struct lease_req *lr = calloc(1, sizeof(*lr) + subject_len);
    if (lr == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind != LIMIT_CONCURRENCY)
            continue;
        lr->rule_id[lr->n] = rules[i].id;
        lr->ttl_ms[lr->n] = rules[i].window_ms;
        lr->n++;
    }
    memcpy(lr->id, lease_id, lease_id_len);
    lr->id_len = lease_id_len;
    memcpy(lr->subject, subject, subject_len);
    lr->subject_len = subject_len;
    return lr;
}

/* The call's arguments after EVALSHA sha: numkeys key... now rules [lease id]; a peek's
 * now is "peek:<now>". */
static void put_check_args(struct redis_limiter *rl, struct pending *p, const char *subject, size_t subject_len,
                           const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                           size_t lease_id_len, bool peek)
{
    size_t off = 0;
    redis_put_int(p, &off, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        redis_put_key(rl, p, &off, subject, subject_len, rules[i].id);
    if (peek) {
        char now[32];
        int len = snprintf(now, sizeof(now), "peek:%" PRId64, now_ms >= 0 ? now_ms : -1);
        redis_put_arg(p, &off, now, (size_t)len);
    } else {
        redis_put_int(p, &off, now_ms >= 0 ? now_ms : -1);
    }
    put_rules(p, &off, rules, n, now_ms);
    if (lease_id != NULL)
        redis_put_arg(p, &off, lease_id, lease_id_len);
}

/* One check.lua call: a check, or with peek a read of every rule that records nothing. */
int redis_call_check(struct limiter *limiter, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                            size_t lease_id_len, bool peek, bool asking, limiter_redirect_fn *redirected,
                            limiter_done_fn *done, void *arg)
{
    struct redis_limiter *rl = (struct redis_limiter *)limiter;
    if (rl->state != CONN_READY || rl->ac == NULL) {
        store_status_repeat(&rl->status);
        answer_unavailable(n, done, arg);
        return 0;
    }
    if (lease_id != NULL && rl->lease_grace_until_ms > 0 && store_mono_ms() < rl->lease_grace_until_ms) {
        answer_unavailable(n, done, arg);
        return 0;
    }
    /* A renewal sent now runs before this check: one connection's commands run in order. */
    uint64_t lost = atomic_load_explicit(&leases_lost_epoch, memory_order_relaxed);
    if (lost != rl->lost_epoch_seen || rl->unregistered) {
        rl->lost_epoch_seen = lost;
        redis_renew_now(rl);
    }

    size_t kmax = redis_key_max(rl, subject_len);
    /* EVALSHA, sha, numkeys, n keys, now, rules, lease id: what the check's lens hold (not
       MAX_ARGS, the bound of any command: the pending is zeroed whole on every check). */
    struct pending *p = redis_pending_new(rl, P_CHECK, redis_on_check_reply, n + 6, 24 + n * kmax + 32 + n * RULE_BYTES + lease_id_len);
    if (p == NULL)
        return -ENOMEM;
    if (lease_id != NULL) {
        p->lease = lease_req_new(subject, subject_len, rules, n, lease_id, lease_id_len);
        if (p->lease == NULL) {
            redis_pending_free(p);
            return -ENOMEM;
        }
    }
    p->script = &rl->check;
    p->done = done;
    p->redirected = redirected;
    p->asking = asking;
    p->arg = arg;
    p->n = n;
    p->argc = 2;
    put_check_args(rl, p, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len, peek);
    if (redis_send_pending(rl, p) != 0) {
        redis_pending_free(p);
        answer_unavailable(n, done, arg);
    }
    return 0;
}

int redis_check(struct limiter *limiter, const char *subject, size_t subject_len,
                       const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                       size_t lease_id_len, limiter_done_fn *done, void *arg)
{
    return redis_call_check(limiter, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len, false, false,
                            NULL, done, arg);
}

int redis_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                      const struct limit_rule *rules, size_t n, int64_t now_ms, limiter_done_fn *done, void *arg)
{
    return redis_call_check(limiter, subject, subject_len, rules, n, now_ms, NULL, 0, true, false, NULL, done, arg);
}

int limiter_redis_node_call(struct limiter *node, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                            size_t lease_id_len, bool peek, bool asking, limiter_redirect_fn *redirected,
                            limiter_done_fn *done, void *arg)
{
    return redis_call_check(node, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len, peek, asking,
                            redirected, done, arg);
}
