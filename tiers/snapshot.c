/* The immutable in-memory catalog the proxy serves from. See snapshot.h.
 *
 * Layout: one array of plans, one array of limits (each plan points at its slice), one
 * array of users sorted by id, and an open-addressing hash table of active keys indexed by
 * the first 8 bytes of their SHA-256 (already uniformly distributed). All strings live in
 * an arena freed with the snapshot. Nothing is written after snapshot_build returns, so
 * any number of threads may read a snapshot they hold a reference to.
 *
 * Route matching (tier_plan_select, tier_plan_select_case) is a plain prefix test
 * (request_target_has_prefix: bytes as they are, or ASCII case folded with path_case =
 * insensitive) on the request's path, never its query (request_target.h), like an nginx
 * prefix location: a route "GET /v1" matches "/v1", "/v1/x" and also "/v1x". Write
 * "GET /v1/" to match only below /v1/. */
#include "tiers/snapshot.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog/catalog.h"
#include "store/catalog/catalog_image.h"
#include "store/limiter.h"
#include "tiers/apikey.h"
#include "tiers/limit_bounds.h"
#include "tiers/own_limits.h"
#include "tiers/request_target.h"
#include "tiers/snapshot_impl.h"

#define ARENA_BLOCK 65536

static char *arena_strdup(struct snapshot *snap, const char *s)
{
    size_t n = strlen(s) + 1;
    struct arena_block *b = snap->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = snap->arena;
        snap->arena = b;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    b->used += n;
    return p;
}

void snapshot_free(struct snapshot *snap)
{
    if (!snap)
        return;
    if (snap->body) {   /* a patched snapshot: only its overlay is its own */
        free(snap->overlay);
        snapshot_unref(snap->body);
        free(snap);
        return;
    }
    for (struct arena_block *b = snap->arena, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(snap->plans);
    free(snap->limits);
    free(snap->costs);
    free(snap->own_limits);
    free(snap->own_plans);
    free(snap->merged);
    free(snap->users);
    free(snap->keys);
    free(snap);
}

struct snapshot *snapshot_ref(struct snapshot *snap)
{
    if (snap)
        atomic_fetch_add_explicit(&snap->refs, 1, memory_order_relaxed);
    return snap;
}

void snapshot_unref(struct snapshot *snap)
{
    if (snap && atomic_fetch_sub_explicit(&snap->refs, 1, memory_order_acq_rel) == 1)
        snapshot_free(snap);
}

/* ---- building ---- */

/* A growable array of fixed-size elements. */
struct vec {
    void *items;
    size_t n, cap, size;
};

static void *vec_push(struct vec *v)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        void *items = realloc(v->items, cap * v->size);
        if (!items)
            return NULL;
        v->items = items;
        v->cap = cap;
    }
    void *p = (char *)v->items + v->n * v->size;
    v->n++;
    memset(p, 0, v->size);
    return p;
}

struct pending_key {
    uint8_t hash[TIER_KEY_HASH_LEN];
    char *user_id;                     /* in the arena */
};

struct build {
    struct snapshot *snap;
    struct vec plans;                  /* struct tier_plan */
    struct vec limits;                 /* struct tier_limit, with plan ids in plan_ids */
    struct vec plan_ids;               /* int64_t per limit */
    struct vec costs;                  /* struct tier_cost, with plan ids in cost_plan_ids */
    struct vec cost_plan_ids;
    struct vec own;                    /* struct tier_limit, with user ids in own_user_ids */
    struct vec own_user_ids;           /* const char * (arena) per own limit */
    struct vec users;                  /* struct tier_user */
    struct vec keys;                   /* struct pending_key */
    bool users_sorted;
    char *err;
    size_t errlen;
};

static int on_plan(void *ctx, const struct catalog_plan *plan)
{
    struct build *b = ctx;
    struct tier_plan *p = vec_push(&b->plans);
    if (!p || !(p->name = arena_strdup(b->snap, plan->name)))
        return -ENOMEM;
    p->id = plan->id;
    p->shadow = plan->shadow;
    p->priority = plan->priority;
    return 0;
}

