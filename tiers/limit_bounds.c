/* Route prefixes a request can match, and the most limits one request meets. See
 * limit_bounds.h. */
#include "tiers/limit_bounds.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/limiter.h"
#include "tiers/request_target.h"

/* Whether s holds "%" followed by the two hex digits of hex (upper case), in any case. */
static bool has_escape(const char *s, const char *hex)
{
    for (; (s = strchr(s, '%')) != NULL; s++)
        if (s[1] != '\0' && s[2] != '\0' && toupper((unsigned char)s[1]) == hex[0] &&
            toupper((unsigned char)s[2]) == hex[1])
            return true;
    return false;
}

static int refuse(char *err, size_t errlen, const char *prefix, const char *why)
{
    snprintf(err, errlen, "invalid route prefix \"%s\": %s", prefix, why);
    return -1;
}

int tier_route_prefix_check(const char *prefix, char *err, size_t errlen)
{
    if (strchr(prefix, '\\'))
        return refuse(err, errlen, prefix, "a backslash gets 400 bad_request_target, so no request matches it");
    if (has_escape(prefix, "00") || has_escape(prefix, "2F") || has_escape(prefix, "5C"))
        return refuse(err, errlen, prefix,
                      "%00, %2F and %5C get 400 bad_request_target, so no request matches it");
    if (strstr(prefix, "//"))
        return refuse(err, errlen, prefix, "requests are matched with repeated slashes merged, so no request has \"//\"");
    /* The rest by the proxy's own normaliser: prefix + "x" stands for every target that
     * starts with prefix (a plain prefix, like an nginx prefix location). */
    size_t n = strlen(prefix);
    char raw[CATALOG_PREFIX_MAX + 2];
    if (n + 1 >= sizeof(raw))
        return refuse(err, errlen, prefix, "too long");
    memcpy(raw, prefix, n);
    raw[n] = 'x';
    raw[n + 1] = '\0';
    char buf[2 * (CATALOG_PREFIX_MAX + 4)];
    struct request_target t;
    if (request_target_parse("GET", raw, n + 1, buf, sizeof(buf), &t) != 0)
        return refuse(err, errlen, prefix, "no request target the proxy accepts starts with it");
    if (t.match_len != n + 1 || memcmp(t.match, raw, n + 1) != 0) {
        char why[CATALOG_PREFIX_MAX + 200];
        snprintf(why, sizeof(why),
                 "requests are matched with dot segments removed and %%-encoded letters, digits"
                 " and -._~ decoded, so it never matches; write \"%.*s\"",
                 (int)(t.match_len > 0 ? t.match_len - 1 : 0), t.match);
        return refuse(err, errlen, prefix, why);
    }
    return 0;
}

static int cmp_route_ref(const void *a, const void *b)
{
    const struct tier_route_ref *x = a, *y = b;
    int c = strcmp(x->method, y->method);
    return c ? c : strcasecmp(x->prefix, y->prefix);
}

size_t tier_worst_rules(size_t plan_wide, struct tier_route_ref *refs, size_t n)
{
    if (n > 0)
        qsort(refs, n, sizeof(*refs), cmp_route_ref);
    size_t best = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && cmp_route_ref(&refs[i], &refs[j]) == 0)
            j++;
        if (j - i > best)
            best = j - i;
        i = j;
    }
    return plan_wide + best;
}

/* ---- the catalog, for tierctl ---- */

struct plan_count {
    int64_t id;
    char name[CATALOG_NAME_MAX + 1];
    size_t plan_wide;
    size_t n, cap;
    struct tier_route_ref *refs;   /* strings owned */
};

struct bounds_walk {
    struct plan_count *plans;
    size_t n, cap;
    int err;
};

static int on_bounds_plan(void *ctx, const struct catalog_plan *plan)
{
    struct bounds_walk *w = ctx;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct plan_count *p = realloc(w->plans, cap * sizeof(*p));
        if (p == NULL)
            return w->err = -ENOMEM;
        w->plans = p;
        w->cap = cap;
    }
    struct plan_count *pc = &w->plans[w->n++];
    memset(pc, 0, sizeof(*pc));
    pc->id = plan->id;
    snprintf(pc->name, sizeof(pc->name), "%s", plan->name);
    return 0;
}

