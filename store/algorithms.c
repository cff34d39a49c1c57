/* The arithmetic of each rule kind, in integer ms, for the memory store (and
 * store/local_limit.c). check.lua does the same arithmetic for the Redis store, but on its
 * own layout, so it is no line-by-line copy: a sliding log there is a list whose last entry
 * carries the count and the oldest times (here a ring of timestamps), the window-indexed
 * kinds are hashes tagged "<kind>:<window_ms>", and a concurrency rule is a sorted set of
 * leases scored by their expiry (here a count: one process knows when its leases end).
 * Change both together: tests/unit/store/test_limiter_redis.c runs both stores on the
 * same sequences and requires identical verdicts.
 *
 * Evaluation fields (struct algo_eval a, b, c) per kind:
 *   sliding-log:    a = entries in (te - W, te], b = ring index of the first of them
 *   sliding-window: a = current window index, b = its count, c = previous window's count
 *   token-bucket:   a = level (tokens * W) at te
 *   fixed-window:   a = window index, b = its count
 *   concurrency:    a = leases held (after the commit, once committed) */
#include "store/algorithms.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* a >= 0, b > 0 */
static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

static int64_t capacity(const struct limit_rule *rule)
{
    return rule->rate + rule->burst;
}

/* A sliding log is a log of timestamps, meaningful under any window; the other states are
 * scaled by or indexed with the window, so they only carry over under the same one. */
static bool compatible(const struct algo_state *s, const struct limit_rule *rule)
{
    if (s->kind != (int)rule->kind)
        return false;
    /* A concurrency state is a count of leases; its window is their TTL, which may change
     * while they are held. */
    return rule->kind == LIMIT_SLIDING_LOG || rule->kind == LIMIT_CONCURRENCY ||
           s->window_ms == rule->window_ms;
}

void algo_state_init(struct algo_state *s)
{
    memset(s, 0, sizeof(*s));
    s->kind = -1;
}

void algo_state_clear(struct algo_state *s)
{
    if (s->kind == LIMIT_SLIDING_LOG)
        free(s->u.sl.ts);
    algo_state_init(s);
}

/* ---- sliding log: a ring of allowed timestamps, oldest first, non-decreasing ---- */

static int64_t sl_at(const struct algo_state *s, uint32_t i)
{
    return s->u.sl.ts[(s->u.sl.head + i) & (s->u.sl.cap - 1)];
}

static void sl_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    uint32_t len = ev->stale || s->kind < 0 ? 0 : s->u.sl.len;
    int64_t te = now;
    if (len > 0 && sl_at(s, len - 1) > te)
        te = sl_at(s, len - 1);
    int64_t lo = te - rule->window_ms;
    uint32_t first = len;
    if (len > 0 && sl_at(s, len - 1) > lo) {
        uint32_t l = 0, r = len - 1;   /* first index with ts > lo; ts[len-1] > lo */
        while (l < r) {
            uint32_t m = l + (r - l) / 2;
            if (sl_at(s, m) > lo)
                r = m;
            else
                l = m + 1;
        }
        first = l;
    }
    ev->te = te;
    ev->a = (int64_t)(len - first);
    ev->b = first;
    ev->allowed = ev->a < capacity(rule);
}

static int sl_reserve(struct algo_state *s, struct algo_eval *ev)
{
    if (s->kind != LIMIT_SLIDING_LOG) {
        algo_state_clear(s);   /* empty or stale: the decision already treated it as empty */
        s->kind = LIMIT_SLIDING_LOG;
    }
    uint64_t need = (uint64_t)ev->a + 1;
    if (need <= s->u.sl.cap)
        return 0;
    if (need > UINT32_MAX / 2)
        return -ENOMEM;
    uint32_t cap = s->u.sl.cap ? s->u.sl.cap : 4;
    while (cap < need)
        cap *= 2;
    int64_t *ts = malloc((size_t)cap * sizeof(*ts));
    if (ts == NULL)
        return -ENOMEM;
    /* Keep only the entries still in the window; they move to the front. */
    uint32_t n = (uint32_t)ev->a;
    for (uint32_t i = 0; i < n; i++)
        ts[i] = sl_at(s, (uint32_t)ev->b + i);
    free(s->u.sl.ts);
    s->u.sl.ts = ts;
    s->u.sl.head = 0;
    s->u.sl.len = n;
    s->u.sl.cap = cap;
    ev->b = 0;
    return 0;
}

