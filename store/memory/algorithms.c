/* The arithmetic of each rule kind, in integer ms, for the memory store (and
 * store/memory/local_limit.c). check.lua does the same arithmetic for the Redis store, but on its
 * own layout, so it is no line-by-line copy: a sliding log there is a list whose last entry
 * carries the count and the oldest times and running totals (here a ring of (time,
 * running total of weights)), a quota a hash tagged with its period, the window-indexed
 * kinds are hashes tagged "<kind>:<window_ms>", and a concurrency rule is a sorted set of
 * leases scored by their expiry (here a count: one process knows when its leases end).
 * Change both together: tests/unit/store/test_limiter_redis.c runs both stores on the
 * same sequences and requires identical verdicts.
 *
 * Evaluation fields (struct algo_eval a, b, c) per kind:
 *   sliding-log:    a = entries in (te - W, te], b = ring index of the first of them,
 *                   c = units they weigh
 *   sliding-window: a = current window index, b = its count, c = previous window's count
 *   token-bucket:   a = level (tokens * W) at te
 *   fixed-window:   a = window index, b = its count
 *   concurrency:    a = leases held (after the commit, once committed)
 *   quota:          a = period start, b = units used in it, c = period end */
#include "store/memory/algorithms.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A fixed window's or a quota period's commit: the window decided (ev->a) and its count,
 * k more (ev->b). */
static void count_in_window(int64_t *window, int64_t *used, struct algo_eval *ev, int64_t k)
{
    ev->b += k;
    *window = ev->a;
    *used = ev->b;
}

/* now, or the start of window number `window` (of w ms) when that is later: a clock that
 * went back is clamped to the state's window. */
