/* What a catalog must hold for the proxy to serve every request of it as written (SPEC "One
 * request model"): route prefixes a request can match, and no request that meets more limits
 * than the limiter checks in one step (LIMITER_MAX_RULES). tierctl refuses a change that
 * breaks either; the snapshot refuses a catalog over the limit count, so the proxy (start,
 * --check, reload) never serves a request with some of its limits left out. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/catalog/catalog.h"

/* 0 when some request target, as request_target.h normalises it, can start with prefix (a
 * route prefix catalog_check_route accepted); else -1 with a one-line reason in err: a
 * backslash, "%00", "%2F" or "%5C", "//", a "." or ".." segment, or a percent-encoded
 * letter, digit or -._~ (requests are matched with those decoded). */
int tier_route_prefix_check(const char *prefix, char *err, size_t errlen);

/* One route limit that is a limiter rule (rate or concurrency, not ws-messages). */
struct tier_route_ref {
    const char *method;   /* "*" or an upper-case method */
    const char *prefix;
};

/* The most limiter rules one request of a plan can meet: its plan_wide rate and
 * concurrency limits plus the largest set of refs[0, n) sharing one method and prefix
 * (prefixes compared ignoring ASCII case, as [proxy] path_case = insensitive may), which is
 * the most tier_plan_select can pick. ws-messages limits are no limiter rule and are left
 * out by the caller. Sorts refs. */
size_t tier_worst_rules(size_t plan_wide, struct tier_route_ref *refs, size_t n);

/* Checks every plan of the catalog (in the caller's transaction) against
 * LIMITER_MAX_RULES. Returns 0, CATALOG_INVALID with `plan "NAME": one request can meet N
 * limits, at most 16 ...` in err, or another catalog.h code / -ENOMEM. */
int tier_catalog_check_bounds(struct catalog *cat, char *err, size_t errlen);

/* Whether a request of the cost route (cost_method, cost_prefix) of a plan can meet the
 * limit on (limit_method, limit_prefix) (NULL: a route-less limit, met by every request),
 * so that the cost counts against it: the methods agree ("*" agrees with any), one prefix
 * starts the other (ignoring ASCII case, as path_case = insensitive may compare), and no
 * other cost of the plan, others[0, n), with a longer prefix still covering the limit's
 * whole route takes its place there (longest prefix wins). Conservative: true when
 * unsure. */
#define TIER_MAX_COSTS_PER_PLAN 64   /* tierctl and the snapshot refuse more */

struct tier_cost_ref {
    const char *method;
    const char *prefix;
    int64_t cost;
};
bool tier_cost_meets_limit(const struct tier_cost_ref *cost, const struct tier_cost_ref *others, size_t n,
                           const char *limit_method, const char *limit_prefix);

/* Checks that every cost of every plan can be admitted by each rate limit and quota it
 * can meet (tier_cost_meets_limit), the plan's own and its users' own: a cost above a
 * limit's rate + burst (a quota's N) could never pass; and no plan has more than
 * TIER_MAX_COSTS_PER_PLAN costs. Also bounds each user's own limits:
 * the plan's worst case plus the user's limits stays within LIMITER_MAX_RULES. Returns 0,
 * CATALOG_INVALID with one line in err, or another catalog.h code / -ENOMEM. */
int tier_catalog_check_costs(struct catalog *cat, char *err, size_t errlen);
