/* The catalog's plans, their limits (and users' own) and costs. See catalog.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/catalog/catalog_impl.h"

static const char *const kind_names[] = {
    [CATALOG_LIMIT_RATE] = "rate",
    [CATALOG_LIMIT_CONCURRENCY] = "concurrency",
    [CATALOG_LIMIT_WS_MESSAGES] = "ws_messages",
    [CATALOG_LIMIT_QUOTA] = "quota",
};

/* A period's name in the catalog (the column `period`), or NULL for none. */
static const char *period_column(enum limit_period period)
{
    return period == LIMIT_PERIOD_NONE ? NULL : limit_period_name(period);
}

static int period_parse(const char *text, enum limit_period *pperiod)
{
    static const enum limit_period all[] = {LIMIT_PERIOD_DAY, LIMIT_PERIOD_WEEK, LIMIT_PERIOD_MONTH};
    *pperiod = LIMIT_PERIOD_NONE;
    if (!text)
        return 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(text, limit_period_name(all[i])) == 0) {
            *pperiod = all[i];
            return 0;
        }
    return -EINVAL;
}

const char *catalog_limit_kind_name(enum catalog_limit_kind kind)
{
    if ((unsigned)kind >= sizeof(kind_names) / sizeof(kind_names[0]))
        return NULL;
    return kind_names[kind];
}

int catalog_limit_kind_parse(const char *text, enum catalog_limit_kind *pkind)
{
    for (size_t i = 0; i < sizeof(kind_names) / sizeof(kind_names[0]); i++) {
        if (strcmp(text, kind_names[i]) == 0) {
            *pkind = (enum catalog_limit_kind)i;
            return 0;
        }
    }
    return CATALOG_INVALID;
}

/* ---- plans ---- */