/* A quota's period as a window, for the RateLimit headers' w= (a month as 30 days). */
static int64_t period_nominal_ms(enum limit_period period)
{
    switch (period) {
    case LIMIT_PERIOD_DAY: return 86400000;
    case LIMIT_PERIOD_WEEK: return 7 * 86400000LL;
    case LIMIT_PERIOD_MONTH: return 30 * 86400000LL;
    default: return 0;
    }
}

/* Fills l from a catalog limit (a plan's or a user's own). */
static int fill_limit(struct build *b, struct tier_limit *l, const struct catalog_limit *limit)
{
    l->id = limit->id;
    switch (limit->kind) {
    case CATALOG_LIMIT_RATE: l->kind = TIER_LIMIT_RATE; break;
    case CATALOG_LIMIT_CONCURRENCY: l->kind = TIER_LIMIT_CONCURRENCY; break;
    case CATALOG_LIMIT_WS_MESSAGES: l->kind = TIER_LIMIT_WS_MESSAGES; break;
    case CATALOG_LIMIT_QUOTA: l->kind = TIER_LIMIT_QUOTA; break;
    }
    l->rule = (struct limit_rule){
        .id = limit->id, .kind = limit->algorithm, .rate = limit->amount,
        .burst = limit->burst, .window_ms = limit->window_ms,
    };
    if (l->kind == TIER_LIMIT_QUOTA) {
        l->rule.kind = LIMIT_QUOTA;
        l->rule.burst = 0;
        l->rule.period = limit->period;
        l->rule.window_ms = period_nominal_ms(limit->period);
    }
    l->own = limit->user_id != NULL;
    if (limit->route_method && limit->route_prefix) {
        l->has_route = true;
        snprintf(l->route_method, sizeof(l->route_method), "%s", limit->route_method);
        if (!(l->route_prefix = arena_strdup(b->snap, limit->route_prefix)))
            return -ENOMEM;
        l->route_prefix_len = strlen(l->route_prefix);
    }
    return 0;
}

static int on_cost(void *ctx, const struct catalog_cost *cost)
{
    struct build *b = ctx;
    struct tier_cost *c = vec_push(&b->costs);
    int64_t *plan_id = vec_push(&b->cost_plan_ids);
    if (!c || !plan_id)
        return -ENOMEM;
    *plan_id = cost->plan_id;
    snprintf(c->route_method, sizeof(c->route_method), "%s", cost->route_method);
    if (!(c->route_prefix = arena_strdup(b->snap, cost->route_prefix)))
        return -ENOMEM;
    c->route_prefix_len = strlen(c->route_prefix);
    c->cost = cost->cost;
    return 0;
}

static int on_own_limit(void *ctx, const struct catalog_limit *limit)
{
    struct build *b = ctx;
    struct tier_limit *l = vec_push(&b->own);
    const char **user_id = vec_push(&b->own_user_ids);
    if (!l || !user_id || !(*user_id = arena_strdup(b->snap, limit->user_id)))
        return -ENOMEM;
    return fill_limit(b, l, limit);
}

static int on_limit(void *ctx, const struct catalog_limit *limit)
{
    struct build *b = ctx;
    struct tier_limit *l = vec_push(&b->limits);
    int64_t *plan_id = vec_push(&b->plan_ids);
    if (!l || !plan_id)
        return -ENOMEM;
    *plan_id = limit->plan_id;
    return fill_limit(b, l, limit);
}

static int cmp_plan_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = ((const struct tier_plan *)b)->id;
    return x < y ? -1 : x > y;
}

static int on_user(void *ctx, const struct catalog_user *user)
{
    struct build *b = ctx;
    const struct tier_plan *plan = bsearch(&user->plan_id, b->snap->plans, b->snap->n_plans,
                                           sizeof(struct tier_plan), cmp_plan_id);
    if (!plan) {
        snprintf(b->err, b->errlen, "user \"%s\" is on plan id %lld, which does not exist",
                 user->id, (long long)user->plan_id);
        return -EINVAL;
    }
    struct tier_user *u = vec_push(&b->users);
    if (!u || !(u->id = arena_strdup(b->snap, user->id)))
        return -ENOMEM;
    u->plan = plan;   /* the plans array is complete and no longer moves */
    if (b->users.n > 1 && strcmp(u[-1].id, u->id) >= 0)
        b->users_sorted = false;
    return 0;
}

