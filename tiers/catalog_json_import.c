/* Importing the catalog from JSON: check the whole document first, then replace the
 * catalog in one go. See catalog_json.h for the format. */
#include "tiers/catalog_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/apikey.h"
#include "tiers/limit_bounds.h"

/* ---- import: check everything, then write ---- */

struct import_plan {
    struct catalog_plan plan;
};

struct import_limit {
    struct catalog_limit limit;
    char method[CATALOG_METHOD_MAX + 1];
    char *prefix;                      /* malloc'd */
};

struct import_cost {
    struct catalog_cost cost;
    char method[CATALOG_METHOD_MAX + 1];
    char *prefix;                      /* malloc'd */
};

struct import {
    struct import_plan *plans;
    size_t n_plans;
    struct import_limit *limits;       /* the plans' limits, then the users' */
    size_t n_limits;
    struct import_cost *costs;
    size_t n_costs;
    struct catalog_user *users;
    size_t n_users;
    struct catalog_key *keys;
    size_t n_keys;
    int64_t last_ids[3];               /* plans, limits, api_keys */
    char *err;
    size_t errlen;
    char where[96];                    /* "plans[1].limits[0]" */
    char msg[256];                     /* what a catalog_check_* said */
};

/* Says why the document was refused, in one line: control characters of the names and
 * values quoted in it (a field "a\nb") become '?'. */
__attribute__((format(printf, 2, 3)))
static int bad(struct import *im, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    if (im->where[0])
        snprintf(im->err, im->errlen, "%s: %s", im->where, msg);
    else
        snprintf(im->err, im->errlen, "%s", msg);
    return CATALOG_INVALID;
}

/* Fails on any member of o not in allowed (NULL-terminated). */
static int only_keys(struct import *im, json_t *o, const char *const *allowed)
{
    const char *name;
    json_t *value;
    json_object_foreach(o, name, value) {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], name) != 0)
            i++;
        if (!allowed[i])
            return bad(im, "unknown field \"%s\"", name);
    }
    return 0;
}

static int get_id(struct import *im, json_t *o, const char *name, int64_t *pv)
{
    json_t *v = json_object_get(o, name);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > CATALOG_ID_MAX)
        return bad(im, "\"%s\" must be an integer from 1 to 2^53 (%lld)", name, (long long)CATALOG_ID_MAX);
    *pv = json_integer_value(v);
    return 0;
}

