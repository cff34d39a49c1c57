/* tierctl init, plan add, plan set, plan list, plan show, plan remove (tierctl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tiers/catalog_json.h"
#include "tiers/table.h"
#include "tiers/tierctl.h"

/* ---- init ---- */

int cmd_init(struct cli *c)
{
    static const struct { const char *name; int64_t rate; } defaults[] = {
        {"free", 100}, {"starter", 3000}, {"pro", 20000},
    };
    char created[64] = "";
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
        int64_t plan_id;
        int r = catalog_plan_find(c->cat, defaults[i].name, &plan_id, NULL);
        if (r == 0)
            continue;   /* exists: left as the operator made it */
        if (r != CATALOG_NOT_FOUND)
            return catalog_failed(c);
        struct catalog_plan plan = {.name = defaults[i].name, .priority = CATALOG_PRIORITY_DEFAULT};
        struct catalog_limit rate = {
            .kind = CATALOG_LIMIT_RATE, .algorithm = LIMIT_SLIDING_LOG,
            .amount = defaults[i].rate, .window_ms = 60000,
        };
        struct catalog_limit concurrency = {.kind = CATALOG_LIMIT_CONCURRENCY, .amount = 10};
        if (catalog_plan_add(c->cat, &plan, &plan_id))
            return catalog_failed(c);
        rate.plan_id = concurrency.plan_id = plan_id;
        if (catalog_limit_add(c->cat, &rate, NULL) || catalog_limit_add(c->cat, &concurrency, NULL))
            return catalog_failed(c);
        append(created, sizeof(created), "%s%s", created[0] ? ", " : "", defaults[i].name);
    }
    if (created[0])
        note(c, "catalog %s: created plans %s", c->db_path, created);
    else
        note(c, "catalog %s: the default plans exist; nothing changed", c->db_path);
    return 0;
}

/* ---- plan add ---- */

int cmd_plan_add(struct cli *c)
{
    const char *name = c->args.pos[0];
    char msg[256];
    if (catalog_check_plan_name(name, msg, sizeof(msg)))
        return cli_usage_error(&c->args, "%s", msg);
    int r = limit_flags_check(c, false);
    if (r)
        return r;
    struct catalog_plan plan = {
        .name = name, .shadow = c->lf.shadow && c->lf.shadow_value,
        .priority = c->lf.priority ? (int)c->lf.priority_value : CATALOG_PRIORITY_DEFAULT,
    };
    int64_t plan_id;
    if (catalog_plan_add(c->cat, &plan, &plan_id))
        return catalog_failed(c);
    struct catalog_limit limits[MAX_FLAG_LIMITS];
    int n = limits_from_flags(c, plan_id, false, limits);
    if ((r = add_limits(c, limits, n)) != 0)
        return r;
    char text[512] = "";
    for (int i = 0; i < n; i++) {
        char one[CATALOG_PREFIX_MAX + 128];
        describe_full(&limits[i], one, sizeof(one));
        append(text, sizeof(text), "%s%s", i ? ", " : "", one);
    }
    note(c, "plan %s: added with %s%s, priority %d", name, n ? text : "no limits", plan.shadow ? ", shadow on" : "",
         plan.priority);
    return 0;
}

/* ---- plan set ---- */

/* The ids a replacement kept, removed and added. */
struct replaced {
    int64_t kept[MAX_FLAG_LIMITS], removed[MAX_PLAN_LIMITS], added[MAX_FLAG_LIMITS];
    size_t nkept, nremoved, nadded;
};

/* Appends " (limit 7 kept" style lists: "limits 7, 8 kept", "; 9 removed". */
static void append_ids(char *buf, size_t len, const char *what, const int64_t *ids, size_t n, bool *first)
{
    if (n == 0)
        return;
    append(buf, len, "%s", *first ? " (" : "; ");
    *first = false;
    for (size_t i = 0; i < n; i++)
        append(buf, len, "%s%" PRId64, i ? ", " : (n > 1 ? "limits " : "limit "), ids[i]);
    append(buf, len, " %s", what);
}