static int on_key(void *ctx, const struct catalog_key *key)
{
    struct build *b = ctx;
    struct pending_key *k = vec_push(&b->keys);
    if (!k || !(k->user_id = arena_strdup(b->snap, key->user_id)))
        return -ENOMEM;
    memcpy(k->hash, key->hash, TIER_KEY_HASH_LEN);
    return 0;
}

static int cmp_user(const void *a, const void *b)
{
    return strcmp(((const struct tier_user *)a)->id, ((const struct tier_user *)b)->id);
}

static int cmp_user_id(const void *key, const void *b)
{
    return strcmp(key, ((const struct tier_user *)b)->id);
}


/* A limit's name for the ietf RateLimit headers, from what an operator wrote, never an
 * internal id: "<plan>[-<METHOD> <prefix>]-<window>", "concurrency" in place of the
 * window for a concurrency limit, "ws-<window>" for a ws-messages limit ("free-1min",
 * "pro-POST /upload-10s", "free-concurrency"). */
static void limit_base_name(const struct tier_plan *plan, const struct tier_limit *l, char *buf,
                            size_t size)
{
    char window[32] = "concurrency";
    if (l->kind == TIER_LIMIT_QUOTA)
        snprintf(window, sizeof(window), "%s", limit_period_name(l->rule.period));
    else if (l->kind != TIER_LIMIT_CONCURRENCY)
        limit_window_format(l->rule.window_ms, window, sizeof(window));
    snprintf(buf, size, "%s%s%s%s%s-%s%s", plan->name, l->has_route ? "-" : "",
             l->has_route ? l->route_method : "", l->has_route ? " " : "",
             l->has_route ? l->route_prefix : "", l->kind == TIER_LIMIT_WS_MESSAGES ? "ws-" : "",
             window);
}

#define LIMIT_NAME_MAX (CATALOG_NAME_MAX + CATALOG_PREFIX_MAX + 96)

/* Names the limits of one plan: limit_base_name, and for a second limit with the same name
 * (two route-less 1-minute limits, say) "-2", "-3", ... in catalog order. Returns 0 or
 * -ENOMEM. */
static int name_plan_limits(struct snapshot *snap, const struct tier_plan *plan, struct tier_limit *limits,
                            size_t n)
{
    char (*base)[LIMIT_NAME_MAX] = n > 0 ? malloc(n * sizeof(*base)) : NULL;
    if (n > 0 && base == NULL)
        return -ENOMEM;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        limit_base_name(plan, &limits[k], base[k], sizeof(base[k]));
        size_t same = 0;
        for (size_t j = 0; j < k; j++)
            same += strcmp(base[j], base[k]) == 0;
        char name[LIMIT_NAME_MAX + 24];
        if (same > 0)
            snprintf(name, sizeof(name), "%s-%zu", base[k], same + 1);
        else
            snprintf(name, sizeof(name), "%s", base[k]);
        if (!(limits[k].name = arena_strdup(snap, name)))
            rc = -ENOMEM;
    }
    free(base);
    return rc;
}

/* A plan where one request could meet more limits than the limiter checks at once is
 * refused, as nginx refuses a configuration: served, some limits would go unchecked.
 * tierctl refuses to write one; this catches a catalog written before or by hand (start,
 * --check; a reload keeps the previous snapshot). Returns 0, -EINVAL or -ENOMEM. */
static int check_rules_per_request(const struct tier_plan *plan, char *err, size_t errlen)
{
    struct tier_route_ref *refs = plan->n_limits ? malloc(plan->n_limits * sizeof(*refs)) : NULL;
    if (plan->n_limits && refs == NULL)
        return -ENOMEM;
    size_t plan_wide = 0, n = 0;
    for (size_t i = 0; i < plan->n_limits; i++) {
        const struct tier_limit *l = &plan->limits[i];
        if (l->kind == TIER_LIMIT_WS_MESSAGES)
            continue;
        if (!l->has_route)
            plan_wide++;
        else
            refs[n++] = (struct tier_route_ref){l->route_method, l->route_prefix};
    }
    size_t worst = tier_worst_rules(plan_wide, refs, n);
    free(refs);
    if (worst <= LIMITER_MAX_RULES)
        return 0;
    snprintf(err, errlen,
             "plan \"%s\": one request could meet %zu limits (%zu plan-wide and %zu on one route),"
             " at most %d are supported; remove some with tierctl limit remove",
             plan->name, worst, plan_wide, worst - plan_wide, LIMITER_MAX_RULES);
    return -EINVAL;
}

