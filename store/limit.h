/* Limit rules and per-rule verdicts: the vocabulary shared by the catalog, the limiter
 * stores and the proxy. Pure data and parsers; no I/O.
 *
 * Quotas (LIMIT_QUOTA, rule.period day, week or month) count units per calendar period in
 * UTC (weeks from Monday, calendar months, leap years: limit_period_start_ms / _end_ms, the
 * same arithmetic in check.lua). Their state is the units used in the period; in Redis a
 * hash of one field named by the period's start and end, expiring a minute after the period
 * ends (an earlier period's field reads as 0, so a new period needs no sweep; the memory
 * store drops it at the same time). The proxy sends the period that holds its own clock's
 * now; when it holds Redis's now too, a quota beside a sliding log is one HINCRBY of that
 * field, whose answer decides (taken back at once should it go over). Verdict: limit N,
 * remaining N - used, reset = ms to the period's end (0 while nothing is used); a
 * rejection's Retry-After is the period's end.
 *
 * Costs (rule.cost, 0 = 1): what a request counts against every rate rule and quota of its
 * check: admitted when that many cost-1 requests at the same instant would all be, recorded
 * as that many units, nothing anywhere when any rule rejects; a rejecting rule's reset is
 * the wait until a request of this cost fits, its remaining 0. A concurrency rule ignores
 * the cost. limit_rule_validate refuses a cost above rate + burst (it could never be
 * admitted). The denial cache keys a rejection by the costs too. A state of another kind
 * (or, for the window-indexed algorithms, another window) reads as empty, so a limit
 * changed in place keeps its count when it can; a sliding log's timestamps count under any
 * window.
 *
 * Words: a limit's kind is what it bounds, as the catalog and tierctl say: rate, quota,
 * concurrency, ws-messages (enum catalog_limit_kind, enum tier_limit_kind). A rate limit
 * has an algorithm: sliding-log, sliding-window, token-bucket, fixed-window. A store rule's
 * kind (enum limit_kind, rule.kind) is one of those four, quota or concurrency, and picks
 * the state and arithmetic the store keeps (a ws-messages limit is a sliding-log rule the
 * proxy counts per connection, store/memory/local_limit.h). What refused is a hit kind (enum
 * limit_hit_kind), which the metrics, the access log and the rejection warning call
 * limit_type: http, concurrency, ws_connection, ws_message.
 *
 * Why a quota keeps a key of its own rather than a count in a sliding log's tail: a
 * plan-wide quota beside per-route rates (100/min on /search, 1000/min elsewhere,
 * 10,000/month in all) meets a different log on each route, so such a count would be split
 * between them; it would also lose the log's short life (the list would have to live until
 * the period ends) and would move with every plan edit that adds or drops the log.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A limit's kind: which state and arithmetic a store keeps for a rule. The catalog's
 * kinds (rate, concurrency, ws_messages: store/catalog/catalog.h) map onto it: a rate limit is
 * the kind its algorithm names (tierctl --algorithm, the catalog's `algorithm` column:
 * sliding-log, sliding-window, token-bucket, fixed-window), a concurrency limit is
 * LIMIT_CONCURRENCY, and a ws-messages limit is counted by the proxy per connection as a
 * sliding log (store/memory/local_limit.h). */
enum limit_kind {
    LIMIT_SLIDING_LOG = 0,   /* exact: at most rate+burst admitted in any WINDOW */
    LIMIT_SLIDING_WINDOW,    /* two fixed windows, previous one weighted by overlap */
    LIMIT_TOKEN_BUCKET,      /* capacity rate+burst, refills rate per window */
    LIMIT_FIXED_WINDOW,      /* counter reset at each multiple of window */
    LIMIT_CONCURRENCY,       /* at most `rate` leases held at once; window_ms = lease TTL */
    LIMIT_QUOTA,             /* at most `rate` units per calendar period (UTC); see below */
};

/* A quota's calendar period, in UTC: a day starts at 00:00, a week on Monday 00:00, a
 * month on its 1st at 00:00 (calendar months: 28..31 days, leap years included). */
enum limit_period {
    LIMIT_PERIOD_NONE = 0,   /* not a quota */
    LIMIT_PERIOD_DAY,
    LIMIT_PERIOD_WEEK,
    LIMIT_PERIOD_MONTH,
};

/* Largest (rate + burst) * window_ms accepted, so that every store (Redis Lua numbers are
 * doubles) computes in exact integers. */
#define LIMIT_MAX_PRODUCT ((int64_t)1 << 52)

/* One rule as a store applies it. `id` is the catalog's limit id: it names the state in
 * the store, is never reused, and is kept by export/import so a fleet agrees on it.
 *
 * Cost: a request of cost k is admitted by a rate rule or a quota exactly when k requests
 * of cost 1 at the same instant would all be, and it is then counted as k units (a
 * sliding log keeps one entry of weight k). A rejected check records nothing in any rule.
 * The verdict counts units: remaining = units still admissible now (0 when the rule
 * rejects), and a rejecting rule's reset_ms is the wait until a request of this cost
 * would be admitted. A concurrency rule ignores the cost (one slot per request).
 *
 * A quota rule (LIMIT_QUOTA): rate = N units per period, burst 0, `period` set,
 * window_ms ignored (any value; the period decides). It counts the cost of every admitted
 * request since the start of the current period; a new period starts from 0. Verdict:
 * limit N, remaining N - used after this request (0 when it rejects), reset_ms = ms until
 * the period ends when it rejects or when anything is used (the count starts over then),
 * 0 when nothing is used. */