static void sl_commit(struct algo_state *s, struct algo_eval *ev)
{
    uint32_t first = (uint32_t)ev->b;
    s->u.sl.head = (s->u.sl.head + first) & (s->u.sl.cap - 1);
    s->u.sl.len -= first;
    s->u.sl.ts[(s->u.sl.head + s->u.sl.len) & (s->u.sl.cap - 1)] = ev->te;
    s->u.sl.len++;
    ev->a++;
    ev->b = 0;
}

static void sl_verdict(const struct algo_state *s, const struct limit_rule *rule, const struct algo_eval *ev,
                       struct limit_verdict *v)
{
    int64_t c = capacity(rule), n = ev->a, w = rule->window_ms;
    if (!ev->allowed) {
        /* Allowed again once enough of the window's entries expired to leave n - 1 < C:
         * when the (n - C + 1)th oldest does, i.e. at its time + W. */
        v->remaining = 0;
        v->reset_ms = sl_at(s, (uint32_t)(ev->b + n - c)) + w - ev->te;
    } else {
        v->remaining = c - n;
        v->reset_ms = n > 0 ? sl_at(s, (uint32_t)ev->b) + w - ev->te : 0;
    }
}

/* ---- sliding window: previous window's count weighted by its overlap ---- */

static void sw_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    bool have = !ev->stale && s->kind >= 0;
    int64_t w = rule->window_ms;
    int64_t te = now;
    if (have && te < s->u.sw.w * w)
        te = s->u.sw.w * w;
    int64_t idx = floor_div(te, w);
    int64_t cur = 0, prev = 0;
    if (have && idx == s->u.sw.w) {
        cur = s->u.sw.cur;
        prev = s->u.sw.prev;
    } else if (have && idx == s->u.sw.w + 1) {
        prev = s->u.sw.cur;
    }
    int64_t e = te - idx * w;
    ev->te = te;
    ev->a = idx;
    ev->b = cur;
    ev->c = prev;
    ev->allowed = prev * (w - e) + cur * w < capacity(rule) * w;
}

/* The smallest wait after which `avail` + 1 requests could be admitted, with no other
 * traffic. In the current window the previous count's weight shrinks; in the next one the
 * current count becomes the previous; the window after that starts empty. */
static int64_t sw_reset(int64_t c, int64_t w, int64_t e, int64_t cur, int64_t prev, int64_t avail)
{
    if (avail >= c)
        return 0;
    int64_t r = (c - (cur + avail)) * w;
    if (prev > 0 && r > 0) {
        int64_t d = w - e - ceil_div(r, prev) + 1;
        if (d < w - e)
            return d;
    }
    if (cur == 0)
        return w - e;
    int64_t d2 = w - ceil_div((c - avail) * w, cur) + 1;
    if (d2 < 0)
        d2 = 0;
    return w - e + d2;
}

static void sw_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t c = capacity(rule), w = rule->window_ms;
    int64_t e = ev->te - ev->a * w, cur = ev->b, prev = ev->c;
    int64_t d = c * w - prev * (w - e);
    int64_t avail = d > 0 ? ceil_div(d, w) - cur : 0;
    if (avail < 0)
        avail = 0;
    v->remaining = avail;
    v->reset_ms = sw_reset(c, w, e, cur, prev, avail);
}

/* ---- token bucket: level in [0, C*W], +rate per ms, a request costs W ---- */

static void tb_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    int64_t w = rule->window_ms, cw = capacity(rule) * w;
    int64_t te = now, level = cw;
    if (!ev->stale && s->kind >= 0) {
        if (te < s->u.tb.t)
            te = s->u.tb.t;
        level = s->u.tb.level;
        if (level >= cw || te - s->u.tb.t >= ceil_div(cw - level, rule->rate))
            level = cw;
        else
            level += (te - s->u.tb.t) * rule->rate;
    }
    ev->te = te;
    ev->a = level;
    ev->allowed = level >= w;
}

static void tb_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t w = rule->window_ms, cw = capacity(rule) * w, level = ev->a;
    int64_t avail = level / w;
    v->remaining = avail;
    v->reset_ms = level >= cw ? 0 : ceil_div((avail + 1) * w - level, rule->rate);
}

/* ---- fixed window ---- */

static void fw_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    bool have = !ev->stale && s->kind >= 0;
    int64_t w = rule->window_ms;
    int64_t te = now;
    if (have && te < s->u.fw.w * w)
        te = s->u.fw.w * w;
    int64_t idx = floor_div(te, w);
    ev->te = te;
    ev->a = idx;
    ev->b = have && idx == s->u.fw.w ? s->u.fw.n : 0;
    ev->allowed = ev->b < capacity(rule);
}