/* Optional non-negative integer; def when absent. */
static int get_int(struct import *im, json_t *o, const char *name, bool required, int64_t def, int64_t *pv)
{
    json_t *v = json_object_get(o, name);
    if (!v && !required) {
        *pv = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return bad(im, "\"%s\" must be a non-negative integer", name);
    *pv = json_integer_value(v);
    return 0;
}

/* Optional string (def when absent; NULL def = required). JSON null gives NULL when
 * null_ok. */
static int get_str(struct import *im, json_t *o, const char *name, const char *def, bool null_ok,
                   const char **pv)
{
    json_t *v = json_object_get(o, name);
    if (!v && def) {
        *pv = def;
        return 0;
    }
    if (null_ok && json_is_null(v)) {
        *pv = NULL;
        return 0;
    }
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return bad(im, "\"%s\" must be a string", name);
    *pv = json_string_value(v);
    return 0;
}

static int check_catalog(struct import *im, int r)
{
    return r ? bad(im, "%s", im->msg) : 0;
}

static int parse_limit(struct import *im, json_t *o, int64_t plan_id, struct import_limit *il)
{
    static const char *const fields[] = {"id", "kind", "amount", "window_ms", "burst", "algorithm",
                                         "period", "route", NULL};
    struct catalog_limit *l = &il->limit;
    const char *kind, *algorithm, *route;
    int r;
    if (!json_is_object(o))
        return bad(im, "a limit is an object");
    if ((r = only_keys(im, o, fields)) || (r = get_id(im, o, "id", &l->id)) ||
        (r = get_str(im, o, "kind", NULL, false, &kind)))
        return r;
    if (catalog_limit_kind_parse(kind, &l->kind) != 0)
        return bad(im, "unknown kind \"%s\" (rate, concurrency, ws_messages, quota)", kind);
    l->plan_id = plan_id;
    l->algorithm = LIMIT_SLIDING_LOG;
    if ((r = get_int(im, o, "amount", true, 0, &l->amount)))
        return r;
    if (l->kind != CATALOG_LIMIT_QUOTA && json_object_get(o, "period"))
        return bad(im, "only a quota has a period");
    if (l->kind == CATALOG_LIMIT_QUOTA) {
        const char *period;
        int64_t one;
        char text[64];
        if (json_object_get(o, "window_ms") || json_object_get(o, "burst") || json_object_get(o, "algorithm"))
            return bad(im, "a quota has no window_ms, burst or algorithm");
        if ((r = get_str(im, o, "period", NULL, false, &period)))
            return r;
        snprintf(text, sizeof(text), "1/%s", period);
        if (limit_quota_parse(text, &one, &l->period) != 0)
            return bad(im, "unknown period \"%s\" (day, week, month)", period);
    } else if (l->kind == CATALOG_LIMIT_CONCURRENCY) {
        if (json_object_get(o, "window_ms") || json_object_get(o, "burst") || json_object_get(o, "algorithm"))
            return bad(im, "a concurrency limit has no window_ms, burst or algorithm");
    } else if ((r = get_int(im, o, "window_ms", true, 0, &l->window_ms))) {
        return r;
    }
    if (l->kind == CATALOG_LIMIT_RATE) {
        if ((r = get_int(im, o, "burst", false, 0, &l->burst)) ||
            (r = get_str(im, o, "algorithm", "sliding-log", false, &algorithm)))
            return r;
        if (limit_kind_parse(algorithm, &l->algorithm) != 0)
            return bad(im, "unknown algorithm \"%s\"", algorithm);
    } else if (l->kind == CATALOG_LIMIT_WS_MESSAGES && (json_object_get(o, "burst") || json_object_get(o, "algorithm"))) {
        return bad(im, "a ws_messages limit has no burst or algorithm");
    }
    if ((r = get_str(im, o, "route", "", true, &route)))
        return r;
    if (route && route[0]) {
        const char *space = strchr(route, ' ');
        size_t m = space ? (size_t)(space - route) : 0;
        if (!space || m == 0 || m >= sizeof(il->method))
            return bad(im, "a route is \"METHOD /prefix\"");
        memcpy(il->method, route, m);
        il->method[m] = '\0';
        if (!(il->prefix = strdup(space + 1)))
            return -ENOMEM;
        l->route_method = il->method;
        l->route_prefix = il->prefix;
    }
    r = check_catalog(im, catalog_check_limit(l, im->msg, sizeof(im->msg)));
    if (r == 0 && l->route_prefix && tier_route_prefix_check(l->route_prefix, im->msg, sizeof(im->msg)))
        r = bad(im, "%s", im->msg);
    return r;
}

static int find_plan(const struct import *im, const char *name, int64_t *pid)
{
    for (size_t i = 0; i < im->n_plans; i++) {
        if (strcmp(im->plans[i].plan.name, name) == 0) {
            *pid = im->plans[i].plan.id;
            return 0;
        }
    }
    return -1;
}

static int find_user(const struct import *im, const char *id)
{
    for (size_t lo = 0, hi = im->n_users; lo < hi;) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(id, im->users[mid].id);
        if (c == 0)
            return 0;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

static int cmp_user(const void *a, const void *b)
{
    return strcmp(((const struct catalog_user *)a)->id, ((const struct catalog_user *)b)->id);
}

static int cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_key_hash(const void *a, const void *b)
{
    return memcmp(((const struct catalog_key *)a)->hash, ((const struct catalog_key *)b)->hash,
                  CATALOG_HASH_LEN);
}

/* Sorts a copy of ids and fails on a repeated one. */
static int check_unique_ids(struct import *im, const char *what, int64_t *ids, size_t n)
{
    qsort(ids, n, sizeof(int64_t), cmp_int64);
    for (size_t i = 1; i < n; i++)
        if (ids[i] == ids[i - 1])
            return bad(im, "%s id %lld appears twice", what, (long long)ids[i]);
    return 0;
}

static int parse_doc(struct import *im, json_t *doc)
{
    static const char *const top[] = {"format", "version", "last_ids", "plans", "users", "api_keys", NULL};
    static const char *const plan_fields[] = {"id", "name", "shadow", "priority", "limits", "costs", NULL};
    static const char *const user_fields[] = {"id", "plan", "created", "limits", NULL};
    static const char *const cost_fields[] = {"route", "cost", NULL};
    static const char *const key_fields[] = {"id", "user", "label", "sha256", "created", "revoked", NULL};
    static const char *const seq_names[] = {"plans", "limits", "api_keys", NULL};
    int r;
    const char *format;
    if (!json_is_object(doc))
        return bad(im, "the catalog file holds one JSON object");
    if ((r = only_keys(im, doc, top)) || (r = get_str(im, doc, "format", NULL, false, &format)))
        return r;
    if (strcmp(format, CATALOG_JSON_FORMAT) != 0)
        return bad(im, "\"format\" is not \"%s\"", CATALOG_JSON_FORMAT);
    json_t *version = json_object_get(doc, "version");
    if (!json_is_integer(version) || json_integer_value(version) < 1 ||
        json_integer_value(version) > CATALOG_JSON_VERSION)
        return bad(im, "unsupported \"version\" (this tierctl reads version %d)", CATALOG_JSON_VERSION);
    json_t *plans = json_object_get(doc, "plans"), *users = json_object_get(doc, "users"),
           *keys = json_object_get(doc, "api_keys"), *last = json_object_get(doc, "last_ids");
    if (!json_is_array(plans) || (users && !json_is_array(users)) || (keys && !json_is_array(keys)))
        return bad(im, "\"plans\", \"users\" and \"api_keys\" are arrays");
    if (last) {
        snprintf(im->where, sizeof(im->where), "last_ids");
        if (!json_is_object(last))
            return bad(im, "an object");
        if ((r = only_keys(im, last, seq_names)))
            return r;
        for (int i = 0; i < 3; i++) {
            if ((r = get_int(im, last, seq_names[i], false, 0, &im->last_ids[i])))
                return r;
            if (im->last_ids[i] > CATALOG_ID_MAX)
                return bad(im, "\"%s\" must be at most 2^53 (%lld)", seq_names[i], (long long)CATALOG_ID_MAX);
        }
        im->where[0] = '\0';
    }

    /* Plans and their limits. */
    size_t n_limits = 0, n_costs = 0, i, j;
    json_t *o, *lo;
    json_array_foreach(plans, i, o) {
        json_t *limits = json_is_object(o) ? json_object_get(o, "limits") : NULL;
        json_t *costs = json_is_object(o) ? json_object_get(o, "costs") : NULL;
        n_limits += json_is_array(limits) ? json_array_size(limits) : 0;
        n_costs += json_is_array(costs) ? json_array_size(costs) : 0;
    }
    json_array_foreach(users, i, o) {
        json_t *limits = json_is_object(o) ? json_object_get(o, "limits") : NULL;
        n_limits += json_is_array(limits) ? json_array_size(limits) : 0;
    }
    im->plans = calloc(json_array_size(plans) + 1, sizeof(*im->plans));
    im->limits = calloc(n_limits + 1, sizeof(*im->limits));
    im->costs = calloc(n_costs + 1, sizeof(*im->costs));
    int64_t *ids = calloc(n_limits + json_array_size(plans) + json_array_size(keys) + 1, sizeof(int64_t));
    if (!im->plans || !im->limits || !im->costs || !ids) {
        free(ids);
        return -ENOMEM;
    }
    json_array_foreach(plans, i, o) {
        snprintf(im->where, sizeof(im->where), "plans[%zu]", i);
        struct catalog_plan *p = &im->plans[i].plan;
        json_t *shadow = json_object_get(o, "shadow"), *limits = json_object_get(o, "limits");
        if (!json_is_object(o)) {
            r = bad(im, "a plan is an object");
            goto out;
        }
        if ((r = only_keys(im, o, plan_fields)) || (r = get_id(im, o, "id", &p->id)) ||
            (r = get_str(im, o, "name", NULL, false, &p->name)) ||
            (r = check_catalog(im, catalog_check_plan_name(p->name, im->msg, sizeof(im->msg)))))
            goto out;
        if (shadow && !json_is_boolean(shadow)) {
            r = bad(im, "\"shadow\" is true or false");
            goto out;
        }
        p->shadow = json_is_true(shadow);
        int64_t priority;
        if ((r = get_int(im, o, "priority", false, CATALOG_PRIORITY_DEFAULT, &priority)))
            goto out;
        if (priority > CATALOG_PRIORITY_MAX) {
            r = bad(im, "\"priority\" is %d to %d", CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
            goto out;
        }
        p->priority = (int)priority;
        int64_t other;
        if (find_plan(im, p->name, &other) == 0) {
            r = bad(im, "a plan named \"%s\" appears twice", p->name);
            goto out;
        }
        im->n_plans++;
        ids[i] = p->id;
        if (limits && !json_is_array(limits)) {
            r = bad(im, "\"limits\" is an array");
            goto out;
        }
        json_array_foreach(limits, j, lo) {
            snprintf(im->where, sizeof(im->where), "plans[%zu].limits[%zu]", i, j);
            r = parse_limit(im, lo, p->id, &im->limits[im->n_limits]);
            im->n_limits++;   /* counted even on failure, so its prefix is freed */
            if (r)
                goto out;
        }
        json_t *costs = json_object_get(o, "costs");
        if (costs && !json_is_array(costs)) {
            r = bad(im, "\"costs\" is an array");
            goto out;
        }
        json_array_foreach(costs, j, lo) {
            snprintf(im->where, sizeof(im->where), "plans[%zu].costs[%zu]", i, j);
            struct import_cost *ic = &im->costs[im->n_costs++];
            const char *route;
            if (!json_is_object(lo)) {
                r = bad(im, "a cost is an object");
                goto out;
            }
            if ((r = only_keys(im, lo, cost_fields)) || (r = get_str(im, lo, "route", NULL, false, &route)) ||
                (r = get_int(im, lo, "cost", true, 0, &ic->cost.cost)))
                goto out;
            const char *space = strchr(route, ' ');
            size_t m = space ? (size_t)(space - route) : 0;
            if (!space || m == 0 || m >= sizeof(ic->method)) {
                r = bad(im, "a route is \"METHOD /prefix\"");
                goto out;
            }
            memcpy(ic->method, route, m);
            ic->method[m] = '\0';
            if (!(ic->prefix = strdup(space + 1))) {
                r = -ENOMEM;
                goto out;
            }
            ic->cost.plan_id = p->id;
            ic->cost.route_method = ic->method;
            ic->cost.route_prefix = ic->prefix;
            if ((r = check_catalog(im, catalog_check_cost(&ic->cost, im->msg, sizeof(im->msg)))))
                goto out;
        }
    }
    im->where[0] = '\0';
    if ((r = check_unique_ids(im, "plan", ids, im->n_plans)))
        goto out;

    /* Users. */
    im->users = calloc(json_array_size(users) + 1, sizeof(*im->users));
    if (!im->users) {
        r = -ENOMEM;
        goto out;
    }
    json_array_foreach(users, i, o) {
        snprintf(im->where, sizeof(im->where), "users[%zu]", i);
        struct catalog_user *u = &im->users[i];
        const char *plan;
        if (!json_is_object(o)) {
            r = bad(im, "a user is an object");
            goto out;
        }
        if ((r = only_keys(im, o, user_fields)) || (r = get_str(im, o, "id", NULL, false, &u->id)) ||
            (r = check_catalog(im, catalog_check_user_id(u->id, im->msg, sizeof(im->msg)))) ||
            (r = get_str(im, o, "plan", NULL, false, &plan)) ||
            (r = get_str(im, o, "created", NULL, false, &u->created)) ||
            (r = check_catalog(im, catalog_check_time(u->created, im->msg, sizeof(im->msg)))))
            goto out;
        if (find_plan(im, plan, &u->plan_id) != 0) {
            r = bad(im, "no plan named \"%s\"", plan);
            goto out;
        }
        u->plan_name = plan;
        im->n_users++;
        json_t *limits = json_object_get(o, "limits");
        if (limits && !json_is_array(limits)) {
            r = bad(im, "\"limits\" is an array");
            goto out;
        }
        json_array_foreach(limits, j, lo) {
            snprintf(im->where, sizeof(im->where), "users[%zu].limits[%zu]", i, j);
            struct import_limit *il = &im->limits[im->n_limits++];
            r = parse_limit(im, lo, 0, il);
            il->limit.user_id = u->id;
            if (r)
                goto out;
        }
    }
    im->where[0] = '\0';
    for (i = 0; i < im->n_limits; i++)
        ids[i] = im->limits[i].limit.id;
    if ((r = check_unique_ids(im, "limit", ids, im->n_limits)))
        goto out;
    qsort(im->users, im->n_users, sizeof(*im->users), cmp_user);
    for (i = 1; i < im->n_users; i++) {
        if (strcmp(im->users[i].id, im->users[i - 1].id) == 0) {
            r = bad(im, "user \"%s\" appears twice", im->users[i].id);
            goto out;
        }
    }

    /* Keys. */
    im->keys = calloc(json_array_size(keys) + 1, sizeof(*im->keys));
    if (!im->keys) {
        r = -ENOMEM;
        goto out;
    }
    json_array_foreach(keys, i, o) {
        snprintf(im->where, sizeof(im->where), "api_keys[%zu]", i);
        struct catalog_key *k = &im->keys[i];
        const char *hex;
        if (!json_is_object(o)) {
            r = bad(im, "a key is an object");
            goto out;
        }
        if ((r = only_keys(im, o, key_fields)) || (r = get_id(im, o, "id", &k->id)) ||
            (r = get_str(im, o, "user", NULL, false, &k->user_id)) ||
            (r = check_catalog(im, catalog_check_user_id(k->user_id, im->msg, sizeof(im->msg)))) ||
            (r = get_str(im, o, "label", "", false, &k->label)) ||
            (r = check_catalog(im, catalog_check_label(k->label, im->msg, sizeof(im->msg)))) ||
            (r = get_str(im, o, "sha256", NULL, false, &hex)) ||
            (r = get_str(im, o, "created", NULL, false, &k->created)) ||
            (r = check_catalog(im, catalog_check_time(k->created, im->msg, sizeof(im->msg)))))
            goto out;
        json_t *revoked = json_object_get(o, "revoked");
        if (revoked && !json_is_null(revoked)) {
            if ((r = get_str(im, o, "revoked", NULL, false, &k->revoked)) ||
                (r = check_catalog(im, catalog_check_time(k->revoked, im->msg, sizeof(im->msg)))))
                goto out;
        }
        if (apikey_hash_from_hex(hex, k->hash) != 0) {
            r = bad(im, "\"sha256\" is 64 hex digits");
            goto out;
        }
        if (!k->revoked && find_user(im, k->user_id) != 0) {
            r = bad(im, "an active key of user \"%s\", who is not in \"users\"", k->user_id);
            goto out;
        }
        im->n_keys++;
        ids[i] = k->id;
    }
    im->where[0] = '\0';
    if ((r = check_unique_ids(im, "key", ids, im->n_keys)))
        goto out;
    /* Sort a copy by hash to find duplicates: the table keeps id order for inserting. */
    if (im->n_keys > 1) {
        struct catalog_key *sorted = malloc(im->n_keys * sizeof(*sorted));
        if (!sorted) {
            r = -ENOMEM;
            goto out;
        }
        memcpy(sorted, im->keys, im->n_keys * sizeof(*sorted));
        qsort(sorted, im->n_keys, sizeof(*sorted), cmp_key_hash);
        for (i = 1; i < im->n_keys && r == 0; i++)
            if (memcmp(sorted[i].hash, sorted[i - 1].hash, CATALOG_HASH_LEN) == 0)
                r = bad(im, "keys %lld and %lld have the same hash", (long long)sorted[i - 1].id,
                        (long long)sorted[i].id);
        free(sorted);
    }
out:
    free(ids);
    return r;
}

static void import_free(struct import *im)
{
    for (size_t i = 0; i < im->n_limits; i++)
        free(im->limits[i].prefix);
    for (size_t i = 0; i < im->n_costs; i++)
        free(im->costs[i].prefix);
    free(im->costs);
    free(im->plans);
    free(im->limits);
    free(im->users);
    free(im->keys);
}

int catalog_json_import(struct catalog *cat, json_t *doc, char *err, size_t errlen)
{
    struct import im = {.err = err, .errlen = errlen};
    err[0] = '\0';
    int r = parse_doc(&im, doc);
    if (r) {
        if (r == -ENOMEM)
            snprintf(err, errlen, "out of memory");
        goto out;
    }
    /* Everything checked: now replace the catalog. */
    r = catalog_clear(cat);
    for (size_t i = 0; r == 0 && i < im.n_plans; i++)
        r = catalog_plan_add(cat, &im.plans[i].plan, NULL);
    for (size_t i = 0; r == 0 && i < im.n_limits; i++)
        if (!im.limits[i].limit.user_id)
            r = catalog_limit_add(cat, &im.limits[i].limit, NULL);
    for (size_t i = 0; r == 0 && i < im.n_costs; i++)
        r = catalog_cost_set(cat, &im.costs[i].cost, NULL);
    for (size_t i = 0; r == 0 && i < im.n_users; i++)
        r = catalog_user_add(cat, &im.users[i]);
    for (size_t i = 0; r == 0 && i < im.n_limits; i++)   /* the users' own, once the users are in */
        if (im.limits[i].limit.user_id)
            r = catalog_limit_add(cat, &im.limits[i].limit, NULL);
    for (size_t i = 0; r == 0 && i < im.n_keys; i++)
        r = catalog_key_add(cat, &im.keys[i], NULL);
    static const char *const tables[] = {"plans", "limits", "api_keys"};
    for (int i = 0; r == 0 && i < 3; i++)
        r = catalog_sequence_raise(cat, tables[i], im.last_ids[i]);
    if (r)
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
out:
    import_free(&im);
    return r;
}
