/* From a request's method and path to the rules the limiter checks for it: the path as
 * routes match it, and the plan's selected limits made into limiter rules. The proxy and
 * `tierctl simulate` both call these, so a replay checks what the proxy checked. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "store/limiter.h"
#include "tiers/snapshot.h"

/* Writes the path as the upstream will resolve it, for matching exempt paths and routes:
 * "//" collapsed, "." and ".." segments removed (RFC 3986 5.2.4), never above the root.
 * `in` is already percent-decoded (libmicrohttpd decodes the target), so "%2e%2e" is ".."
 * here too; it has no query. Returns out, or NULL when it does not fit in outlen bytes. */
char *tier_path_normalize(const char *in, char *out, size_t outlen);

/* Selects the limits of `plan` for METHOD PATH (PATH normalised; tier_plan_select) and
 * makes the limiter's rules of them: a rate limit as it is, a concurrency limit as a
 * LIMIT_CONCURRENCY rule with burst 0 and window lease_ttl_ms. Rules past
 * LIMITER_MAX_RULES are left out. rules and checked (the limit of each rule) hold
 * LIMITER_MAX_RULES entries. *pws (may be NULL) receives the first --ws-messages limit,
 * which is no limiter rule, or NULL. Returns the number of rules written. */
size_t tier_plan_rules(const struct tier_plan *plan, const char *method, const char *path, int64_t lease_ttl_ms,
                       struct limit_rule *rules, const struct tier_limit **checked, const struct tier_limit **pws);