static void append_all_ids(char *buf, size_t len, const struct replaced *ids)
{
    bool first = true;
    append_ids(buf, len, "kept", ids->kept, ids->nkept, &first);
    append_ids(buf, len, "removed", ids->removed, ids->nremoved, &first);
    append_ids(buf, len, "added", ids->added, ids->nadded, &first);
    if (!first)
        append(buf, len, ")");
}

/* Where each wanted limit goes: place[w], the index of the limit whose place (and id, and so
 * the users' counts) it takes, the one of the same window first, else the first left; -1:
 * none left, it is added. taken[i]: limit i has a wanted limit in its place. */
static void match_places(const struct limit_copy *items, size_t n_items, const struct catalog_limit *want,
                         size_t n_want, int *place, bool *taken)
{
    for (size_t i = 0; i < n_items; i++)
        taken[i] = false;
    for (size_t w = 0; w < n_want; w++) {
        place[w] = -1;
        for (size_t i = 0; i < n_items && place[w] < 0; i++) {
            if (!taken[i] && items[i].l.window_ms == want[w].window_ms && items[i].l.period == want[w].period) {
                place[w] = (int)i;
                taken[i] = true;
            }
        }
    }
    for (size_t w = 0; w < n_want; w++) {
        for (size_t i = 0; i < n_items && place[w] < 0; i++) {
            if (!taken[i]) {
                place[w] = (int)i;
                taken[i] = true;
            }
        }
    }
}

/* Puts want in old's place. It keeps what the command does not name: a rate's burst and
 * algorithm. */
static int take_place(struct cli *c, const struct catalog_limit *old, struct catalog_limit *want,
                      struct replaced *ids)
{
    want->id = old->id;
    if (want->kind == CATALOG_LIMIT_RATE && !c->lf.burst)
        want->burst = old->burst;
    if (want->kind == CATALOG_LIMIT_RATE && !c->lf.algorithm)
        want->algorithm = old->algorithm;
    int r = update_limit(c, want);
    if (r == 0)
        ids->kept[ids->nkept++] = want->id;
    return r;
}

/* Makes the limits in place and returns 0, or the status. */
static int apply_places(struct cli *c, const struct limit_copy *items, size_t n_items, struct catalog_limit *want,
                        size_t n_want, struct replaced *ids)
{
    int place[MAX_FLAG_LIMITS];
    bool taken[MAX_PLAN_LIMITS];
    match_places(items, n_items, want, n_want, place, taken);
    for (size_t w = 0; w < n_want; w++) {
        int r = 0;
        if (place[w] >= 0)
            r = take_place(c, &items[place[w]].l, &want[w], ids);
        else if ((r = add_limits(c, &want[w], 1)) == 0)
            ids->added[ids->nadded++] = want[w].id;
        if (r)
            return r;
    }
    for (size_t i = 0; i < n_items; i++) {
        if (taken[i])
            continue;
        if (catalog_limit_remove(c->cat, items[i].l.plan_id, items[i].l.id))
            return catalog_failed(c);
        ids->removed[ids->nremoved++] = items[i].l.id;
    }
    return 0;
}

/* Appends the values of limits joined by ", ", or "none". */
static void append_values(char *text, size_t len, const struct catalog_limit *limits, size_t n)
{
    char value[CATALOG_PREFIX_MAX + 96];
    if (n == 0)
        append(text, len, "none");
    for (size_t i = 0; i < n; i++) {
        describe_value(&limits[i], value, sizeof(value));
        append(text, len, "%s%s", i ? ", " : "", value);
    }
}

/* Appends "rate 3/10s, 100/day -> 5/s": a kind's limits before and after. */
static void append_change(char *text, size_t len, const struct limit_copy *items, size_t n_items,
                          const struct catalog_limit *after, size_t n_after)
{
    struct catalog_limit before[MAX_PLAN_LIMITS];
    for (size_t i = 0; i < n_items; i++)
        before[i] = items[i].l;
    append(text, len, "%s%s ", text[0] ? "; " : "", kind_word(after[0].kind));
    append_values(text, len, before, n_items);
    append(text, len, " -> ");
    append_values(text, len, after, n_after);
}

