/* The catalog as JSON. See catalog_json.h for the format. */
#include "tiers/catalog_json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog/utf8.h"
#include "tiers/apikey.h"
#include "tiers/limit_bounds.h"

/* ---- records ---- */

json_t *catalog_json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j)
        return j;
    char *copy = strdup(s);
    if (!copy)
        return NULL;
    utf8_repair(copy, strlen(copy));
    j = json_string(copy);
    free(copy);
    return j;
}

/* "METHOD /prefix" */
static json_t *route_text(const char *method, const char *prefix)
{
    char route[CATALOG_METHOD_MAX + CATALOG_PREFIX_MAX + 2];
    snprintf(route, sizeof(route), "%s %s", method, prefix);
    return catalog_json_text(route);
}

json_t *catalog_json_limit(const struct catalog_limit *limit)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "id", json_integer(limit->id));
    bad |= json_object_set_new(o, "kind", json_string(catalog_limit_kind_name(limit->kind)));
    bad |= json_object_set_new(o, "amount", json_integer(limit->amount));
    if (limit->kind == CATALOG_LIMIT_QUOTA)
        bad |= json_object_set_new(o, "period", json_string(limit_period_name(limit->period)));
    else if (limit->kind != CATALOG_LIMIT_CONCURRENCY)
        bad |= json_object_set_new(o, "window_ms", json_integer(limit->window_ms));
    if (limit->kind == CATALOG_LIMIT_RATE) {
        bad |= json_object_set_new(o, "burst", json_integer(limit->burst));
        bad |= json_object_set_new(o, "algorithm", json_string(limit_kind_name(limit->algorithm)));
    }
    if (limit->route_method)
        bad |= json_object_set_new(o, "route", route_text(limit->route_method, limit->route_prefix));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *catalog_json_cost(const struct catalog_cost *cost)
{
    return json_pack("{s:o, s:I}", "route", route_text(cost->route_method, cost->route_prefix), "cost",
                     (json_int_t)cost->cost);
}

json_t *catalog_json_user(const struct catalog_user *user)
{
    return json_pack("{s:o, s:o?, s:o?}", "id", catalog_json_text(user->id), "plan",
                     user->plan_name ? catalog_json_text(user->plan_name) : NULL, "created",
                     user->created ? catalog_json_text(user->created) : NULL);
}

json_t *catalog_json_key(const struct catalog_key *key, int with_hash)
{
    char hex[APIKEY_HASH_HEX_LEN + 1];
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "id", json_integer(key->id));
    bad |= json_object_set_new(o, "user", catalog_json_text(key->user_id));
    bad |= json_object_set_new(o, "label", catalog_json_text(key->label ? key->label : ""));
    if (with_hash)
        bad |= json_object_set_new(o, "sha256", json_string(apikey_hash_to_hex(key->hash, hex)));
    bad |= json_object_set_new(o, "created", key->created ? catalog_json_text(key->created) : json_null());
    bad |= json_object_set_new(o, "revoked", key->revoked ? catalog_json_text(key->revoked) : json_null());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- export ---- */

struct export_ctx {
    json_t *array;
    struct catalog_json_repairs *repairs;
};

/* Counts a name or label that is written repaired (catalog_json_text); the first is named
 * by fmt. */
__attribute__((format(printf, 3, 4)))
static void check_text(struct export_ctx *x, const char *text, const char *fmt, ...)
{
    if (!text || utf8_valid(text, strlen(text)) || x->repairs->count++ > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->repairs->first, sizeof(x->repairs->first), fmt, ap);
    va_end(ap);
}

static int export_plan(void *ctx, const struct catalog_plan *plan)
{
    struct export_ctx *x = ctx;
    check_text(x, plan->name, "plan %lld's name", (long long)plan->id);
    json_t *o = json_pack("{s:I, s:o, s:b, s:i, s:[], s:[]}", "id", (json_int_t)plan->id, "name",
                          catalog_json_text(plan->name), "shadow", plan->shadow, "priority", plan->priority,
                          "limits", "costs");
    if (!o || json_array_append_new(x->array, o) != 0)
        return -ENOMEM;
    return 0;
}