/* A cost that a rate limit or quota it meets could never admit (tierctl refuses to write
 * one; limit_bounds.h) is refused here too: the store would refuse every such check. */
static int check_costs(const struct tier_plan *plan, const char *who, char *err, size_t errlen)
{
    struct tier_cost_ref refs[TIER_MAX_COSTS_PER_PLAN];
    size_t n = plan->n_costs;
    if (n > TIER_MAX_COSTS_PER_PLAN) {
        snprintf(err, errlen, "%s has %zu costs, at most %d are supported", who, n, TIER_MAX_COSTS_PER_PLAN);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        refs[i] = (struct tier_cost_ref){plan->costs[i].route_method, plan->costs[i].route_prefix, plan->costs[i].cost};
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < plan->n_limits; k++) {
            const struct tier_limit *l = &plan->limits[k];
            if ((l->kind != TIER_LIMIT_RATE && l->kind != TIER_LIMIT_QUOTA) ||
                refs[i].cost <= l->rule.rate + l->rule.burst ||
                !tier_cost_meets_limit(&refs[i], refs, n, l->has_route ? l->route_method : NULL,
                                       l->has_route ? l->route_prefix : NULL))
                continue;
            snprintf(err, errlen, "%s: cost %lld on \"%s %s\" is more than limit %lld admits",
                     who, (long long)refs[i].cost, refs[i].method, refs[i].prefix, (long long)l->id);
            return -EINVAL;
        }
    }
    return 0;
}

