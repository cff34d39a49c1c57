/* Limit rules and per-rule verdicts: the vocabulary shared by the catalog, the limiter
 * stores and the proxy. Pure data and parsers; no I/O. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A limit's kind: which state and arithmetic a store keeps for a rule. The catalog's
 * kinds (rate, concurrency, ws_messages: store/catalog.h) map onto it: a rate limit is
 * the kind its algorithm names (tierctl --algorithm, the catalog's `algorithm` column:
 * sliding-log, sliding-window, token-bucket, fixed-window), a concurrency limit is
 * LIMIT_CONCURRENCY, and a ws-messages limit is counted by the proxy per connection as a
 * sliding log (store/local_limit.h). */
enum limit_kind {
    LIMIT_SLIDING_LOG = 0,   /* exact: at most rate+burst admitted in any WINDOW */
    LIMIT_SLIDING_WINDOW,    /* two fixed windows, previous one weighted by overlap */
    LIMIT_TOKEN_BUCKET,      /* capacity rate+burst, refills rate per window */
    LIMIT_FIXED_WINDOW,      /* counter reset at each multiple of window */
    LIMIT_CONCURRENCY,       /* at most `rate` leases held at once; window_ms = lease TTL */
};

/* Largest (rate + burst) * window_ms accepted, so that every store (Redis Lua numbers are
 * doubles) computes in exact integers. */
#define LIMIT_MAX_PRODUCT ((int64_t)1 << 52)

/* One rate rule as a store applies it. `id` is the catalog's limit id: it names the state
 * in the store, is never reused, and is kept by export/import so a fleet agrees on it. */
struct limit_rule {
    int64_t id;
    enum limit_kind kind;
    int64_t rate;        /* requests per window, >= 1 */
    int64_t burst;       /* extra requests on top of rate, >= 0 */
    int64_t window_ms;   /* >= 1 */
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

/* Checks that a rule's numbers are in range (a concurrency rule: burst 0). Returns 0 or
 * -EINVAL. */
int limit_rule_validate(const struct limit_rule *rule);
