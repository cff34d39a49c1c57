/* From a request's method and path to the rules the limiter checks for it: the plan's
 * selected limits made into limiter rules. The proxy and `tierctl simulate` both call it,
 * on the path request_target.h makes of the target, so a replay checks what the proxy
 * checked. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limiter.h"
#include "tiers/snapshot.h"

/* Selects the limits of `plan` for METHOD PATH (PATH as request_target.h matches it, routes
 * compared ignoring ASCII case when ignore_case; tier_plan_select_case) and
 * makes the limiter's rules of them: a rate limit or quota as it is, with the request's cost
 * (tier_plan_cost) in rule.cost, a concurrency limit as a LIMIT_CONCURRENCY rule with burst
 * 0 and window lease_ttl_ms (one slot, whatever the cost). Pass the user's plan
 * (tier_user_plan) so that the user's own limits replace the plan's. A snapshot never holds a
 * plan where one request meets more than LIMITER_MAX_RULES (limit_bounds.h); the cap here
 * only keeps the arrays safe. rules and checked (the limit of each rule) hold
 * LIMITER_MAX_RULES entries. *pws (may be NULL) receives the first --ws-messages limit,
 * which is no limiter rule, or NULL. Returns the number of rules written. */
size_t tier_plan_rules(const struct tier_plan *plan, const char *method, const char *path, size_t path_len,
                       bool ignore_case, int64_t lease_ttl_ms, struct limit_rule *rules,
                       const struct tier_limit **checked, const struct tier_limit **pws);
