/* One limit of a plan or of a user, as the snapshot holds it (snapshot.h). Apart, so that
 * the code that works on limits alone (own_limits.h) needs no snapshot. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limit.h"

/* The catalog's kind of a limit (enum catalog_limit_kind); its rule carries the store's
 * kind (rule.kind: a rate limit's algorithm, or LIMIT_CONCURRENCY). */
enum tier_limit_kind {
    TIER_LIMIT_RATE = 0,
    TIER_LIMIT_CONCURRENCY,    /* amount = at most N in flight */
    TIER_LIMIT_WS_MESSAGES,    /* rule = client-to-upstream messages per connection */
    TIER_LIMIT_QUOTA,          /* rule.kind LIMIT_QUOTA: rule.rate per rule.period; rule.window_ms
                                  holds the period's nominal length (day, week, 30 days) for the
                                  RateLimit headers' window */
};

struct tier_limit {
    int64_t id;                    /* catalog limit id */
    enum tier_limit_kind kind;
    struct limit_rule rule;        /* rate and ws-messages: the rule; concurrency: rule.rate = N.
                                      rule.id names the state in the stores: id, or for a
                                      user's own limit the id of the plan limit whose count
                                      it goes on with (own_limits.h) */
    bool has_route;
    char route_method[16];         /* "*" = any method */
    const char *route_prefix;      /* owned by the snapshot */
    size_t route_prefix_len;
    const char *name;              /* for the ietf RateLimit headers: plan, route and window,
                                      "free-1min", "pro-POST /upload-10s", "free-concurrency",
                                      "free-month" for a quota ("-2", "-3" on repeats within the
                                      plan); owned by the snapshot */
    bool own;                      /* a user's own limit (tierctl user limit add) */
};
