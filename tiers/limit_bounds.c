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

int tier_catalog_check_bounds(struct catalog *cat, char *err, size_t errlen)
{
    struct bounds_walk w = {0};
    int r = catalog_plan_each(cat, on_bounds_plan, &w);
    if (r == 0)
        r = catalog_limit_each(cat, 0, on_bounds_limit, &w);
    if (r == 0 && w.err)
        r = w.err;
    if (r == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    else if (r)
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