static int64_t clamp_to_window(int64_t now, int64_t window, int64_t w)
{
    return now < window * w ? window * w : now;
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

/* What a state is tagged with besides its kind: the window, or a quota's period. */
static int64_t state_tag(const struct limit_rule *rule)
{
    return rule->kind == LIMIT_QUOTA ? (int64_t)rule->period : rule->window_ms;
}

/* A sliding log is a log of timestamps, meaningful under any window; the other states are
 * scaled by or indexed with the window (a quota: its period), so they only carry over
 * under the same one. */
static bool compatible(const struct algo_state *s, const struct limit_rule *rule)
{
    if (s->kind != (int)rule->kind)
        return false;
    /* A concurrency state is a count of leases; its window is their TTL, which may change
     * while they are held. */
    return rule->kind == LIMIT_SLIDING_LOG || rule->kind == LIMIT_CONCURRENCY || s->window_ms == state_tag(rule);
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

/* ---- sliding log: a ring of admitted requests, oldest first, times non-decreasing. Each
 * entry weighs its cost; while every one weighs 1 the ring holds times only, else (as
 * check.lua's weighted layout) also each entry's running total of the weights pushed up
 * to it, modulo 2^64 (a difference of two is exact: a log never holds 2^64 units), and,
 * past them, the running total before the head. Either way it holds at most C entries.
 * Unweighted, the running totals are implicit: i + 1 at ring index i, 0 before the head. */

static uint32_t sl_pos(const struct algo_state *s, uint32_t i)
{
    return (s->u.sl.head + i) & (s->u.sl.cap - 1);
}

static int64_t sl_time(const struct algo_state *s, uint32_t i)
{
    return s->u.sl.ts[sl_pos(s, i)];
}

/* The running totals of a weighted ring: cap of them, then the one before the head. */
static uint64_t *sl_cums(const struct algo_state *s)
{
    return (uint64_t *)(s->u.sl.ts + s->u.sl.cap);
}

/* The running total through ring index i, and before it. */
static uint64_t sl_cum(const struct algo_state *s, uint32_t i)
{
    return s->u.sl.weighted ? sl_cums(s)[sl_pos(s, i)] : (uint64_t)i + 1;
}

static uint64_t sl_cum_before(const struct algo_state *s, uint32_t i)
{
    if (i > 0)
        return sl_cum(s, i - 1);
    return s->u.sl.weighted ? sl_cums(s)[s->u.sl.cap] : 0;
}

static void sl_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    uint32_t len = ev->stale || s->kind < 0 ? 0 : s->u.sl.len;
    int64_t te = now;
    if (len > 0 && sl_time(s, len - 1) > te)
        te = sl_time(s, len - 1);
    int64_t lo = te - rule->window_ms;
    uint32_t first = len;
    if (len > 0 && sl_time(s, len - 1) > lo) {
        uint32_t l = 0, r = len - 1;   /* first index with ts > lo; ts[len-1] > lo */
        while (l < r) {
            uint32_t m = l + (r - l) / 2;
            if (sl_time(s, m) > lo)
                r = m;
            else
                l = m + 1;
        }
        first = l;
    }
    ev->te = te;
    ev->a = (int64_t)(len - first);
    ev->b = first;
    ev->c = len > first ? (int64_t)(sl_cum(s, len - 1) - sl_cum_before(s, first)) : 0;
    ev->allowed = ev->c + limit_rule_cost(rule) <= capacity(rule);
}

static int sl_reserve(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev)
{
    if (s->kind != LIMIT_SLIDING_LOG) {
        algo_state_clear(s);   /* empty or stale: the decision already treated it as empty */
        s->kind = LIMIT_SLIDING_LOG;
    }
    uint64_t need = (uint64_t)ev->a + 1;
    /* The ring must have room, and running totals once an entry weighs more than 1. */
    bool weighted = s->u.sl.weighted || limit_rule_cost(rule) > 1;
    if (need <= s->u.sl.cap && weighted == (s->u.sl.weighted != 0))
        return 0;
    if (need > UINT32_MAX / 4)
        return -ENOMEM;
    uint32_t cap = s->u.sl.cap ? s->u.sl.cap : 4;
    while (cap < need)
        cap *= 2;
    int64_t *ts = malloc((size_t)cap * sizeof(*ts) + (weighted ? ((size_t)cap + 1) * sizeof(uint64_t) : 0));
    if (ts == NULL)
        return -ENOMEM;
    /* Keep only the entries still in the window; they move to the front. */
    uint32_t n = (uint32_t)ev->a, first = (uint32_t)ev->b;
    uint64_t *cums = (uint64_t *)(ts + cap);
    for (uint32_t i = 0; i < n; i++) {
        ts[i] = sl_time(s, first + i);
        if (weighted)
            cums[i] = sl_cum(s, first + i);
    }
    if (weighted)
        cums[cap] = s->u.sl.ts != NULL ? sl_cum_before(s, first) : 0;
    free(s->u.sl.ts);
    s->u.sl.ts = ts;
    s->u.sl.head = 0;
    s->u.sl.len = n;
    s->u.sl.cap = cap;
    s->u.sl.weighted = weighted;
    ev->b = 0;
    return 0;
}

static void sl_commit(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev)
{
    uint32_t first = (uint32_t)ev->b;
    int64_t k = limit_rule_cost(rule);
    if (s->u.sl.weighted) {
        uint64_t base = sl_cum_before(s, first);
        uint64_t last = s->u.sl.len > first ? sl_cum(s, s->u.sl.len - 1) : base;
        sl_cums(s)[s->u.sl.cap] = base;
        sl_cums(s)[sl_pos(s, s->u.sl.len)] = last + (uint64_t)k;
    }
    s->u.sl.ts[sl_pos(s, s->u.sl.len)] = ev->te;
    s->u.sl.head = sl_pos(s, first);
    s->u.sl.len -= first;
    s->u.sl.len++;
    ev->a++;
    ev->b = 0;
    ev->c += k;
    /* Every entry in it weighs 1 again: the running totals are implicit once more (the
     * room for them stays until the ring is reallocated). */
    if (s->u.sl.weighted && ev->c == ev->a)
        s->u.sl.weighted = 0;
}

static void sl_verdict(const struct algo_state *s, const struct limit_rule *rule, const struct algo_eval *ev,
                       struct limit_verdict *v)
{
    int64_t c = capacity(rule), n = ev->a, used = ev->c, w = rule->window_ms;
    uint32_t first = (uint32_t)ev->b;
    if (!ev->allowed) {
        /* Allowed again once entries of `need` units have expired: at the time + W of the
         * oldest entry whose running total (from the log's start) reaches it. */
        uint64_t need = (uint64_t)(used + limit_rule_cost(rule) - c), base = sl_cum_before(s, first);
        uint32_t l = first, r = first + (uint32_t)n - 1;   /* the entry at r reaches it: it is all `used` */
        while (l < r) {
            uint32_t m = l + (r - l) / 2;
            if (sl_cum(s, m) - base >= need)
                r = m;
            else
                l = m + 1;
        }
        v->remaining = 0;
        v->reset_ms = sl_time(s, l) + w - ev->te;
    } else {
        v->remaining = c - used;
        v->reset_ms = n > 0 ? sl_time(s, first) + w - ev->te : 0;
    }
}

/* ---- sliding window: previous window's count weighted by its overlap ---- */

static void sw_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    bool have = !ev->stale && s->kind >= 0;
    int64_t w = rule->window_ms;
    int64_t te = have ? clamp_to_window(now, s->u.sw.w, w) : now;
    int64_t idx = limit_floor_div(te, w);
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
    /* its k units, the last one included, fit: (k - 1) more than the estimate is < C */
    ev->allowed = prev * (w - e) + (cur + limit_rule_cost(rule) - 1) * w < capacity(rule) * w;
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
    if (!ev->allowed) {   /* wait until k units are admissible */
        v->remaining = 0;
        v->reset_ms = sw_reset(c, w, e, cur, prev, limit_rule_cost(rule) - 1);
        return;
    }
    v->remaining = avail;
    v->reset_ms = sw_reset(c, w, e, cur, prev, avail);
}