int catalog_plan_add(struct catalog *cat, const struct catalog_plan *plan, int64_t *pid)
{
    if (catalog_check_plan_name(plan->name, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    int64_t id;
    int r = catalog_query_int(cat, &id, "SELECT id FROM plans WHERE name = ?", "t", plan->name);
    if (r == 0) {
        catalog_set_error(cat, "a plan named \"%s\" already exists", plan->name);
        return CATALOG_EXISTS;
    }
    if (r != CATALOG_NOT_FOUND)
        return r;
    if (plan->id > 0) {
        r = catalog_query_int(cat, &id, "SELECT id FROM plans WHERE id = ?", "i", plan->id);
        if (r == 0) {
            catalog_set_error(cat, "plan id %lld is taken", (long long)plan->id);
            return CATALOG_EXISTS;
        }
        if (r != CATALOG_NOT_FOUND)
            return r;
    }
    if (plan->priority < CATALOG_PRIORITY_MIN || plan->priority > CATALOG_PRIORITY_MAX) {
        catalog_set_error(cat, "a priority is %d to %d", CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
        return CATALOG_INVALID;
    }
    r = catalog_stmt_run(cat, NULL, "INSERT INTO plans (id, name, shadow, priority) VALUES (?, ?, ?, ?)", "Itii",
                 plan->id, plan->name, (int64_t)plan->shadow, (int64_t)plan->priority);
    if (r == 0)
        r = catalog_inserted_id(cat, "plan", pid);
    return r;
}

int catalog_plan_find(struct catalog *cat, const char *name, int64_t *pid, bool *pshadow)
{
    sqlite3_stmt *st = NULL;
    int r = catalog_stmt_prepare(cat, &st, "SELECT id, shadow FROM plans WHERE name = ?", "t", name);
    if (r)
        return r;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (pid)
            *pid = sqlite3_column_int64(st, 0);
        if (pshadow)
            *pshadow = sqlite3_column_int(st, 1) != 0;
    } else if (rc == SQLITE_DONE) {
        catalog_set_error(cat, "no plan named \"%s\"", name);
        r = CATALOG_NOT_FOUND;
    } else {
        r = catalog_sql_fail(cat, rc);
    }
    sqlite3_finalize(st);
    return r;
}

int catalog_plan_set_shadow(struct catalog *cat, int64_t plan_id, bool shadow)
{
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n, "UPDATE plans SET shadow = ? WHERE id = ?", "ii", (int64_t)shadow, plan_id);
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "no plan with id %lld", (long long)plan_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_plan_priority(struct catalog *cat, int64_t plan_id, int *ppriority)
{
    int64_t v = CATALOG_PRIORITY_DEFAULT;
    int r = cat->version < 2 ? catalog_query_int(cat, &v, "SELECT 5 FROM plans WHERE id = ?", "i", plan_id)
                             : catalog_query_int(cat, &v, "SELECT priority FROM plans WHERE id = ?", "i", plan_id);
    if (r == CATALOG_NOT_FOUND)
        catalog_set_error(cat, "no plan with id %lld", (long long)plan_id);
    if (r == 0)
        *ppriority = (int)v;
    return r;
}

int catalog_plan_set_priority(struct catalog *cat, int64_t plan_id, int priority)
{
    if (priority < CATALOG_PRIORITY_MIN || priority > CATALOG_PRIORITY_MAX) {
        catalog_set_error(cat, "a priority is %d to %d", CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
        return CATALOG_INVALID;
    }
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n, "UPDATE plans SET priority = ? WHERE id = ?", "ii", (int64_t)priority, plan_id);
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "no plan with id %lld", (long long)plan_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_plan_user_count(struct catalog *cat, int64_t plan_id, int64_t *pcount)
{
    return catalog_query_int(cat, pcount, "SELECT count(*) FROM users WHERE plan_id = ?", "i", plan_id);
}

int catalog_plan_remove(struct catalog *cat, int64_t plan_id)
{
    int64_t users = 0;
    int r = catalog_plan_user_count(cat, plan_id, &users);
    if (r)
        return r;
    if (users > 0) {
        catalog_set_error(cat, "%lld user%s still on the plan", (long long)users, users == 1 ? " is" : "s are");
        return CATALOG_IN_USE;
    }
    int64_t n = 0;
    r = catalog_stmt_run(cat, NULL, "DELETE FROM limits WHERE plan_id = ?", "i", plan_id);
    if (r == 0)
        r = catalog_stmt_run(cat, &n, "DELETE FROM plans WHERE id = ?", "i", plan_id);
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "no plan with id %lld", (long long)plan_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

static int plan_row(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk)
{
    (void)cat;
    struct catalog_plan plan = {
        .id = sqlite3_column_int64(st, 0),
        .name = catalog_column_text(st, 1),
        .shadow = sqlite3_column_int(st, 2) != 0,
        .priority = sqlite3_column_int(st, 3),
    };
    return ((catalog_plan_fn *)walk->fn)(walk->ctx, &plan);
}

int catalog_plan_each(struct catalog *cat, catalog_plan_fn *fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int r = catalog_stmt_prepare(cat, &st, cat->version < 2 ? "SELECT id, name, shadow, 5 FROM plans ORDER BY id"
                                                    : "SELECT id, name, shadow, priority FROM plans ORDER BY id", "");
    if (r)
        return r;
    return catalog_stmt_walk(cat, st, plan_row, &(struct catalog_walk){(void (*)(void))fn, ctx, NULL});
}

/* ---- limits ---- */

int catalog_limit_add(struct catalog *cat, const struct catalog_limit *limit, int64_t *pid)
{
    if (catalog_check_limit(limit, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    if ((limit->plan_id > 0) == (limit->user_id != NULL)) {
        catalog_set_error(cat, "a limit belongs to a plan or to a user");
        return CATALOG_INVALID;
    }
    int64_t v;
    int r;
    if (limit->user_id) {
        r = catalog_user_find(cat, limit->user_id, NULL);
    } else {
        r = catalog_query_int(cat, &v, "SELECT id FROM plans WHERE id = ?", "i", limit->plan_id);
        if (r == CATALOG_NOT_FOUND)
            catalog_set_error(cat, "no plan with id %lld", (long long)limit->plan_id);
    }
    if (r)
        return r;
    if (limit->id > 0) {
        r = catalog_query_int(cat, &v, "SELECT id FROM limits WHERE id = ?", "i", limit->id);
        if (r == 0) {
            catalog_set_error(cat, "limit id %lld is taken", (long long)limit->id);
            return CATALOG_EXISTS;
        }
        if (r != CATALOG_NOT_FOUND)
            return r;
    }
    const char *algorithm = limit->kind == CATALOG_LIMIT_RATE ? limit_kind_name(limit->algorithm) : NULL;
    r = catalog_stmt_run(cat, NULL,
                 "INSERT INTO limits (id, plan_id, user_id, kind, algorithm, amount, window_ms, burst,"
                 " period, route_method, route_prefix) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 "IItttiiittt", limit->id, limit->plan_id, limit->user_id, catalog_limit_kind_name(limit->kind),
                 algorithm, limit->amount, limit->window_ms, limit->burst, period_column(limit->period),
                 limit->route_method, limit->route_prefix);
    if (r == 0)
        r = catalog_inserted_id(cat, "limit", pid);
    return r;
}

int catalog_limit_remove(struct catalog *cat, int64_t plan_id, int64_t limit_id)
{
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n, "DELETE FROM limits WHERE id = ? AND plan_id = ?", "ii", limit_id, plan_id);
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "the plan has no limit %lld", (long long)limit_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_limit_update(struct catalog *cat, const struct catalog_limit *limit)
{
    if (catalog_check_limit(limit, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    const char *algorithm = limit->kind == CATALOG_LIMIT_RATE ? limit_kind_name(limit->algorithm) : NULL;
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n,
                     "UPDATE limits SET algorithm = ?, amount = ?, window_ms = ?, burst = ?, period = ?"
                     " WHERE id = ? AND plan_id = ? AND kind = ?",
                     "tiiitiit", algorithm, limit->amount, limit->window_ms, limit->burst,
                     period_column(limit->period), limit->id, limit->plan_id,
                     catalog_limit_kind_name(limit->kind));
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "the plan has no %s limit %lld", catalog_limit_kind_name(limit->kind),
                (long long)limit->id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_limit_remove_routeless(struct catalog *cat, int64_t plan_id,
                                   enum catalog_limit_kind kind, int64_t *pcount)
{
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n, "DELETE FROM limits WHERE plan_id = ? AND kind = ? AND route_method IS NULL",
                     "it", plan_id, catalog_limit_kind_name(kind));
    if (r == 0 && pcount)
        *pcount = n;
    return r;
}

/* A row of a limits query (the columns of LIMIT_COLUMNS) to its callback. */
static int limit_row(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk)
{
    struct catalog_limit limit = {
        .id = sqlite3_column_int64(st, 0),
        .plan_id = sqlite3_column_int64(st, 1),
        .algorithm = LIMIT_SLIDING_LOG,
        .amount = sqlite3_column_int64(st, 4),
        .window_ms = sqlite3_column_int64(st, 5),
        .burst = sqlite3_column_int64(st, 6),
        .route_method = catalog_column_text(st, 7),
        .route_prefix = catalog_column_text(st, 8),
        .user_id = catalog_column_text(st, 10),
    };
    const char *kind = catalog_column_text(st, 2), *algorithm = catalog_column_text(st, 3);
    if (!kind || catalog_limit_kind_parse(kind, &limit.kind) != 0 ||
        (algorithm && limit_kind_parse(algorithm, &limit.algorithm) != 0) ||
        period_parse(catalog_column_text(st, 9), &limit.period) != 0) {
        catalog_set_error(cat, "limit %lld has an unknown kind, algorithm or period", (long long)limit.id);
        return -EINVAL;
    }
    return ((catalog_limit_fn *)walk->fn)(walk->ctx, &limit);
}

static int limit_walk(struct catalog *cat, sqlite3_stmt *st, catalog_limit_fn *fn, void *ctx)
{
    return catalog_stmt_walk(cat, st, limit_row, &(struct catalog_walk){(void (*)(void))fn, ctx, NULL});
}

#define LIMIT_COLUMNS_V1 \
    "SELECT id, plan_id, kind, algorithm, amount, window_ms, burst, route_method, route_prefix, NULL, NULL FROM limits"
#define LIMIT_COLUMNS \
    "SELECT id, coalesce(plan_id, 0), kind, algorithm, amount, window_ms, burst, route_method, route_prefix," \
    " period, user_id FROM limits"

int catalog_limit_each(struct catalog *cat, int64_t plan_id, catalog_limit_fn *fn, void *ctx)
{
    const char *sql;
    if (cat->version < 2)
        sql = plan_id > 0 ? LIMIT_COLUMNS_V1 " WHERE plan_id = ? ORDER BY id" : LIMIT_COLUMNS_V1 " ORDER BY plan_id, id";
    else
        sql = plan_id > 0 ? LIMIT_COLUMNS " WHERE plan_id = ? ORDER BY id"
                          : LIMIT_COLUMNS " WHERE plan_id IS NOT NULL ORDER BY plan_id, id";
    sqlite3_stmt *st = NULL;
    int r = plan_id > 0 ? catalog_stmt_prepare(cat, &st, sql, "i", plan_id) : catalog_stmt_prepare(cat, &st, sql, "");
    if (r)
        return r;
    return limit_walk(cat, st, fn, ctx);
}

int catalog_user_limit_each(struct catalog *cat, const char *user_id, catalog_limit_fn *fn, void *ctx)
{
    if (cat->version < 2)
        return 0;   /* schema 1 has no user limits */
    sqlite3_stmt *st = NULL;
    int r = user_id ? catalog_stmt_prepare(cat, &st, LIMIT_COLUMNS " WHERE user_id = ? ORDER BY id", "t", user_id)
                    : catalog_stmt_prepare(cat, &st, LIMIT_COLUMNS " WHERE user_id IS NOT NULL ORDER BY user_id, id", "");
    if (r)
        return r;
    return limit_walk(cat, st, fn, ctx);
}

int catalog_user_limit_remove(struct catalog *cat, const char *user_id, int64_t limit_id)
{
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n, "DELETE FROM limits WHERE id = ? AND user_id = ?", "it", limit_id, user_id);
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "user \"%s\" has no limit %lld", user_id, (long long)limit_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

/* ---- costs ---- */

int catalog_cost_set(struct catalog *cat, const struct catalog_cost *cost, int64_t *preplaced)
{
    if (catalog_check_cost(cost, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    int64_t old = 0;
    int r = catalog_query_int(cat, &old, "SELECT id FROM plans WHERE id = ?", "i", cost->plan_id);
    if (r == CATALOG_NOT_FOUND)
        catalog_set_error(cat, "no plan with id %lld", (long long)cost->plan_id);
    if (r)
        return r;
    old = 0;
    r = catalog_query_int(cat, &old, "SELECT cost FROM costs WHERE plan_id = ? AND route_method = ? AND route_prefix = ?",
                  "itt", cost->plan_id, cost->route_method, cost->route_prefix);
    if (r != 0 && r != CATALOG_NOT_FOUND)
        return r;
    if (preplaced)
        *preplaced = r == 0 ? old : 0;
    return catalog_stmt_run(cat, NULL,
                    "INSERT INTO costs (plan_id, route_method, route_prefix, cost) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (plan_id, route_method, route_prefix) DO UPDATE SET cost = excluded.cost",
                    "itti", cost->plan_id, cost->route_method, cost->route_prefix, cost->cost);
}

int catalog_cost_remove(struct catalog *cat, int64_t plan_id, const char *method, const char *prefix)
{
    int64_t n = 0;
    int r = catalog_stmt_run(cat, &n, "DELETE FROM costs WHERE plan_id = ? AND route_method = ? AND route_prefix = ?",
                     "itt", plan_id, method, prefix);
    if (r == 0 && n == 0) {
        catalog_set_error(cat, "the plan has no cost for \"%s %s\"", method, prefix);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

static int cost_row(struct catalog *cat, sqlite3_stmt *st, const struct catalog_walk *walk)
{
    (void)cat;
    struct catalog_cost cost = {
        .plan_id = sqlite3_column_int64(st, 0),
        .route_method = catalog_column_text(st, 1),
        .route_prefix = catalog_column_text(st, 2),
        .cost = sqlite3_column_int64(st, 3),
    };
    return ((catalog_cost_fn *)walk->fn)(walk->ctx, &cost);
}

int catalog_cost_each(struct catalog *cat, int64_t plan_id, catalog_cost_fn *fn, void *ctx)
{
    if (cat->version < 2)
        return 0;   /* schema 1 has no costs */
    sqlite3_stmt *st = NULL;
    int r = catalog_stmt_prepare(cat, &st,
                         "SELECT plan_id, route_method, route_prefix, cost FROM costs"
                         " WHERE ?1 <= 0 OR plan_id = ?1 ORDER BY plan_id, route_method, route_prefix",
                         "i", plan_id);
    if (r)
        return r;
    return catalog_stmt_walk(cat, st, cost_row, &(struct catalog_walk){(void (*)(void))fn, ctx, NULL});
}
