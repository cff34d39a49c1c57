/* tierctl cost set, cost remove: what a request on a route counts against the plan's rate
 * limits and quotas (tierctl.h). */
#include <inttypes.h>
#include <stdio.h>

#include "tiers/tierctl.h"

int cmd_cost_set(struct cli *c)
{
    const char *plan = c->args.pos[0];
    int64_t plan_id, n, old = 0;
    int r = parse_route(c, c->args.pos[1]);
    if (r)
        return r;
    if (cli_parse_int(c->args.pos[2], 1, CATALOG_MAX_COST, &n))
        return cli_usage_error(&c->args, "invalid cost \"%s\" (a whole number, 1 to %d)", c->args.pos[2],
                               CATALOG_MAX_COST);
    if (catalog_plan_find(c->cat, plan, &plan_id, NULL))
        return catalog_failed(c);
    struct catalog_cost cost = {
        .plan_id = plan_id, .route_method = c->route_method, .route_prefix = c->route_prefix, .cost = n,
    };
    if (catalog_cost_set(c->cat, &cost, &old))
        return catalog_failed(c);
    note(c, "plan %s: cost on %s %s %" PRId64 " -> %" PRId64, plan, c->route_method, c->route_prefix,
         old ? old : 1, n);
    return 0;
}

int cmd_cost_remove(struct cli *c)
{
    int64_t plan_id;
    int r = parse_route(c, c->args.pos[1]);
    if (r)
        return r;
    if (catalog_plan_find(c->cat, c->args.pos[0], &plan_id, NULL) ||
        catalog_cost_remove(c->cat, plan_id, c->route_method, c->route_prefix))
        return catalog_failed(c);
    note(c, "plan %s: cost on %s %s removed (requests there count 1)", c->args.pos[0], c->route_method,
         c->route_prefix);
    return 0;
}