/* plan set for one kind: the plan's route-less limits of want's kind become want[0..n),
 * each in the place of one of them (match_places); those left over are removed. Appends
 * to text what it replaced: "rate 3/10s, 100/day -> 5/s (limit 7 kept; 8 removed)". */
static int replace_routeless(struct cli *c, const char *plan_name, struct catalog_limit *want, size_t n,
                             char *text, size_t len)
{
    struct limit_copy items[MAX_PLAN_LIMITS];
    struct limit_pick pick = {.kind = (int)want[0].kind, .routeless_only = true, .items = items};
    struct replaced ids = {.nkept = 0};
    int r = collect_limits(c, plan_name, want[0].plan_id, &pick);
    if (r || (r = apply_places(c, items, pick.n, want, n, &ids)) != 0)
        return r;
    append_change(text, len, items, pick.n, want, n);
    append_all_ids(text, len, &ids);
    return 0;
}

/* plan set --burst/--algorithm without --rate: every route-less rate limit of the plan
 * takes the new burst/algorithm in place, keeping its id. */
static int change_routeless_rates(struct cli *c, const char *plan_name, int64_t plan_id, char *text, size_t len)
{
    const struct limit_flags *lf = &c->lf;
    struct limit_copy items[MAX_PLAN_LIMITS];
    struct limit_pick pick = {.kind = CATALOG_LIMIT_RATE, .routeless_only = true, .items = items};
    struct catalog_limit changed[MAX_PLAN_LIMITS];
    int64_t kept[MAX_PLAN_LIMITS];
    int r = collect_limits(c, plan_name, plan_id, &pick);
    if (r)
        return r;
    if (pick.n == 0)
        return cli_fail("plan \"%s\" has no plan-wide rate limit to change: give --rate", plan_name);
    for (size_t i = 0; i < pick.n; i++) {
        changed[i] = items[i].l;
        if (lf->burst)
            changed[i].burst = lf->burst_value;
        if (lf->algorithm)
            changed[i].algorithm = lf->algorithm_value;
        if ((r = update_limit(c, &changed[i])) != 0)
            return r;
        kept[i] = changed[i].id;
    }
    append_change(text, len, items, pick.n, changed, pick.n);
    bool first = true;
    append_ids(text, len, "kept", kept, pick.n, &first);
    append(text, len, ")");
    return 0;
}

/* --shadow and --priority of plan set. */
static int set_plan_settings(struct cli *c, int64_t plan_id, bool shadow, char *text, size_t len)
{
    const struct limit_flags *lf = &c->lf;
    if (lf->shadow) {
        if (catalog_plan_set_shadow(c->cat, plan_id, lf->shadow_value))
            return catalog_failed(c);
        append(text, len, "%sshadow %s -> %s", text[0] ? "; " : "", shadow ? "on" : "off",
               lf->shadow_value ? "on" : "off");
    }
    if (lf->priority) {
        int old = 0;
        if (catalog_plan_priority(c->cat, plan_id, &old) ||
            catalog_plan_set_priority(c->cat, plan_id, (int)lf->priority_value))
            return catalog_failed(c);
        append(text, len, "%spriority %d -> %d", text[0] ? "; " : "", old, (int)lf->priority_value);
    }
    return 0;
}