static int export_limit(void *ctx, const struct catalog_limit *limit)
{
    struct export_ctx *x = ctx;
    json_t *o = catalog_json_limit(limit);
    if (!o || json_array_append_new(x->array, o) != 0)
        return -ENOMEM;
    return 0;
}

static int export_cost(void *ctx, const struct catalog_cost *cost)
{
    struct export_ctx *x = ctx;
    json_t *o = catalog_json_cost(cost);
    if (!o || json_array_append_new(x->array, o) != 0)
        return -ENOMEM;
    return 0;
}

static int export_user(void *ctx, const struct catalog_user *user)
{
    struct export_ctx *x = ctx;
    check_text(x, user->id, "a user's id");
    json_t *o = catalog_json_user(user);
    if (!o || json_object_set_new(o, "limits", json_array()) != 0 || json_array_append_new(x->array, o) != 0)
        return -ENOMEM;
    return 0;
}

static int export_key(void *ctx, const struct catalog_key *key)
{
    struct export_ctx *x = ctx;
    check_text(x, key->label, "key %lld's label", (long long)key->id);
    check_text(x, key->user_id, "key %lld's user", (long long)key->id);
    json_t *o = catalog_json_key(key, 1);
    if (!o || json_array_append_new(x->array, o) != 0)
        return -ENOMEM;
    return 0;
}

int catalog_json_export(struct catalog *cat, json_t **pdoc, struct catalog_json_repairs *repairs, char *err,
                        size_t errlen)
{
    struct catalog_json_repairs unused;
    *(repairs ? repairs : &unused) = (struct catalog_json_repairs){0};
    static const char *const tables[] = {"plans", "limits", "api_keys"};
    json_t *doc = json_pack("{s:s, s:i, s:{}, s:[], s:[], s:[]}", "format", CATALOG_JSON_FORMAT,
                            "version", CATALOG_JSON_VERSION, "last_ids", "plans", "users", "api_keys");
    int r = doc ? 0 : -ENOMEM;
    for (size_t i = 0; r == 0 && i < sizeof(tables) / sizeof(tables[0]); i++) {
        int64_t seq = 0;
        r = catalog_sequence_get(cat, tables[i], &seq);
        if (r == 0 && json_object_set_new(json_object_get(doc, "last_ids"), tables[i], json_integer(seq)))
            r = -ENOMEM;
    }
    struct export_ctx x = {.array = json_object_get(doc, "plans"), .repairs = repairs ? repairs : &unused};
    if (r == 0)
        r = catalog_plan_each(cat, export_plan, &x);
    size_t i;
    json_t *plan;
    json_array_foreach(json_object_get(doc, "plans"), i, plan) {
        if (r)
            break;
        x.array = json_object_get(plan, "limits");
        r = catalog_limit_each(cat, json_integer_value(json_object_get(plan, "id")), export_limit, &x);
        x.array = json_object_get(plan, "costs");
        if (r == 0)
            r = catalog_cost_each(cat, json_integer_value(json_object_get(plan, "id")), export_cost, &x);
    }
    if (r == 0) {
        x.array = json_object_get(doc, "users");
        r = catalog_user_each(cat, 0, export_user, &x);
    }
    json_t *user;
    json_array_foreach(json_object_get(doc, "users"), i, user) {
        if (r)
            break;
        x.array = json_object_get(user, "limits");
        r = catalog_user_limit_each(cat, json_string_value(json_object_get(user, "id")), export_limit, &x);
    }
    if (r == 0) {
        x.array = json_object_get(doc, "api_keys");
        r = catalog_key_each(cat, NULL, false, export_key, &x);
    }
    if (r) {
        snprintf(err, errlen, "%s", r == -ENOMEM ? "out of memory" : catalog_errmsg(cat));
        json_decref(doc);
        return r;
    }
    *pdoc = doc;
    return 0;
}
