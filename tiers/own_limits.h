/* A user's own limits (tierctl user limit add) in the plan as it applies to that user
 * (tier_user.own_plan): which of the plan's limits they replace, and whose count they go on
 * with. Pure; the snapshot calls it when it builds a user's own plan. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "tiers/tier_limit.h"

/* Whether the user's own limit replaces the plan's limit: the same kind on the same route
 * (or both route-less). */
bool tier_own_limit_replaces(const struct tier_limit *own, const struct tier_limit *plan_limit);

/* The stores keep a rule's state under its id (`<prefix>{<subject>}:<id>`), so a limit with
 * an id of its own would start from nothing. Each rate, quota and concurrency limit of
 * own[0, n_own) (one user's, in catalog id order) takes the state of one plan limit of
 * plan_limits[0, n_plan) it replaces: its rule.id becomes that limit's id (tier_limit.id
 * stays its own, for tierctl and the logs). Among several it replaces (a burst rate and a
 * sustained one), it takes the one with its window (a quota: its period), else the first
 * left in id order; no two of the user's limits take the same one, and one that finds none
 * left keeps its own id. The stores read a state of another algorithm or window as none, as
 * they do after `limit set`. ws-messages limits count per connection and keep their id. */
void tier_own_limits_take_state(const struct tier_limit *plan_limits, size_t n_plan, struct tier_limit *own,
                                size_t n_own);
