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

/* Splits "METHOD /prefix": the method into method (methodsize bytes with its NUL), the
 * prefix into *pprefix, malloc'd for the caller to free. */
static int parse_route(struct import *im, const char *route, char *method, size_t methodsize, char **pprefix)
{
    const char *space = strchr(route, ' ');
    size_t m = space ? (size_t)(space - route) : 0;
    if (!space || m == 0 || m >= methodsize)
        return bad(im, "a route is \"METHOD /prefix\"");
    memcpy(method, route, m);
    method[m] = '\0';
    if (!(*pprefix = strdup(space + 1)))
        return -ENOMEM;
    return 0;
}

/* A quota counts per period and has no window, burst or algorithm. */
static int parse_quota_period(struct import *im, json_t *o, struct catalog_limit *l)
{
    const char *period;
    int64_t one;
    char text[64];
    int r;
    if (json_object_get(o, "window_ms") || json_object_get(o, "burst") || json_object_get(o, "algorithm"))
        return bad(im, "a quota has no window_ms, burst or algorithm");
    if ((r = get_str(im, o, "period", NULL, false, &period)))
        return r;
    snprintf(text, sizeof(text), "1/%s", period);
    if (limit_quota_parse(text, &one, &l->period) != 0)
        return bad(im, "unknown period \"%s\" (day, week, month)", period);
    return 0;
}

/* The members that depend on the limit's kind: a quota's period; the window of the
 * others but concurrency; a rate's burst and algorithm. */
static int parse_limit_by_kind(struct import *im, json_t *o, struct catalog_limit *l)
{
    const char *algorithm;
    int r;
    if (l->kind != CATALOG_LIMIT_QUOTA && json_object_get(o, "period"))
        return bad(im, "only a quota has a period");
    if (l->kind == CATALOG_LIMIT_QUOTA)
        return parse_quota_period(im, o, l);
    if (l->kind == CATALOG_LIMIT_CONCURRENCY) {
        if (json_object_get(o, "window_ms") || json_object_get(o, "burst") || json_object_get(o, "algorithm"))
            return bad(im, "a concurrency limit has no window_ms, burst or algorithm");
        return 0;
    }
    if ((r = get_int(im, o, "window_ms", true, 0, &l->window_ms)))
        return r;
    if (l->kind == CATALOG_LIMIT_RATE) {
        if ((r = get_int(im, o, "burst", false, 0, &l->burst)) ||
            (r = get_str(im, o, "algorithm", "sliding-log", false, &algorithm)))
            return r;
        if (limit_kind_parse(algorithm, &l->algorithm) != 0)
            return bad(im, "unknown algorithm \"%s\"", algorithm);
    } else if (l->kind == CATALOG_LIMIT_WS_MESSAGES && (json_object_get(o, "burst") || json_object_get(o, "algorithm"))) {
        return bad(im, "a ws_messages limit has no burst or algorithm");
    }
    return 0;
}