struct limit_rule {
    int64_t id;
    enum limit_kind kind;
    int64_t rate;        /* requests (units) per window or period, >= 1 */
    int64_t burst;       /* extra requests on top of rate, >= 0 (0 for a quota) */
    int64_t window_ms;   /* >= 1; ignored by a quota */
    enum limit_period period;   /* a quota's period; LIMIT_PERIOD_NONE for every other kind */
    int64_t cost;        /* units this request counts against this rule: 0 means 1 */
    int64_t held;        /* a concurrency rule checked in a shared store: the leases of this
                          * subject and rule the caller's process holds there now; a store
                          * that counts fewer lost them and counts these instead (0: none) */
};

/* A concurrency rule: rate = N slots, burst = 0, window_ms = the lease TTL (a lease that
 * is not renewed within it stops counting). Its verdict: limit = N, remaining = free slots
 * after this request, reset_ms = 1000 when rejected (when a slot frees is unknowable).
 *
 * A store's answer for one rule. */
struct limit_verdict {
    bool allowed;
    int64_t limit;       /* rate + burst */
    int64_t remaining;   /* requests still allowed after this one (0 when rejected) */
    int64_t reset_ms;    /* ms until one more request would be allowed (0: one is allowed now) */
};

/* Returns the kind's name as tierctl spells it ("sliding-log", ..., "concurrency"). */
const char *limit_kind_name(enum limit_kind kind);

/* Parses a rate kind's name ("sliding-log" etc., tierctl --algorithm) into *pkind.
 * Returns 0, or -EINVAL for an unknown name. Only the four rate kinds parse:
 * "concurrency" (LIMIT_CONCURRENCY's name) does not. */
int limit_kind_parse(const char *text, enum limit_kind *pkind);

/* Parses N/WINDOW: "100/min", "10/15s", "3000/1min", "5/h", "1000/day".
 * Returns 0 with *pcount and *pwindow_ms set, or -EINVAL (bad syntax, zero or negative,
 * or too large: count * window_ms must stay under LIMIT_MAX_PRODUCT). */
int limit_rate_parse(const char *text, int64_t *pcount, int64_t *pwindow_ms);

/* Writes the canonical text of a rate ("100/min", "10/15s") into buf. Returns buf. */
char *limit_rate_format(int64_t count, int64_t window_ms, char *buf, size_t buflen);

/* Writes a window as a count and the largest unit (s, min, h, day; ms when it is no whole
 * second) that divides it exactly, the count always written: "10s", "1min", "90s",
 * "2h", "1day". The same units as limit_rate_format. Returns buf. */
char *limit_window_format(int64_t window_ms, char *buf, size_t buflen);

/* Checks that a rule's numbers are in range. Returns 0 or -EINVAL, also for:
 *   a cost < 0 (any kind);
 *   a rate rule or quota whose cost can never be admitted (cost > rate + burst);
 *   a concurrency rule with burst != 0 (it ignores the cost otherwise);
 *   a quota with burst != 0 or no period, or another kind with a period.
 * A rate rule's (rate + burst) * window_ms stays under LIMIT_MAX_PRODUCT; a quota's N
 * (no product: its window is ignored) too. */
int limit_rule_validate(const struct limit_rule *rule);

/* The units a request counts against a rule: its cost, or 1 when the cost is 0. */
static inline int64_t limit_rule_cost(const struct limit_rule *rule)
{
    return rule->cost > 1 ? rule->cost : 1;
}

/* Parses a quota "N/day", "N/week" or "N/month" (tierctl --quota). Returns 0 with
 * *pcount and *pperiod set, or -EINVAL (bad syntax, another period, N < 1 or N >=
 * LIMIT_MAX_PRODUCT). */
int limit_quota_parse(const char *text, int64_t *pcount, enum limit_period *pperiod);

/* Writes the canonical text of a quota ("50/month") into buf. Returns buf. */
char *limit_quota_format(int64_t count, enum limit_period period, char *buf, size_t buflen);

/* "day", "week", "month"; "none" for LIMIT_PERIOD_NONE, "unknown" otherwise. */
const char *limit_period_name(enum limit_period period);

/* The start (inclusive) and end (exclusive) in Unix ms of the calendar period, in UTC,
 * that holds unix_ms (>= 0). Both return -1 for LIMIT_PERIOD_NONE or an unknown period.
 * check.lua computes the same for the Redis store. */
int64_t limit_period_start_ms(enum limit_period period, int64_t unix_ms);
int64_t limit_period_end_ms(enum limit_period period, int64_t unix_ms);

/* a / b rounded towards minus infinity (b != 0): the window a time falls in. */
static inline int64_t limit_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}