static void fw_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t c = capacity(rule), w = rule->window_ms, count = ev->b;
    v->remaining = count < c ? c - count : 0;
    v->reset_ms = count == 0 ? 0 : (ev->a + 1) * w - ev->te;
}

/* ---- concurrency: a count of leases held ---- */

static void cc_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    ev->te = now;
    ev->a = !ev->stale && s->kind >= 0 ? s->u.cc.held : 0;
    ev->allowed = ev->a < capacity(rule);
}

static void cc_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t c = capacity(rule);
    if (ev->allowed) {
        v->remaining = ev->a < c ? c - ev->a : 0;
        v->reset_ms = 0;
    } else {
        v->remaining = 0;
        v->reset_ms = 1000;
    }
}

bool algo_release(struct algo_state *s)
{
    if (s->kind != LIMIT_CONCURRENCY || s->u.cc.held <= 0)
        return false;
    s->u.cc.held--;
    return true;
}

/* ---- dispatch ---- */

void algo_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    memset(ev, 0, sizeof(*ev));
    ev->stale = s->kind >= 0 && !compatible(s, rule);
    switch (rule->kind) {
    case LIMIT_SLIDING_LOG: sl_decide(s, rule, now, ev); break;
    case LIMIT_SLIDING_WINDOW: sw_decide(s, rule, now, ev); break;
    case LIMIT_TOKEN_BUCKET: tb_decide(s, rule, now, ev); break;
    case LIMIT_FIXED_WINDOW: fw_decide(s, rule, now, ev); break;
    case LIMIT_CONCURRENCY: cc_decide(s, rule, now, ev); break;
    }
}

int algo_reserve(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev)
{
    if (rule->kind == LIMIT_SLIDING_LOG)
        return sl_reserve(s, ev);
    if (s->kind >= 0 && !compatible(s, rule))
        algo_state_clear(s);
    return 0;
}

void algo_commit(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev)
{
    s->window_ms = rule->window_ms;
    s->kind = (int)rule->kind;
    ev->stale = false;
    switch (rule->kind) {
    case LIMIT_SLIDING_LOG:
        sl_commit(s, ev);
        break;
    case LIMIT_SLIDING_WINDOW:
        ev->b++;
        s->u.sw.w = ev->a;
        s->u.sw.cur = ev->b;
        s->u.sw.prev = ev->c;
        break;
    case LIMIT_TOKEN_BUCKET:
        ev->a -= rule->window_ms;
        s->u.tb.level = ev->a;
        s->u.tb.t = ev->te;
        break;
    case LIMIT_FIXED_WINDOW:
        ev->b++;
        s->u.fw.w = ev->a;
        s->u.fw.n = ev->b;
        break;
    case LIMIT_CONCURRENCY:
        ev->a++;
        s->u.cc.held = ev->a;
        break;
    }
}

void algo_verdict(const struct algo_state *s, const struct limit_rule *rule, const struct algo_eval *ev,
                  struct limit_verdict *v)
{
    v->allowed = ev->allowed;
    v->limit = capacity(rule);
    switch (rule->kind) {
    case LIMIT_SLIDING_LOG: sl_verdict(s, rule, ev, v); break;
    case LIMIT_SLIDING_WINDOW: sw_verdict(rule, ev, v); break;
    case LIMIT_TOKEN_BUCKET: tb_verdict(rule, ev, v); break;
    case LIMIT_FIXED_WINDOW: fw_verdict(rule, ev, v); break;
    case LIMIT_CONCURRENCY: cc_verdict(rule, ev, v); break;
    }
}

int64_t algo_dead_ms(const struct algo_state *s, const struct limit_rule *rule)
{
    int64_t w = rule->window_ms;
    switch (s->kind) {
    case LIMIT_SLIDING_LOG:
        return s->u.sl.len > 0 ? sl_at(s, s->u.sl.len - 1) + w : INT64_MIN;
    case LIMIT_SLIDING_WINDOW:
        return (s->u.sw.w + 2) * s->window_ms;
    case LIMIT_TOKEN_BUCKET: {
        int64_t cw = capacity(rule) * s->window_ms;
        return s->u.tb.level >= cw ? s->u.tb.t : s->u.tb.t + ceil_div(cw - s->u.tb.level, rule->rate);
    }
    case LIMIT_FIXED_WINDOW:
        return (s->u.fw.w + 1) * s->window_ms;
    case LIMIT_CONCURRENCY:
        return s->u.cc.held > 0 ? INT64_MAX : INT64_MIN;
    default:
        return INT64_MIN;
    }
}