static int parse_limit(struct import *im, json_t *o, int64_t plan_id, struct import_limit *il)
{
    static const char *const fields[] = {"id", "kind", "amount", "window_ms", "burst", "algorithm",
                                         "period", "route", NULL};
    struct catalog_limit *l = &il->limit;
    const char *kind, *route;
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
    if ((r = get_int(im, o, "amount", true, 0, &l->amount)) || (r = parse_limit_by_kind(im, o, l)) ||
        (r = get_str(im, o, "route", "", true, &route)))
        return r;
    if (route && route[0]) {
        if ((r = parse_route(im, route, il->method, sizeof(il->method), &il->prefix)))
            return r;
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

/* "last_ids": the sequences' high-water marks, none past the largest id. */
static int parse_last_ids(struct import *im, json_t *last)
{
    static const char *const seq_names[] = {"plans", "limits", "api_keys", NULL};
    int r;
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
    return 0;
}

struct doc_arrays {
    json_t *plans, *users, *keys;      /* users and keys NULL when absent */
};

/* The top level: format, version and last_ids checked, the three arrays found. */
static int parse_top(struct import *im, json_t *doc, struct doc_arrays *a)
{
    static const char *const top[] = {"format", "version", "last_ids", "plans", "users", "api_keys", NULL};
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
    a->plans = json_object_get(doc, "plans");
    a->users = json_object_get(doc, "users");
    a->keys = json_object_get(doc, "api_keys");
    if (!json_is_array(a->plans) || (a->users && !json_is_array(a->users)) || (a->keys && !json_is_array(a->keys)))
        return bad(im, "\"plans\", \"users\" and \"api_keys\" are arrays");
    json_t *last = json_object_get(doc, "last_ids");
    return last ? parse_last_ids(im, last) : 0;
}

/* Room for every plan, limit and cost the document holds, and *pids (the caller frees
 * it) for the ids of plans, then limits, then keys, while each is checked for repeats. */
static int import_alloc(struct import *im, const struct doc_arrays *a, int64_t **pids)
{
    size_t n_limits = 0, n_costs = 0, i;
    json_t *o;
    json_array_foreach(a->plans, i, o) {
        json_t *limits = json_is_object(o) ? json_object_get(o, "limits") : NULL;
        json_t *costs = json_is_object(o) ? json_object_get(o, "costs") : NULL;
        n_limits += json_is_array(limits) ? json_array_size(limits) : 0;
        n_costs += json_is_array(costs) ? json_array_size(costs) : 0;
    }
    json_array_foreach(a->users, i, o) {
        json_t *limits = json_is_object(o) ? json_object_get(o, "limits") : NULL;
        n_limits += json_is_array(limits) ? json_array_size(limits) : 0;
    }
    im->plans = calloc(json_array_size(a->plans) + 1, sizeof(*im->plans));
    im->limits = calloc(n_limits + 1, sizeof(*im->limits));
    im->costs = calloc(n_costs + 1, sizeof(*im->costs));
    *pids = calloc(n_limits + json_array_size(a->plans) + json_array_size(a->keys) + 1, sizeof(int64_t));
    if (!im->plans || !im->limits || !im->costs || !*pids)
        return -ENOMEM;
    return 0;
}

/* A plan's own fields; its name must not repeat one of the plans before it. */
static int parse_plan_fields(struct import *im, json_t *o, struct catalog_plan *p)
{
    static const char *const plan_fields[] = {"id", "name", "shadow", "priority", "limits", "costs", NULL};
    json_t *shadow = json_object_get(o, "shadow");
    int64_t priority, other;
    int r;
    if (!json_is_object(o))
        return bad(im, "a plan is an object");
    if ((r = only_keys(im, o, plan_fields)) || (r = get_id(im, o, "id", &p->id)) ||
        (r = get_str(im, o, "name", NULL, false, &p->name)) ||
        (r = check_catalog(im, catalog_check_plan_name(p->name, im->msg, sizeof(im->msg)))))
        return r;
    if (shadow && !json_is_boolean(shadow))
        return bad(im, "\"shadow\" is true or false");
    p->shadow = json_is_true(shadow);
    if ((r = get_int(im, o, "priority", false, CATALOG_PRIORITY_DEFAULT, &priority)))
        return r;
    if (priority > CATALOG_PRIORITY_MAX)
        return bad(im, "\"priority\" is %d to %d", CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
    p->priority = (int)priority;
    if (find_plan(im, p->name, &other) == 0)
        return bad(im, "a plan named \"%s\" appears twice", p->name);
    return 0;
}

static int parse_plan_limits(struct import *im, json_t *limits, size_t i, int64_t plan_id)
{
    size_t j;
    json_t *o;
    int r;
    if (limits && !json_is_array(limits))
        return bad(im, "\"limits\" is an array");
    json_array_foreach(limits, j, o) {
        snprintf(im->where, sizeof(im->where), "plans[%zu].limits[%zu]", i, j);
        r = parse_limit(im, o, plan_id, &im->limits[im->n_limits]);
        im->n_limits++;   /* counted even on failure, so its prefix is freed */
        if (r)
            return r;
    }
    return 0;
}

static int parse_cost(struct import *im, json_t *o, int64_t plan_id, struct import_cost *ic)
{
    static const char *const cost_fields[] = {"route", "cost", NULL};
    const char *route;
    int r;
    if (!json_is_object(o))
        return bad(im, "a cost is an object");
    if ((r = only_keys(im, o, cost_fields)) || (r = get_str(im, o, "route", NULL, false, &route)) ||
        (r = get_int(im, o, "cost", true, 0, &ic->cost.cost)) ||
        (r = parse_route(im, route, ic->method, sizeof(ic->method), &ic->prefix)))
        return r;
    ic->cost.plan_id = plan_id;
    ic->cost.route_method = ic->method;
    ic->cost.route_prefix = ic->prefix;
    return check_catalog(im, catalog_check_cost(&ic->cost, im->msg, sizeof(im->msg)));
}

/* im->where still names the plan's last limit, if it has any: a bad "costs" is reported there. */
static int parse_plan_costs(struct import *im, json_t *costs, size_t i, int64_t plan_id)
{
    size_t j;
    json_t *o;
    int r;
    if (costs && !json_is_array(costs))
        return bad(im, "\"costs\" is an array");
    json_array_foreach(costs, j, o) {
        snprintf(im->where, sizeof(im->where), "plans[%zu].costs[%zu]", i, j);
        /* counted even on failure, so its prefix is freed */
        if ((r = parse_cost(im, o, plan_id, &im->costs[im->n_costs++])))
            return r;
    }
    return 0;
}

/* Every plan with its limits and costs; then no plan id twice. */
static int parse_plans(struct import *im, json_t *plans, int64_t *ids)
{
    size_t i;
    json_t *o;
    int r;
    json_array_foreach(plans, i, o) {
        struct catalog_plan *p = &im->plans[i].plan;
        snprintf(im->where, sizeof(im->where), "plans[%zu]", i);
        if ((r = parse_plan_fields(im, o, p)))
            return r;
        im->n_plans++;
        ids[i] = p->id;
        if ((r = parse_plan_limits(im, json_object_get(o, "limits"), i, p->id)) ||
            (r = parse_plan_costs(im, json_object_get(o, "costs"), i, p->id)))
            return r;
    }
    im->where[0] = '\0';
    return check_unique_ids(im, "plan", ids, im->n_plans);
}

/* A user's own fields; its plan must be one of the document's. */
static int parse_user_fields(struct import *im, json_t *o, struct catalog_user *u)
{
    static const char *const user_fields[] = {"id", "plan", "created", "limits", NULL};
    const char *plan;
    int r;
    if (!json_is_object(o))
        return bad(im, "a user is an object");
    if ((r = only_keys(im, o, user_fields)) || (r = get_str(im, o, "id", NULL, false, &u->id)) ||
        (r = check_catalog(im, catalog_check_user_id(u->id, im->msg, sizeof(im->msg)))) ||
        (r = get_str(im, o, "plan", NULL, false, &plan)) ||
        (r = get_str(im, o, "created", NULL, false, &u->created)) ||
        (r = check_catalog(im, catalog_check_time(u->created, im->msg, sizeof(im->msg)))))
        return r;
    if (find_plan(im, plan, &u->plan_id) != 0)
        return bad(im, "no plan named \"%s\"", plan);
    u->plan_name = plan;
    return 0;
}

/* users[i]: the user, then its own limits. */
static int parse_user(struct import *im, json_t *o, size_t i)
{
    struct catalog_user *u = &im->users[i];
    size_t j;
    json_t *lo;
    int r;
    snprintf(im->where, sizeof(im->where), "users[%zu]", i);
    if ((r = parse_user_fields(im, o, u)))
        return r;
    im->n_users++;
    json_t *limits = json_object_get(o, "limits");
    if (limits && !json_is_array(limits))
        return bad(im, "\"limits\" is an array");
    json_array_foreach(limits, j, lo) {
        snprintf(im->where, sizeof(im->where), "users[%zu].limits[%zu]", i, j);
        struct import_limit *il = &im->limits[im->n_limits++];
        r = parse_limit(im, lo, 0, il);
        il->limit.user_id = u->id;
        if (r)
            return r;
    }
    return 0;
}

/* Sorts the users by id (find_user searches them so) and fails on a repeated one. */
static int check_unique_users(struct import *im)
{
    qsort(im->users, im->n_users, sizeof(*im->users), cmp_user);
    for (size_t i = 1; i < im->n_users; i++)
        if (strcmp(im->users[i].id, im->users[i - 1].id) == 0)
            return bad(im, "user \"%s\" appears twice", im->users[i].id);
    return 0;
}

/* Every user with its limits; then, all limits being in, no limit id twice and no user
 * twice. */
static int parse_users(struct import *im, json_t *users, int64_t *ids)
{
    size_t i;
    json_t *o;
    int r;
    im->users = calloc(json_array_size(users) + 1, sizeof(*im->users));
    if (!im->users)
        return -ENOMEM;
    json_array_foreach(users, i, o) {
        if ((r = parse_user(im, o, i)))
            return r;
    }
    im->where[0] = '\0';
    for (i = 0; i < im->n_limits; i++)
        ids[i] = im->limits[i].limit.id;
    if ((r = check_unique_ids(im, "limit", ids, im->n_limits)))
        return r;
    return check_unique_users(im);
}

/* A key; an active one must belong to a user of the document (the users are sorted). */
static int parse_key(struct import *im, json_t *o, struct catalog_key *k)
{
    static const char *const key_fields[] = {"id", "user", "label", "sha256", "created", "revoked", NULL};
    const char *hex;
    int r;
    if (!json_is_object(o))
        return bad(im, "a key is an object");
    if ((r = only_keys(im, o, key_fields)) || (r = get_id(im, o, "id", &k->id)) ||
        (r = get_str(im, o, "user", NULL, false, &k->user_id)) ||
        (r = check_catalog(im, catalog_check_user_id(k->user_id, im->msg, sizeof(im->msg)))) ||
        (r = get_str(im, o, "label", "", false, &k->label)) ||
        (r = check_catalog(im, catalog_check_label(k->label, im->msg, sizeof(im->msg)))) ||
        (r = get_str(im, o, "sha256", NULL, false, &hex)) ||
        (r = get_str(im, o, "created", NULL, false, &k->created)) ||
        (r = check_catalog(im, catalog_check_time(k->created, im->msg, sizeof(im->msg)))))
        return r;
    json_t *revoked = json_object_get(o, "revoked");
    if (revoked && !json_is_null(revoked)) {
        if ((r = get_str(im, o, "revoked", NULL, false, &k->revoked)) ||
            (r = check_catalog(im, catalog_check_time(k->revoked, im->msg, sizeof(im->msg)))))
            return r;
    }
    if (apikey_hash_from_hex(hex, k->hash) != 0)
        return bad(im, "\"sha256\" is 64 hex digits");
    if (!k->revoked && find_user(im, k->user_id) != 0)
        return bad(im, "an active key of user \"%s\", who is not in \"users\"", k->user_id);
    return 0;
}

/* Sorts a copy by hash to find duplicates: the table keeps id order for inserting. */
static int check_unique_hashes(struct import *im)
{
    if (im->n_keys < 2)
        return 0;
    struct catalog_key *sorted = malloc(im->n_keys * sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    memcpy(sorted, im->keys, im->n_keys * sizeof(*sorted));
    qsort(sorted, im->n_keys, sizeof(*sorted), cmp_key_hash);
    int r = 0;
    for (size_t i = 1; i < im->n_keys && r == 0; i++)
        if (memcmp(sorted[i].hash, sorted[i - 1].hash, CATALOG_HASH_LEN) == 0)
            r = bad(im, "keys %lld and %lld have the same hash", (long long)sorted[i - 1].id,
                    (long long)sorted[i].id);
    free(sorted);
    return r;
}

/* Every key; then no key id and no hash twice. */
static int parse_keys(struct import *im, json_t *keys, int64_t *ids)
{
    size_t i;
    json_t *o;
    int r;
    im->keys = calloc(json_array_size(keys) + 1, sizeof(*im->keys));
    if (!im->keys)
        return -ENOMEM;
    json_array_foreach(keys, i, o) {
        snprintf(im->where, sizeof(im->where), "api_keys[%zu]", i);
        if ((r = parse_key(im, o, &im->keys[i])))
            return r;
        im->n_keys++;
        ids[i] = im->keys[i].id;
    }
    im->where[0] = '\0';
    if ((r = check_unique_ids(im, "key", ids, im->n_keys)))
        return r;
    return check_unique_hashes(im);
}

/* Checks the whole document into im, in the order the catalog is written: plans (with
 * their limits and costs), users (with theirs), keys. On failure im->err says why and
 * what im holds so far is for import_free. */
static int parse_doc(struct import *im, json_t *doc)
{
    struct doc_arrays a = {0};
    int64_t *ids = NULL;
    int r = parse_top(im, doc, &a);
    if (r)
        goto out;
    r = import_alloc(im, &a, &ids);
    if (r)
        goto out;
    r = parse_plans(im, a.plans, ids);
    if (r)
        goto out;
    r = parse_users(im, a.users, ids);
    if (r)
        goto out;
    r = parse_keys(im, a.keys, ids);
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
