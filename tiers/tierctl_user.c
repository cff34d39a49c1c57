/* tierctl user add, set, list, show, remove, and a user's own limits: user limit add,
 * user limit remove (tierctl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tiers/catalog_json.h"
#include "tiers/table.h"
#include "tiers/tierctl.h"

int check_user_id(struct cli *c, const char *id)
{
    char msg[256];
    if (catalog_check_user_id(id, msg, sizeof(msg)))
        return cli_usage_error(&c->args, "%s", msg);
    return 0;
}

/* ---- user add, user set ---- */

static int user_plan_name(void *ctx, const struct catalog_user *user)
{
    snprintf(ctx, CATALOG_NAME_MAX + 1, "%s", user->plan_name ? user->plan_name : "?");
    return 0;
}

static int user_add_or_set(struct cli *c, bool add)
{
    const char *id = c->args.pos[0], *plan = c->args.flag[FLAG_PLAN];
    int r = check_user_id(c, id);
    if (r)
        return r;
    if (!plan)
        return cli_usage_error(&c->args, "--plan NAME is required");
    int64_t plan_id;
    if (catalog_plan_find(c->cat, plan, &plan_id, NULL))
        return catalog_failed(c);
    struct catalog_user user = {.id = id, .plan_id = plan_id};
    if (add) {
        if (catalog_user_add(c->cat, &user))
            return catalog_failed(c);
        note(c, "user %s: added on plan %s", id, plan);
        return 0;
    }
    char old[CATALOG_NAME_MAX + 1] = "";
    if (catalog_user_get(c->cat, id, user_plan_name, old) || catalog_user_set_plan(c->cat, id, plan_id))
        return catalog_failed(c);
    if (strcmp(old, plan) == 0)
        note(c, "user %s: already on plan %s; nothing changed", id, plan);
    else
        note(c, "user %s: plan %s -> %s", id, old, plan);
    return 0;
}

int cmd_user_add(struct cli *c)
{
    return user_add_or_set(c, true);
}

int cmd_user_set(struct cli *c)
{
    return user_add_or_set(c, false);
}

/* ---- user list ---- */

struct user_view {
    json_t *array;
    struct table *table;
};

static int list_user(void *ctx, const struct catalog_user *user)
{
    struct user_view *v = ctx;
    if (v->array) {
        json_t *o = catalog_json_user(user);
        return !o || json_array_append_new(v->array, o) ? -ENOMEM : 0;
    }
    return table_row(v->table, user->id, user->plan_name, user->created);
}

int cmd_user_list(struct cli *c)
{
    int64_t plan_id = 0;
    if (c->args.flag[FLAG_PLAN] && catalog_plan_find(c->cat, c->args.flag[FLAG_PLAN], &plan_id, NULL))
        return catalog_failed(c);
    struct table t = {.ncols = 3};
    struct user_view v = {.table = &t};
    int r = listing_start(c, &v.array);
    if (r)
        return r;
    if (!v.array)
        table_row(&t, "USER", "PLAN", "CREATED");
    return listing_end(c, catalog_user_each(c->cat, plan_id, list_user, &v), v.array, &t);
}

/* ---- user show ---- */

static int show_user(void *ctx, const struct catalog_user *user)
{
    json_t **po = ctx;
    *po = catalog_json_user(user);
    return *po ? 0 : -ENOMEM;
}

/* user show --json: the user with their own limits and their keys. Takes user. */
static int print_user_json(struct cli *c, json_t *user)
{
    json_t *keys = json_array(), *limits = json_array();
    struct key_view v = {.array = keys};
    if (!limits || json_object_set_new(user, "limits", limits) ||
        catalog_user_limit_each(c->cat, c->args.pos[0], limit_json_append, limits)) {
        json_decref(keys);
        json_decref(user);
        return cli_fail("cannot list the user's limits: %s", catalog_errmsg(c->cat));
    }
    if (!keys || json_object_set_new(user, "keys", keys) ||
        catalog_key_each(c->cat, c->args.pos[0], false, list_key, &v)) {
        json_decref(user);
        return cli_fail("cannot list the user's keys: %s", catalog_errmsg(c->cat));
    }
    return print_json(user);
}