int cmd_plan_set(struct cli *c)
{
    const char *name = c->args.pos[0];
    struct limit_flags *lf = &c->lf;
    if (!lf->n_rates && !lf->burst && !lf->algorithm && !lf->concurrency && !lf->ws && !lf->shadow && !lf->quota &&
        !lf->priority)
        return cli_usage_error(&c->args, "nothing to set: give LIMIT-FLAGS, --shadow or --priority");
    int64_t plan_id;
    bool shadow;
    if (catalog_plan_find(c->cat, name, &plan_id, &shadow))
        return catalog_failed(c);
    char text[sizeof(c->note)] = "";
    int r = 0;
    if (!lf->n_rates && (lf->burst || lf->algorithm))
        r = change_routeless_rates(c, name, plan_id, text, sizeof(text));
    struct catalog_limit want[MAX_FLAG_LIMITS];
    int n = limits_from_flags(c, plan_id, false, want);
    for (int i = 0, k; r == 0 && i < n; i = k) {
        for (k = i; k < n && want[k].kind == want[i].kind; k++)
            ;
        r = replace_routeless(c, name, want + i, (size_t)(k - i), text, sizeof(text));
    }
    if (r || (r = set_plan_settings(c, plan_id, shadow, text, sizeof(text))) != 0)
        return r;
    note(c, "plan %s: %s", name, text);
    return 0;
}

/* ---- plan list, plan show ---- */

/* A plan as JSON for list/show: its export form plus the number of users. */
struct plan_view {
    json_t *array;                     /* JSON output: plans collected here */
    struct table *table;               /* text output */
    struct catalog *cat;
};

struct summary {
    char text[1024];
};

static int collect_limit_summary(void *ctx, const struct catalog_limit *l)
{
    struct summary *s = ctx;
    char one[CATALOG_PREFIX_MAX + 96];
    describe_limit(l, one, sizeof(one));
    append(s->text, sizeof(s->text), "%s%s", s->text[0] ? "; " : "", one);
    return 0;
}

static int collect_cost_json(void *ctx, const struct catalog_cost *cost)
{
    json_t *o = catalog_json_cost(cost);
    if (!o || json_array_append_new(ctx, o))
        return -ENOMEM;
    return 0;
}