static struct plan_count *plan_of(struct bounds_walk *w, int64_t id)
{
    for (size_t i = 0; i < w->n; i++)   /* plans come in id order, limits in plan order: */
        if (w->plans[w->n - 1 - i].id == id)   /* ... a scan from the end is short */
            return &w->plans[w->n - 1 - i];
    return NULL;
}

static int on_bounds_limit(void *ctx, const struct catalog_limit *l)
{
    struct bounds_walk *w = ctx;
    struct plan_count *pc = plan_of(w, l->plan_id);
    if (pc == NULL || l->kind == CATALOG_LIMIT_WS_MESSAGES)
        return 0;
    if (l->route_method == NULL) {
        pc->plan_wide++;
        return 0;
    }
    if (pc->n == pc->cap) {
        size_t cap = pc->cap ? pc->cap * 2 : 8;
        struct tier_route_ref *r = realloc(pc->refs, cap * sizeof(*r));
        if (r == NULL)
            return w->err = -ENOMEM;
        pc->refs = r;
        pc->cap = cap;
    }
    struct tier_route_ref *ref = &pc->refs[pc->n];
    ref->method = strdup(l->route_method);
    ref->prefix = strdup(l->route_prefix);
    pc->n++;
    if (ref->method == NULL || ref->prefix == NULL)
        return w->err = -ENOMEM;
    return 0;
}

/* A user's own limits (limiter rules: every kind but ws-messages) counted on top of the
 * plan's worst case: more than a merged selection can meet, so never too few. */
struct own_walk {
    struct bounds_walk *plans;
    struct catalog *cat;
    char user[CATALOG_USER_ID_MAX + 1];
    int64_t plan_id;
    size_t n;
    char *err;
    size_t errlen;
};

static int check_own(struct own_walk *o)
{
    if (o->n == 0)
        return 0;
    struct plan_count *pc = plan_of(o->plans, o->plan_id);
    size_t worst = pc ? tier_worst_rules(pc->plan_wide, pc->refs, pc->n) : 0;
    if (worst + o->n <= LIMITER_MAX_RULES)
        return 0;
    snprintf(o->err, o->errlen,
             "user \"%s\": one request could meet up to %zu limits (%zu of the plan \"%s\" and %zu of the user's"
             " own), at most %d are supported", o->user, worst + o->n, worst, pc ? pc->name : "?", o->n,
             LIMITER_MAX_RULES);
    return CATALOG_INVALID;
}

static int on_own_limit(void *ctx, const struct catalog_limit *l)
{
    struct own_walk *o = ctx;
    if (l->kind == CATALOG_LIMIT_WS_MESSAGES)
        return 0;
    if (strcmp(o->user, l->user_id) != 0) {
        int r = check_own(o);
        if (r)
            return r;
        snprintf(o->user, sizeof(o->user), "%s", l->user_id);
        o->n = 0;
        if ((r = catalog_user_find(o->cat, l->user_id, &o->plan_id)) != 0)
            return r;
    }
    o->n++;
    return 0;
}