/* Gives each plan its slice of the limits and costs, and each limit its name. */
static int attach_limits(struct build *b)
{
    struct snapshot *snap = b->snap;
    const int64_t *plan_ids = b->plan_ids.items, *cost_plan_ids = b->cost_plan_ids.items;
    size_t j = 0, c = 0;
    for (size_t i = 0; i < snap->n_plans; i++) {
        struct tier_plan *plan = &snap->plans[i];
        while (j < snap->n_limits && plan_ids[j] < plan->id)
            j++;   /* limits of a plan that is gone (cannot happen with foreign keys) */
        size_t start = j;
        while (j < snap->n_limits && plan_ids[j] == plan->id)
            j++;
        plan->limits = snap->limits + start;
        plan->n_limits = j - start;
        while (c < snap->n_costs && cost_plan_ids[c] < plan->id)
            c++;
        size_t cost_start = c;
        while (c < snap->n_costs && cost_plan_ids[c] == plan->id)
            c++;
        plan->costs = snap->costs + cost_start;
        plan->n_costs = c - cost_start;
        int rc = name_plan_limits(snap, plan, snap->limits + start, j - start);
        if (rc == 0)
            rc = check_rules_per_request(plan, b->err, b->errlen);
        if (rc == 0) {
            char who[CATALOG_NAME_MAX + 16];
            snprintf(who, sizeof(who), "plan \"%s\"", plan->name);
            rc = check_costs(plan, who, b->err, b->errlen);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Whether one of own[0, n) replaces the plan's limit l. */
static bool replaced(const struct tier_limit *l, const struct tier_limit *own, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tier_own_limit_replaces(&own[i], l))
            return true;
    return false;
}

/* Gives each user its own limits and, for a user that has some, its own view of the plan
 * (tier_user.own_plan). Users are sorted; own limits come grouped by user. */
static int attach_own_limits(struct build *b)
{
    struct snapshot *snap = b->snap;
    const char **owners = b->own_user_ids.items;
    size_t n_own_users = 0, n_merged = 0;
    for (size_t i = 0; i < snap->n_own_limits;) {
        struct tier_user *u = bsearch(owners[i], snap->users, snap->n_users, sizeof(struct tier_user), cmp_user_id);
        size_t k = i;
        while (k < snap->n_own_limits && strcmp(owners[k], owners[i]) == 0)
            k++;
        if (u) {
            u->limits = snap->own_limits + i;
            u->n_limits = k - i;
            n_own_users++;
            n_merged += u->plan->n_limits + (k - i);
        }
        i = k;
    }
    if (n_own_users == 0)
        return 0;
    snap->own_plans = calloc(n_own_users, sizeof(struct tier_plan));
    snap->merged = calloc(n_merged, sizeof(struct tier_limit));
    if (!snap->own_plans || !snap->merged)
        return -ENOMEM;
    size_t p = 0, m = 0;
    for (size_t i = 0; i < snap->n_users; i++) {
        struct tier_user *u = &snap->users[i];
        if (u->n_limits == 0)
            continue;
        struct tier_plan *own = &snap->own_plans[p++];
        *own = *u->plan;
        own->limits = snap->merged + m;
        size_t start = m;
        for (size_t k = 0; k < u->plan->n_limits; k++)
            if (!replaced(&u->plan->limits[k], u->limits, u->n_limits))
                snap->merged[m++] = u->plan->limits[k];
        for (size_t k = 0; k < u->n_limits; k++)
            snap->merged[m++] = u->limits[k];
        tier_own_limits_take_state(u->plan->limits, u->plan->n_limits, snap->merged + m - u->n_limits, u->n_limits);
        own->n_limits = m - start;
        int rc = name_plan_limits(snap, own, snap->merged + start, m - start);
        if (rc == 0)
            rc = check_rules_per_request(own, b->err, b->errlen);
        if (rc == 0) {
            char who[CATALOG_USER_ID_MAX + 16];
            snprintf(who, sizeof(who), "user \"%s\"", u->id);
            rc = check_costs(own, who, b->err, b->errlen);
        }
        if (rc)
            return rc;
        u->own_plan = own;
    }
    return 0;
}

static int build_key_table(struct build *b)
{
    struct snapshot *snap = b->snap;
    size_t cap = 16;
    while (cap < 2 * b->keys.n)
        cap *= 2;
    snap->keys = calloc(cap, sizeof(struct key_slot));
    if (!snap->keys)
        return -ENOMEM;
    snap->key_mask = cap - 1;
    const struct pending_key *keys = b->keys.items;
    for (size_t i = 0; i < b->keys.n; i++) {
        const struct tier_user *user = bsearch(keys[i].user_id, snap->users, snap->n_users,
                                               sizeof(struct tier_user), cmp_user_id);
        if (!user)
            continue;   /* the query joins users; a missing one is skipped, not fatal */
        size_t s = snapshot_slot_of(keys[i].hash, snap->key_mask);
        while (snap->keys[s].user) {
            if (memcmp(snap->keys[s].hash, keys[i].hash, TIER_KEY_HASH_LEN) == 0)
                break;   /* UNIQUE in the catalog; never twice */
            s = (s + 1) & snap->key_mask;
        }
        if (snap->keys[s].user)
            continue;
        memcpy(snap->keys[s].hash, keys[i].hash, TIER_KEY_HASH_LEN);
        snap->keys[s].user = user;
        snap->n_keys++;
    }
    return 0;
}

/* Plans, then limits and costs, each array moved into the snapshot, and the limits and
 * costs attached to their plans. */
static int read_plans(struct catalog *cat, struct build *b)
{
    struct snapshot *snap = b->snap;
    bool changed;
    int r = catalog_fleet_mark(cat, &snap->catalog_version, &changed);
    if (r == 0)
        r = catalog_plan_each(cat, on_plan, b);
    if (r)
        return r;
    snap->plans = b->plans.items;
    snap->n_plans = b->plans.n;
    b->plans.items = NULL;
    r = catalog_limit_each(cat, 0, on_limit, b);
    if (r)
        return r;
    snap->limits = b->limits.items;
    snap->n_limits = b->limits.n;
    b->limits.items = NULL;
    r = catalog_cost_each(cat, 0, on_cost, b);
    if (r)
        return r;
    snap->costs = b->costs.items;
    snap->n_costs = b->costs.n;
    b->costs.items = NULL;
    return attach_limits(b);
}

/* Users sorted by id, then their own limits attached; needs the plans in place. */
static int read_users(struct catalog *cat, struct build *b)
{
    struct snapshot *snap = b->snap;
    int r = catalog_user_each(cat, 0, on_user, b);
    if (r)
        return r;
    snap->users = b->users.items;
    snap->n_users = b->users.n;
    b->users.items = NULL;
    if (!b->users_sorted)
        qsort(snap->users, snap->n_users, sizeof(struct tier_user), cmp_user);
    r = catalog_user_limit_each(cat, NULL, on_own_limit, b);
    if (r)
        return r;
    snap->own_limits = b->own.items;
    snap->n_own_limits = b->own.n;
    b->own.items = NULL;
    return attach_own_limits(b);
}

/* Everything in one read transaction, so the snapshot is of one catalog version. */
static int read_catalog(struct catalog *cat, struct build *b)
{
    int r = catalog_begin(cat, false);
    if (r)
        return r;
    r = read_plans(cat, b);
    if (r == 0)
        r = read_users(cat, b);
    if (r == 0)
        r = catalog_key_each(cat, NULL, true, on_key, b);
    catalog_rollback(cat);   /* a read transaction: nothing to commit */
    return r;
}

/* Frees what the build still owns: whatever did not move into the snapshot, and the
 * snapshot itself unless it was handed over. */
static void build_free(struct build *b)
{
    free(b->plans.items);
    free(b->limits.items);
    free(b->plan_ids.items);
    free(b->costs.items);
    free(b->cost_plan_ids.items);
    free(b->own.items);
    free(b->own_user_ids.items);
    free(b->users.items);
    free(b->keys.items);
    snapshot_free(b->snap);
}

int snapshot_build(struct catalog *cat, struct snapshot **psnap, char *err, size_t errlen)
{
    struct build b = {
        .plans = {.size = sizeof(struct tier_plan)},
        .limits = {.size = sizeof(struct tier_limit)},
        .plan_ids = {.size = sizeof(int64_t)},
        .costs = {.size = sizeof(struct tier_cost)},
        .cost_plan_ids = {.size = sizeof(int64_t)},
        .own = {.size = sizeof(struct tier_limit)},
        .own_user_ids = {.size = sizeof(const char *)},
        .users = {.size = sizeof(struct tier_user)},
        .keys = {.size = sizeof(struct pending_key)},
        .users_sorted = true,
        .err = err,
        .errlen = errlen,
    };
    err[0] = '\0';
    int r = 0;
    b.snap = calloc(1, sizeof(*b.snap));
    if (!b.snap) {
        r = -ENOMEM;
        goto out;
    }
    atomic_init(&b.snap->refs, 1);
    r = read_catalog(cat, &b);
    if (r)
        goto out;
    r = build_key_table(&b);
    if (r)
        goto out;
    *psnap = b.snap;
    b.snap = NULL;
out:
    if (r && !err[0]) {
        if (r == -ENOMEM)
            snprintf(err, errlen, "out of memory loading the catalog");
        else
            snprintf(err, errlen, "%s", catalog_errmsg(cat));
    }
    build_free(&b);
    return r;
}

int snapshot_load(const char *db_path, struct snapshot **psnap, char *err, size_t errlen)
{
    struct catalog *cat = NULL;
    int r = catalog_open(db_path, CATALOG_READ_ONLY, &cat, err, errlen);
    if (r)
        return r;
    r = snapshot_build(cat, psnap, err, errlen);
    catalog_close(cat);
    return r > 0 ? -EINVAL : r;
}

/* ---- lookups: the request path ---- */

const struct tier_user *snapshot_find_key(const struct snapshot *snap, const char *key, size_t key_len)
{
    uint8_t hash[TIER_KEY_HASH_LEN];
    if (!snap || !key || apikey_hash(key, key_len, hash) != 0)
        return NULL;
    return snapshot_key_user(snap, hash);
}

const struct tier_user *snapshot_find_user(const struct snapshot *snap, const char *id)
{
    if (!snap || !id)
        return NULL;
    return bsearch(id, snap->users, snap->n_users, sizeof(struct tier_user), cmp_user_id);
}

const struct tier_plan *snapshot_find_plan(const struct snapshot *snap, const char *name)
{
    if (!snap || !name)
        return NULL;
    for (size_t i = 0; i < snap->n_plans; i++)
        if (strcmp(snap->plans[i].name, name) == 0)
            return &snap->plans[i];
    return NULL;
}

size_t snapshot_user_count(const struct snapshot *snap)
{
    return snap ? snap->n_users : 0;
}

size_t snapshot_key_count(const struct snapshot *snap)
{
    return snap ? snap->n_keys : 0;
}

size_t snapshot_plan_count(const struct snapshot *snap)
{
    return snap ? snap->n_plans : 0;
}

const struct tier_plan *snapshot_plan_at(const struct snapshot *snap, size_t i)
{
    return snap && i < snap->n_plans ? &snap->plans[i] : NULL;
}

static bool route_matches(const struct tier_limit *l, const char *method, const char *path, size_t path_len,
                          bool ignore_case)
{
    if (!request_target_has_prefix(path, path_len, l->route_prefix, l->route_prefix_len, ignore_case))
        return false;
    return strcmp(l->route_method, "*") == 0 || (method && strcmp(l->route_method, method) == 0);
}

size_t tier_plan_select(const struct tier_plan *plan, const char *method, const char *path,
                        size_t path_len, const struct tier_limit **out, size_t max)
{
    return tier_plan_select_case(plan, method, path, path_len, false, out, max);
}

size_t tier_plan_select_case(const struct tier_plan *plan, const char *method, const char *path,
                             size_t path_len, bool ignore_case, const struct tier_limit **out, size_t max)
{
    size_t n = 0;
    if (!plan)
        return 0;
    if (!path)
        path_len = 0;
    /* The best route: the longest matching prefix; on a tie, a named method beats "*". */
    size_t best_len = 0;
    bool have_best = false, best_specific = false;
    for (size_t i = 0; i < plan->n_limits; i++) {
        const struct tier_limit *l = &plan->limits[i];
        if (!l->has_route) {
            if (n < max)
                out[n] = l;
            n++;
            continue;
        }
        if (!route_matches(l, method, path, path_len, ignore_case))
            continue;
        bool specific = strcmp(l->route_method, "*") != 0;
        if (!have_best || l->route_prefix_len > best_len ||
            (l->route_prefix_len == best_len && specific && !best_specific)) {
            have_best = true;
            best_len = l->route_prefix_len;
            best_specific = specific;
        }
    }
    if (!have_best)
        return n;
    for (size_t i = 0; i < plan->n_limits; i++) {
        const struct tier_limit *l = &plan->limits[i];
        if (l->has_route && l->route_prefix_len == best_len &&
            (strcmp(l->route_method, "*") != 0) == best_specific &&
            route_matches(l, method, path, path_len, ignore_case)) {
            if (n < max)
                out[n] = l;
            n++;
        }
    }
    return n;
}

int64_t tier_plan_cost(const struct tier_plan *plan, const char *method, const char *path, size_t path_len,
                       bool ignore_case)
{
    if (!plan || plan->n_costs == 0)
        return 1;
    if (!path)
        path_len = 0;
    const struct tier_cost *best = NULL;
    bool best_specific = false;
    for (size_t i = 0; i < plan->n_costs; i++) {
        const struct tier_cost *c = &plan->costs[i];
        bool specific = strcmp(c->route_method, "*") != 0;
        if (specific && (!method || strcmp(c->route_method, method) != 0))
            continue;
        if (!request_target_has_prefix(path, path_len, c->route_prefix, c->route_prefix_len, ignore_case))
            continue;
        if (!best || c->route_prefix_len > best->route_prefix_len ||
            (c->route_prefix_len == best->route_prefix_len && specific && !best_specific)) {
            best = c;
            best_specific = specific;
        }
    }
    return best ? best->cost : 1;
}

int64_t snapshot_catalog_version(const struct snapshot *snap)
{
    return snap->catalog_version;
}