/* ---- token bucket: level in [0, C*W], +rate per ms, a unit costs W ---- */

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
    ev->allowed = level >= limit_rule_cost(rule) * w;
}

static void tb_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t w = rule->window_ms, cw = capacity(rule) * w, level = ev->a;
    if (!ev->allowed) {
        v->remaining = 0;
        v->reset_ms = ceil_div(limit_rule_cost(rule) * w - level, rule->rate);
        return;
    }
    int64_t avail = level / w;
    v->remaining = avail;
    v->reset_ms = level >= cw ? 0 : ceil_div((avail + 1) * w - level, rule->rate);
}

/* ---- fixed window ---- */

static void fw_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    bool have = !ev->stale && s->kind >= 0;
    int64_t w = rule->window_ms;
    int64_t te = have ? clamp_to_window(now, s->u.fw.w, w) : now;
    int64_t idx = limit_floor_div(te, w);
    ev->te = te;
    ev->a = idx;
    ev->b = have && idx == s->u.fw.w ? s->u.fw.n : 0;
    ev->allowed = ev->b + limit_rule_cost(rule) <= capacity(rule);
}

static void fw_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t c = capacity(rule), w = rule->window_ms, count = ev->b;
    v->remaining = ev->allowed && count < c ? c - count : 0;
    v->reset_ms = count == 0 ? 0 : (ev->a + 1) * w - ev->te;
}

/* ---- quota: units used in the current calendar period ---- */

static void q_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev)
{
    bool have = !ev->stale && s->kind >= 0;
    int64_t te = now;
    if (have && te < s->u.q.start)
        te = s->u.q.start;   /* a clock that went back stays in the state's period */
    int64_t start = limit_period_start_ms(rule->period, te);
    ev->te = te;
    ev->a = start;
    ev->b = have && s->u.q.start == start ? s->u.q.used : 0;
    ev->c = limit_period_end_ms(rule->period, te);
    ev->allowed = ev->b + limit_rule_cost(rule) <= rule->rate;
}

static void q_verdict(const struct limit_rule *rule, const struct algo_eval *ev, struct limit_verdict *v)
{
    int64_t used = ev->b;
    v->remaining = ev->allowed ? rule->rate - used : 0;
    v->reset_ms = ev->allowed && used == 0 ? 0 : ev->c - ev->te;
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
    case LIMIT_QUOTA: q_decide(s, rule, now, ev); break;
    }
}

int algo_reserve(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev)
{
    if (rule->kind == LIMIT_SLIDING_LOG)
        return sl_reserve(s, rule, ev);
    if (s->kind >= 0 && !compatible(s, rule))
        algo_state_clear(s);
    return 0;
}

void algo_commit(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev)
{
    int64_t k = limit_rule_cost(rule);
    s->window_ms = state_tag(rule);
    s->kind = (int)rule->kind;
    ev->stale = false;
    switch (rule->kind) {
    case LIMIT_SLIDING_LOG:
        sl_commit(s, rule, ev);
        break;
    case LIMIT_SLIDING_WINDOW:
        ev->b += k;
        s->u.sw.w = ev->a;
        s->u.sw.cur = ev->b;
        s->u.sw.prev = ev->c;
        break;
    case LIMIT_TOKEN_BUCKET:
        ev->a -= k * rule->window_ms;
        s->u.tb.level = ev->a;
        s->u.tb.t = ev->te;
        break;
    case LIMIT_FIXED_WINDOW:
        count_in_window(&s->u.fw.w, &s->u.fw.n, ev, k);
        break;
    case LIMIT_CONCURRENCY:   /* one slot whatever the cost */
        ev->a++;
        s->u.cc.held = ev->a;
        break;
    case LIMIT_QUOTA:
        count_in_window(&s->u.q.start, &s->u.q.used, ev, k);
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
    case LIMIT_QUOTA: q_verdict(rule, ev, v); break;
    }
}

int64_t algo_dead_ms(const struct algo_state *s, const struct limit_rule *rule)
{
    int64_t w = rule->window_ms;
    switch (s->kind) {
    case LIMIT_SLIDING_LOG:
        return s->u.sl.len > 0 ? sl_time(s, s->u.sl.len - 1) + w : INT64_MIN;
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
    case LIMIT_QUOTA:   /* its period's end: the next one starts from 0 */
        return limit_period_end_ms((enum limit_period)s->window_ms, s->u.q.start);
    default:
        return INT64_MIN;
    }
}
