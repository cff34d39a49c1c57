/* tierctl limit add, limit set, limit remove, and the limits read back for a change
 * (tierctl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tiers/catalog_json.h"
#include "tiers/limit_bounds.h"
#include "tiers/table.h"
#include "tiers/tierctl.h"

/* ---- limits read back for a change ---- */

static int pick_limit(void *ctx, const struct catalog_limit *l)
{
    struct limit_pick *pick = ctx;
    if ((pick->kind >= 0 && (int)l->kind != pick->kind) || (pick->routeless_only && l->route_method) ||
        (pick->id && l->id != pick->id))
        return 0;
    if (pick->n == MAX_PLAN_LIMITS)
        return -E2BIG;
    struct limit_copy *copy = &pick->items[pick->n++];
    copy->l = *l;
    if (l->route_method) {
        snprintf(copy->method, sizeof(copy->method), "%s", l->route_method);
        snprintf(copy->prefix, sizeof(copy->prefix), "%s", l->route_prefix);
        copy->l.route_method = copy->method;
        copy->l.route_prefix = copy->prefix;
    }
    return 0;
}

int collect_limits(struct cli *c, const char *plan_name, int64_t plan_id, struct limit_pick *pick)
{
    pick->n = 0;
    int r = catalog_limit_each(c->cat, plan_id, pick_limit, pick);
    if (r == -E2BIG)
        return cli_fail("plan \"%s\" has more than %d limits of that kind", plan_name, MAX_PLAN_LIMITS);
    return r ? catalog_failed(c) : 0;
}

int update_limit(struct cli *c, const struct catalog_limit *l)
{
    int r = catalog_limit_update(c->cat, l);
    if (r == CATALOG_INVALID) {
        char rate[64];
        return cli_fail("rate %s with burst %" PRId64 " is out of range",
                        limit_rate_format(l->amount, l->window_ms, rate, sizeof(rate)), l->burst);
    }
    return r ? catalog_failed(c) : 0;
}

int add_limits(struct cli *c, struct catalog_limit *limits, int n)
{
    for (int i = 0; i < n; i++)
        if (catalog_limit_add(c->cat, &limits[i], &limits[i].id))
            return catalog_failed(c);
    return 0;
}

int announce_new_limits(struct cli *c, const struct catalog_limit *limits, int n, const char *whom,
                        const char *what)
{
    char err[512];
    if (tier_catalog_check_bounds(c->cat, err, sizeof(err)) != 0 ||
        tier_catalog_check_costs(c->cat, err, sizeof(err)) != 0)   /* before the ids go out */
        return cli_fail("%s; nothing was changed", err);
    char text[sizeof(c->note)] = "";
    for (int i = 0; i < n; i++) {
        char one[CATALOG_PREFIX_MAX + 128];
        printf("%" PRId64 "\n", limits[i].id);
        describe_full(&limits[i], one, sizeof(one));
        append(text, sizeof(text), "%s%" PRId64 " %s", i ? ", " : "", limits[i].id, one);
    }
    note(c, "%s: added %s%s %s", whom, what, n == 1 ? "" : "s", text);
    return 0;
}

/* ---- limits as listed ---- */

int limit_table_row(void *ctx, const struct catalog_limit *l)
{
    char id[32], amount[64], route[CATALOG_PREFIX_MAX + 32];
    snprintf(id, sizeof(id), "%" PRId64, l->id);
    if (l->kind == CATALOG_LIMIT_CONCURRENCY)
        snprintf(amount, sizeof(amount), "%" PRId64, l->amount);
    else if (l->kind == CATALOG_LIMIT_QUOTA)
        limit_quota_format(l->amount, l->period, amount, sizeof(amount));
    else
        limit_rate_format(l->amount, l->window_ms, amount, sizeof(amount));
    char burst[32];
    snprintf(burst, sizeof(burst), "%" PRId64, l->burst);
    if (l->route_method)
        snprintf(route, sizeof(route), "%s %s", l->route_method, l->route_prefix);
    bool rate = l->kind == CATALOG_LIMIT_RATE;
    return table_row(ctx, id, catalog_limit_kind_name(l->kind), amount, rate ? burst : "-",
                     rate ? limit_kind_name(l->algorithm) : "-", l->route_method ? route : "-");
}

int limit_json_append(void *ctx, const struct catalog_limit *l)
{
    json_t *o = catalog_json_limit(l);
    if (!o || json_array_append_new(ctx, o))
        return -ENOMEM;
    return 0;
}

/* ---- the commands ---- */

int cmd_limit_add(struct cli *c)
{
    int r = limit_flags_check(c, true);
    if (r)
        return r;
    int64_t plan_id;
    if (catalog_plan_find(c->cat, c->args.pos[0], &plan_id, NULL))
        return catalog_failed(c);
    struct catalog_limit limits[MAX_FLAG_LIMITS];
    int n = limits_from_flags(c, plan_id, true, limits);
    if ((r = add_limits(c, limits, n)) != 0)
        return r;
    char whom[CATALOG_NAME_MAX + 8];
    snprintf(whom, sizeof(whom), "plan %s", c->args.pos[0]);
    return announce_new_limits(c, limits, n, whom, "limit");
}