int tier_catalog_check_bounds(struct catalog *cat, char *err, size_t errlen)
{
    struct bounds_walk w = {0};
    err[0] = '\0';
    int r = catalog_plan_each(cat, on_bounds_plan, &w);
    if (r == 0)
        r = catalog_limit_each(cat, 0, on_bounds_limit, &w);
    if (r == 0 && w.err)
        r = w.err;
    if (r == 0) {
        struct own_walk o = {.plans = &w, .cat = cat, .err = err, .errlen = errlen};
        r = catalog_user_limit_each(cat, NULL, on_own_limit, &o);
        if (r == 0)
            r = check_own(&o);
    }
    if (r == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    else if (r && !err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    for (size_t i = 0; i < w.n; i++) {
        struct plan_count *pc = &w.plans[i];
        if (r == 0) {
            size_t worst = tier_worst_rules(pc->plan_wide, pc->refs, pc->n);
            if (worst > LIMITER_MAX_RULES) {
                snprintf(err, errlen,
                         "plan \"%s\": one request could meet %zu limits (%zu plan-wide and %zu on one route),"
                         " at most %d are supported",
                         pc->name, worst, pc->plan_wide, worst - pc->plan_wide, LIMITER_MAX_RULES);
                r = CATALOG_INVALID;
            }
        }
        for (size_t k = 0; k < pc->n; k++) {
            free((char *)pc->refs[k].method);
            free((char *)pc->refs[k].prefix);
        }
        free(pc->refs);
    }
    free(w.plans);
    return r;
}

/* ---- costs against limits ---- */

static bool methods_agree(const char *a, const char *b)
{
    return strcmp(a, "*") == 0 || strcmp(b, "*") == 0 || strcmp(a, b) == 0;
}

static bool starts_with_folded(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

bool tier_cost_meets_limit(const struct tier_cost_ref *cost, const struct tier_cost_ref *others, size_t n,
                           const char *limit_method, const char *limit_prefix)
{
    if (limit_method == NULL || limit_prefix == NULL)
        return true;
    if (!methods_agree(cost->method, limit_method))
        return false;
    if (starts_with_folded(cost->prefix, limit_prefix))
        return true;   /* the cost's route lies within the limit's */
    if (!starts_with_folded(limit_prefix, cost->prefix))
        return false;  /* disjoint */
    /* The limit's route lies within the cost's: a longer cost prefix that still covers the
     * whole limit route, for every method the limit takes, wins there instead. */
    size_t cost_len = strlen(cost->prefix), limit_len = strlen(limit_prefix);
    for (size_t i = 0; i < n; i++) {
        const struct tier_cost_ref *o = &others[i];
        size_t len = strlen(o->prefix);
        if (len > cost_len && len <= limit_len && starts_with_folded(limit_prefix, o->prefix) &&
            (strcmp(o->method, "*") == 0 || (strcmp(limit_method, "*") != 0 && strcmp(o->method, limit_method) == 0)))
            return false;
    }
    return true;
}

struct cost_entry {
    int64_t plan_id;
    struct tier_cost_ref ref;      /* strings owned */
};

struct cost_walk {
    struct catalog *cat;
    struct cost_entry *costs;      /* in plan id order */
    size_t n, cap;
    char *err;
    size_t errlen;
    const char *owner;             /* "plan \"free\"" or "user \"alice\"", for the message */
    char owner_buf[CATALOG_USER_ID_MAX + CATALOG_NAME_MAX + 32];
};

static int on_cost(void *ctx, const struct catalog_cost *cost)
{
    struct cost_walk *w = ctx;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct cost_entry *c = realloc(w->costs, cap * sizeof(*c));
        if (c == NULL)
            return -ENOMEM;
        w->costs = c;
        w->cap = cap;
    }
    struct cost_entry *e = &w->costs[w->n];
    e->plan_id = cost->plan_id;
    e->ref.cost = cost->cost;
    e->ref.method = strdup(cost->route_method);
    e->ref.prefix = strdup(cost->route_prefix);
    w->n++;
    return e->ref.method && e->ref.prefix ? 0 : -ENOMEM;
}

/* Checks one rate limit or quota (of a plan, or a user's own on plan_id) against the
 * plan's costs. */
static int check_limit_costs(struct cost_walk *w, int64_t plan_id, const struct catalog_limit *l)
{
    if (l->kind != CATALOG_LIMIT_RATE && l->kind != CATALOG_LIMIT_QUOTA)
        return 0;
    size_t start = 0;
    while (start < w->n && w->costs[start].plan_id != plan_id)
        start++;
    size_t end = start;
    while (end < w->n && w->costs[end].plan_id == plan_id)
        end++;
    struct tier_cost_ref refs[TIER_MAX_COSTS_PER_PLAN];
    size_t nrefs = 0;
    if (end - start > TIER_MAX_COSTS_PER_PLAN) {
        snprintf(w->err, w->errlen, "a plan has at most %d costs (plan id %lld has %zu)", TIER_MAX_COSTS_PER_PLAN,
                 (long long)plan_id, end - start);
        return CATALOG_INVALID;
    }
    for (size_t i = start; i < end; i++)
        refs[nrefs++] = w->costs[i].ref;
    int64_t admits = l->amount + (l->kind == CATALOG_LIMIT_RATE ? l->burst : 0);
    for (size_t i = start; i < end; i++) {
        const struct tier_cost_ref *c = &w->costs[i].ref;
        if (c->cost <= admits || !tier_cost_meets_limit(c, refs, nrefs, l->route_method, l->route_prefix))
            continue;
        char amount[64];
        if (l->kind == CATALOG_LIMIT_QUOTA)
            limit_quota_format(l->amount, l->period, amount, sizeof(amount));
        else
            limit_rate_format(l->amount, l->window_ms, amount, sizeof(amount));
        snprintf(w->err, w->errlen,
                 "cost %lld on \"%s %s\" is more than %s's limit %lld (%s %s, burst %lld%s%s%s%s) admits:"
                 " such a request could never pass", (long long)c->cost, c->method, c->prefix, w->owner,
                 (long long)l->id, catalog_limit_kind_name(l->kind), amount, (long long)l->burst,
                 l->route_method ? ", on " : "", l->route_method ? l->route_method : "",
                 l->route_method ? " " : "", l->route_prefix ? l->route_prefix : "");
        return CATALOG_INVALID;
    }
    return 0;
}

struct plan_name_find {
    int64_t id;
    char *buf;
    size_t len;
};

static int on_plan_name(void *ctx, const struct catalog_plan *plan)
{
    struct plan_name_find *f = ctx;
    if (plan->id == f->id)
        snprintf(f->buf, f->len, "plan \"%s\"", plan->name);
    return 0;
}

static int on_cost_plan_limit(void *ctx, const struct catalog_limit *l)
{
    struct cost_walk *w = ctx;
    int r = check_limit_costs(w, l->plan_id, l);
    if (r == CATALOG_INVALID) {
        /* say it again with the plan's name (a refusal is rare; a second walk is cheap) */
        snprintf(w->owner_buf, sizeof(w->owner_buf), "plan id %lld", (long long)l->plan_id);
        struct plan_name_find f = {l->plan_id, w->owner_buf, sizeof(w->owner_buf)};
        int r2 = catalog_plan_each(w->cat, on_plan_name, &f);
        if (r2)
            return r2;
        w->owner = w->owner_buf;
        r = check_limit_costs(w, l->plan_id, l);
    }
    return r;
}

static int on_cost_user_limit(void *ctx, const struct catalog_limit *l)
{
    struct cost_walk *w = ctx;
    int64_t plan_id = 0;
    int r = catalog_user_find(w->cat, l->user_id, &plan_id);
    if (r)
        return r;
    snprintf(w->owner_buf, sizeof(w->owner_buf), "user \"%s\"", l->user_id);
    w->owner = w->owner_buf;
    return check_limit_costs(w, plan_id, l);
}

int tier_catalog_check_costs(struct catalog *cat, char *err, size_t errlen)
{
    struct cost_walk w = {.cat = cat, .err = err, .errlen = errlen, .owner = "the plan"};
    err[0] = '\0';
    int r = catalog_cost_each(cat, 0, on_cost, &w);
    for (size_t i = 0, same = 0; r == 0 && i < w.n; i++) {
        same = i > 0 && w.costs[i].plan_id == w.costs[i - 1].plan_id ? same + 1 : 1;
        if (same > TIER_MAX_COSTS_PER_PLAN) {
            snprintf(err, errlen, "a plan has at most %d costs (plan id %lld has more)", TIER_MAX_COSTS_PER_PLAN,
                     (long long)w.costs[i].plan_id);
            r = CATALOG_INVALID;
        }
    }
    if (r == 0 && w.n > 0)
        r = catalog_limit_each(cat, 0, on_cost_plan_limit, &w);
    if (r == 0 && w.n > 0)
        r = catalog_user_limit_each(cat, NULL, on_cost_user_limit, &w);
    if (r == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    else if (r && !err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    for (size_t i = 0; i < w.n; i++) {
        free((char *)w.costs[i].ref.method);
        free((char *)w.costs[i].ref.prefix);
    }
    free(w.costs);
    return r;
}
