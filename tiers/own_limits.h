/* A user's own limits (tierctl user limit add) in the plan as it applies to that user
 * (tier_user.own_plan): which of the plan's limits they replace, and whose count they go on
 * with. Pure; the snapshot calls it when it builds a user's own plan.
 *
 * The own limit's rule takes the id of the plan limit it replaces as its rule.id (the name
 * of the state in both stores), while its tier_limit.id stays its catalog id for tierctl,
 * usage and the logs; nothing is written, the mapping is made on every snapshot from the
 * catalog as it is. So 5 requests under the plan's 5/day, then the user's 7/day, admit 2
 * more; the same holds for a rate (a sliding log's entries) and concurrency (requests in
 * flight count against the new limit). Of a burst rate and a sustained one (two of the kind
 * on the route) the own limit takes the one with its window (a quota: its period), else the
 * first in id order, as plan set keeps; several own limits of a kind each take a different
 * one, and one left without keeps its own id (a fresh count). user limit remove gives the
 * plan's limit back with the count it held, the user's requests meanwhile included. On a
 * move to another plan the own limit follows that plan's limit of its kind and route; a
 * plan without one leaves it its own id. A ws-messages limit counts per connection in the
 * proxy and keeps its id.
 */
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