static json_t *plan_json(struct catalog *cat, const struct catalog_plan *plan)
{
    int64_t users = 0;
    json_t *o = json_pack("{s:I, s:o, s:b, s:i, s:I, s:[], s:[]}", "id", (json_int_t)plan->id, "name",
                          catalog_json_text(plan->name), "shadow", plan->shadow, "priority", plan->priority,
                          "users", (json_int_t)0, "limits", "costs");
    if (!o)
        return NULL;
    if (catalog_plan_user_count(cat, plan->id, &users) ||
        json_object_set_new(o, "users", json_integer(users)) ||
        catalog_limit_each(cat, plan->id, limit_json_append, json_object_get(o, "limits")) ||
        catalog_cost_each(cat, plan->id, collect_cost_json, json_object_get(o, "costs"))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int collect_cost_summary(void *ctx, const struct catalog_cost *cost)
{
    struct summary *s = ctx;
    append(s->text, sizeof(s->text), "%scost %" PRId64 " on %s %s", s->text[0] ? "; " : "", cost->cost,
           cost->route_method, cost->route_prefix);
    return 0;
}

static int list_plan(void *ctx, const struct catalog_plan *plan)
{
    struct plan_view *v = ctx;
    if (v->array) {
        json_t *o = plan_json(v->cat, plan);
        if (!o || json_array_append_new(v->array, o))
            return -EIO;
        return 0;
    }
    int64_t users = 0;
    struct summary s = {.text = ""};
    int r = catalog_plan_user_count(v->cat, plan->id, &users);
    if (r == 0)
        r = catalog_limit_each(v->cat, plan->id, collect_limit_summary, &s);
    if (r == 0)
        r = catalog_cost_each(v->cat, plan->id, collect_cost_summary, &s);
    if (r)
        return r;
    char nusers[32], priority[16];
    snprintf(nusers, sizeof(nusers), "%" PRId64, users);
    snprintf(priority, sizeof(priority), "%d", plan->priority);
    return table_row(v->table, plan->name, plan->shadow ? "on" : "off", priority, nusers, s.text[0] ? s.text : "none");
}

int cmd_plan_list(struct cli *c)
{
    struct table t = {.ncols = 5};
    struct plan_view v = {.cat = c->cat, .table = &t};
    if (c->args.flag[FLAG_JSON] && !(v.array = json_array()))
        return cli_fail("out of memory");
    if (!v.array)
        table_row(&t, "NAME", "SHADOW", "PRIORITY", "USERS", "LIMITS");
    int r = catalog_plan_each(c->cat, list_plan, &v);
    if (r) {
        json_decref(v.array);
        table_print_free(&t);   /* frees; nothing printed on failure paths that matter */
        return r == -EIO || r == -ENOMEM ? cli_fail("cannot list plans: %s", catalog_errmsg(c->cat))
                                         : catalog_failed(c);
    }
    if (v.array)
        return print_json(v.array);
    table_print_free(&t);
    return 0;
}

static int cost_row(void *ctx, const struct catalog_cost *cost)
{
    char n[32], route[CATALOG_PREFIX_MAX + 32];
    snprintf(n, sizeof(n), "%" PRId64, cost->cost);
    snprintf(route, sizeof(route), "%s %s", cost->route_method, cost->route_prefix);
    return table_row(ctx, n, route);
}

/* plan show's tables: the limits, then the costs when there are any. */
static int print_plan_tables(struct cli *c, int64_t plan_id)
{
    struct table t = {.ncols = 6};
    table_row(&t, "LIMIT-ID", "KIND", "AMOUNT", "BURST", "ALGORITHM", "ROUTE");
    if (catalog_limit_each(c->cat, plan_id, limit_table_row, &t)) {
        table_print_free_silent(&t);
        return catalog_failed(c);
    }
    table_print_free(&t);
    struct table costs = {.ncols = 2};
    table_row(&costs, "COST", "ROUTE");
    if (catalog_cost_each(c->cat, plan_id, cost_row, &costs)) {
        table_print_free(&costs);
        return catalog_failed(c);
    }
    if (costs.nrows > 1)
        table_print_free(&costs);
    else
        table_print_free_silent(&costs);
    return 0;
}

int cmd_plan_show(struct cli *c)
{
    struct catalog_plan plan = {.name = c->args.pos[0]};
    bool shadow;
    if (catalog_plan_find(c->cat, plan.name, &plan.id, &shadow))
        return catalog_failed(c);
    plan.shadow = shadow;
    if (catalog_plan_priority(c->cat, plan.id, &plan.priority))
        return catalog_failed(c);
    if (c->args.flag[FLAG_JSON]) {
        json_t *o = plan_json(c->cat, &plan);
        return o ? print_json(o) : catalog_failed(c);
    }
    int64_t users = 0;
    if (catalog_plan_user_count(c->cat, plan.id, &users))
        return catalog_failed(c);
    printf("plan      %s\nid        %" PRId64 "\nshadow    %s\npriority  %d\nusers     %" PRId64 "\n", plan.name,
           plan.id, plan.shadow ? "on" : "off", plan.priority, users);
    return print_plan_tables(c, plan.id);
}

/* ---- plan remove ---- */

static int count_limit(void *ctx, const struct catalog_limit *l)
{
    (void)l;
    (*(int64_t *)ctx)++;
    return 0;
}

int cmd_plan_remove(struct cli *c)
{
    const char *name = c->args.pos[0];
    int64_t plan_id, nlimits = 0;
    if (catalog_plan_find(c->cat, name, &plan_id, NULL) || catalog_limit_each(c->cat, plan_id, count_limit, &nlimits))
        return catalog_failed(c);
    int r = catalog_plan_remove(c->cat, plan_id);
    if (r == CATALOG_IN_USE)
        return cli_fail("plan \"%s\" is in use: %s", name, catalog_errmsg(c->cat));
    if (r)
        return catalog_failed(c);
    note(c, "plan %s: removed, with its %" PRId64 " limit%s", name, nlimits, nlimits == 1 ? "" : "s");
    return 0;
}