/* Reads limit pos[1] of plan pos[0] into *one. Returns 0 or the status, said why. */
static int find_limit(struct cli *c, int64_t *pplan_id, struct limit_copy *one)
{
    int64_t limit_id;
    const char *plan = c->args.pos[0];
    if (cli_parse_int(c->args.pos[1], 1, CATALOG_ID_MAX, &limit_id))
        return cli_usage_error(&c->args, "invalid LIMIT-ID \"%s\"", c->args.pos[1]);
    if (catalog_plan_find(c->cat, plan, pplan_id, NULL))
        return catalog_failed(c);
    struct limit_pick pick = {.kind = -1, .id = limit_id, .items = one};
    int r = collect_limits(c, plan, *pplan_id, &pick);
    if (r)
        return r;
    if (pick.n == 0)
        return cli_fail("plan \"%s\" has no limit %" PRId64, plan, limit_id);
    return 0;
}

int cmd_limit_remove(struct cli *c)
{
    int64_t plan_id;
    struct limit_copy old;
    int r = find_limit(c, &plan_id, &old);
    if (r)
        return r;
    if (catalog_limit_remove(c->cat, plan_id, old.l.id))
        return catalog_failed(c);
    char text[CATALOG_PREFIX_MAX + 128];
    describe_full(&old.l, text, sizeof(text));
    note(c, "plan %s: removed limit %" PRId64 " (%s)", c->args.pos[0], old.l.id, text);
    return 0;
}

/* The flags limit set gives to a limit of l's kind, into l. Returns 0, or the status when
 * flags of another kind are given. */
static int set_from_flags(const struct limit_flags *lf, struct catalog_limit *l)
{
    static const char *const what[] = {
        [CATALOG_LIMIT_RATE] = "a rate limit: give --rate, --burst or --algorithm",
        [CATALOG_LIMIT_CONCURRENCY] = "a concurrency limit: give --concurrency",
        [CATALOG_LIMIT_WS_MESSAGES] = "a ws-messages limit: give --ws-messages",
        [CATALOG_LIMIT_QUOTA] = "a quota: give --quota",
    };
    bool rate = lf->n_rates || lf->burst || lf->algorithm;
    bool given[] = {
        [CATALOG_LIMIT_RATE] = rate, [CATALOG_LIMIT_CONCURRENCY] = lf->concurrency,
        [CATALOG_LIMIT_WS_MESSAGES] = lf->ws, [CATALOG_LIMIT_QUOTA] = lf->quota,
    };
    if (!given[l->kind] || rate + lf->concurrency + lf->ws + lf->quota > 1)
        return cli_fail("limit %" PRId64 " is %s", l->id, what[l->kind]);
    if (l->kind == CATALOG_LIMIT_RATE) {
        if (lf->n_rates) {
            l->amount = lf->rate_amount[0];
            l->window_ms = lf->rate_window_ms[0];
        }
        l->burst = lf->burst ? lf->burst_value : l->burst;
        l->algorithm = lf->algorithm ? lf->algorithm_value : l->algorithm;
    } else if (l->kind == CATALOG_LIMIT_QUOTA) {
        l->amount = lf->quota_amount;
        l->period = lf->quota_period;
    } else if (l->kind == CATALOG_LIMIT_CONCURRENCY) {
        l->amount = lf->concurrency_value;
    } else {
        l->amount = lf->ws_amount;
        l->window_ms = lf->ws_window_ms;
    }
    return 0;
}

/* Changes only what the flags give; the limit keeps its id, so the stores keep counting
 * under it (they start afresh by themselves when the algorithm changes: a state is tagged
 * with its kind, store/limit.h). */
int cmd_limit_set(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    if (!lf->n_rates && !lf->burst && !lf->algorithm && !lf->concurrency && !lf->ws && !lf->quota)
        return cli_usage_error(&c->args, "give the LIMIT-FLAGS to change");
    int64_t plan_id;
    struct limit_copy old;
    int r = find_limit(c, &plan_id, &old);
    if (r)
        return r;
    struct catalog_limit l = old.l;
    if ((r = set_from_flags(lf, &l)) != 0 || (r = update_limit(c, &l)) != 0)
        return r;
    char before[CATALOG_PREFIX_MAX + 96], after[CATALOG_PREFIX_MAX + 96];
    describe_value(&old.l, before, sizeof(before));
    describe_value(&l, after, sizeof(after));
    note(c, "plan %s: limit %" PRId64 " %s %s -> %s%s", c->args.pos[0], l.id, kind_word(l.kind), before, after,
         l.algorithm != old.l.algorithm ? " (a new algorithm: its counts start afresh)" : "");
    return 0;
}