/* user show's tables: the user's own limits (or "the plan's"), then the keys. */
static int print_user_tables(struct cli *c)
{
    struct table own = {.ncols = 6};
    table_row(&own, "LIMIT-ID", "KIND", "AMOUNT", "BURST", "ALGORITHM", "ROUTE");
    if (catalog_user_limit_each(c->cat, c->args.pos[0], limit_table_row, &own)) {
        table_print_free_silent(&own);
        return catalog_failed(c);
    }
    if (own.nrows > 1) {
        printf("own limits (each replaces the plan's of its kind on its route, with its count):\n");
        table_print_free(&own);
    } else {
        table_print_free_silent(&own);
        printf("limits   the plan's\n");
    }
    struct table t = {.ncols = 4};
    struct key_view v = {.table = &t};
    table_row(&t, "KEY-ID", "LABEL", "CREATED", "REVOKED");
    if (catalog_key_each(c->cat, c->args.pos[0], false, list_key, &v)) {
        table_print_free(&t);
        return catalog_failed(c);
    }
    bool none = t.nrows == 1;
    table_print_free(&t);
    if (none)
        printf("keys     none\n");
    return 0;
}

int cmd_user_show(struct cli *c)
{
    json_t *user = NULL;
    int r = catalog_user_get(c->cat, c->args.pos[0], show_user, &user);
    if (r) {
        json_decref(user);
        return r == -ENOMEM ? cli_fail("out of memory") : catalog_failed(c);
    }
    if (c->args.flag[FLAG_JSON])
        return print_user_json(c, user);
    printf("user     %s\nplan     %s\ncreated  %s\n", json_string_value(json_object_get(user, "id")),
           json_string_value(json_object_get(user, "plan")), json_string_value(json_object_get(user, "created")));
    json_decref(user);
    return print_user_tables(c);
}

/* ---- user remove ---- */

int cmd_user_remove(struct cli *c)
{
    int64_t revoked = 0;
    if (catalog_user_remove(c->cat, c->args.pos[0], &revoked))
        return catalog_failed(c);
    note(c, "user %s: removed; %" PRId64 " key%s revoked", c->args.pos[0], revoked, revoked == 1 ? "" : "s");
    return 0;
}

/* ---- a user's own limits ---- */

int cmd_user_limit_add(struct cli *c)
{
    const char *user = c->args.pos[0];
    int r = check_user_id(c, user);
    if (r || (r = limit_flags_check(c, true)) != 0)
        return r;
    if (catalog_user_find(c->cat, user, NULL))
        return catalog_failed(c);
    struct catalog_limit limits[MAX_FLAG_LIMITS];
    int n = limits_from_flags(c, 0, true, limits);
    for (int i = 0; i < n; i++)
        limits[i].user_id = user;
    if ((r = add_limits(c, limits, n)) != 0)
        return r;
    char whom[CATALOG_USER_ID_MAX + 8];
    snprintf(whom, sizeof(whom), "user %s", user);
    return announce_new_limits(c, limits, n, whom, "own limit");
}

int cmd_user_limit_remove(struct cli *c)
{
    const char *user = c->args.pos[0];
    int64_t limit_id;
    int r = check_user_id(c, user);
    if (r)
        return r;
    if (cli_parse_int(c->args.pos[1], 1, CATALOG_ID_MAX, &limit_id))
        return cli_usage_error(&c->args, "invalid LIMIT-ID \"%s\"", c->args.pos[1]);
    if (catalog_user_find(c->cat, user, NULL) || catalog_user_limit_remove(c->cat, user, limit_id))
        return catalog_failed(c);
    note(c, "user %s: removed own limit %" PRId64 "; the plan's limits of its kind apply again", user, limit_id);
    return 0;
}
