/* tierctl usage USER: every rate limit, quota and concurrency limit that applies to the
 * user (the plan's, with the user's own in their place), peeked in the proxies' Redis the
 * way a check would see it, with nothing recorded (limiter_peek). ws-messages limits count
 * per connection inside a proxy and are not shown (tierctl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "store/limiter.h"
#include "store/redis/redis_sigpipe.h"
#include "tiers/catalog_json.h"
#include "tiers/proxy_settings.h"
#include "tiers/snapshot.h"
#include "tiers/table.h"
#include "tiers/tierctl.h"

/* ---- where the counts are ---- */

/* Where the proxies keep their counts: the proxy's settings (--config FILE, else
 * $TIERPROXY_CONFIG, else the default path; none with --redis alone), then --redis and
 * --key-prefix over them. */
static int read_store_config(const struct cli *c, struct proxy_settings *sc, char *where, size_t wherelen)
{
    const char *file = c->args.flag[FLAG_CONFIG];
    if (!file && !c->args.flag[FLAG_REDIS]) {
        const char *env = getenv("TIERPROXY_CONFIG");
        file = env && env[0] ? env : PROXY_SETTINGS_DEFAULT_FILE;
    }
    snprintf(where, wherelen, "%s", file ? file : "--redis");
    char err[1400];
    if (proxy_settings_read(file, true, sc, err, sizeof(err)) != 0)
        return cli_fail("%s (give --config FILE, the proxy's, or --redis URL)", err);
    if (c->args.flag[FLAG_REDIS]) {
        snprintf(sc->store, sizeof(sc->store), "redis");
        snprintf(sc->redis, sizeof(sc->redis), "%s", c->args.flag[FLAG_REDIS]);
    }
    if (c->args.flag[FLAG_KEY_PREFIX])
        snprintf(sc->key_prefix, sizeof(sc->key_prefix), "%s", c->args.flag[FLAG_KEY_PREFIX]);
    if (strcmp(sc->store, "redis") != 0)
        return cli_fail("%s has [limits] store = %s: the counts live inside each tierproxy process, where tierctl"
                        " cannot read them (usage needs store = redis; a proxy's RateLimit headers show its counts)",
                        where, sc->store);
    if (strcmp(sc->redis_mode, "single") != 0 && strcmp(sc->redis_mode, "cluster") != 0)
        return cli_fail("%s: [limits] redis_mode: expected single or cluster, got \"%s\"", where, sc->redis_mode);
    return 0;
}

/* A Redis URL as it may be shown: its userinfo ("user:password@") replaced by "***@". */
static const char *url_without_password(const char *url, char *out, size_t len)
{
    const char *auth = strstr(url, "://");
    auth = auth != NULL ? auth + 3 : url;
    size_t end = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < end; i++)
        if (auth[i] == '@')
            at = auth + i;
    if (at == NULL)
        snprintf(out, len, "%s", url);
    else
        snprintf(out, len, "%.*s***%s", (int)(auth - url), url, at);
    return out;
}

/* ---- asking the store ---- */

struct peek_wait {
    bool done;
    struct limiter_result result;
};

static void on_peek(void *arg, const struct limiter_result *result)
{
    struct peek_wait *w = arg;
    w->result = *result;
    w->done = true;
}

/* Runs base's loop for up to ms, or until *flag. */
static void run_loop_until(struct event_base *base, const bool *flag, bool (*ready)(const void *), const void *arg,
                           int64_t ms)
{
    for (int64_t waited = 0; waited < ms; waited += 20) {
        if ((flag && *flag) || (ready && ready(arg)))
            return;
        struct timeval tv = {0, 20000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
}

/* Connected, or answered with an error (a wrong password): no second login changes that. */
static bool limiter_ready(const void *arg)
{
    char reason[8];
    return limiter_available(arg) || limiter_health(arg, reason, sizeof(reason)) == LIMITER_HEALTH_ERROR;
}

/* One row of the report: the limit, its store rule, and its standing. */
struct usage_row {
    const struct tier_limit *limit;
    struct limit_rule rule;
    struct limit_verdict verdict;
};

/* The rows of the user's plan's limits (their rules as the proxies check them); rows
 * holds plan->n_limits. Returns how many. */
static size_t usage_rows(const struct tier_plan *plan, int64_t lease_ttl_ms, struct usage_row *rows)
{
    size_t n = 0;
    for (size_t i = 0; i < plan->n_limits; i++) {
        const struct tier_limit *l = &plan->limits[i];
        if (l->kind == TIER_LIMIT_WS_MESSAGES)
            continue;
        rows[n].limit = l;
        rows[n].rule = l->rule;
        if (l->kind == TIER_LIMIT_CONCURRENCY)
            rows[n].rule = (struct limit_rule){.id = l->rule.id, .kind = LIMIT_CONCURRENCY, .rate = l->rule.rate,
                                               .window_ms = lease_ttl_ms};
        n++;
    }
    return n;
}

/* Peeks the rows' rules for the user, LIMITER_MAX_RULES at a time. Returns 0 or the
 * status, said why. */
static int peek_rows(struct limiter *limiter, struct event_base *base, const struct proxy_settings *sc,
                     const char *user_id, struct usage_row *rows, size_t n)
{
    char subject[CATALOG_USER_ID_MAX + 8];
    int len = snprintf(subject, sizeof(subject), "u:%s", user_id);   /* the proxies' subject */
    for (size_t at = 0; at < n; at += LIMITER_MAX_RULES) {
        size_t batch = n - at < LIMITER_MAX_RULES ? n - at : LIMITER_MAX_RULES;
        struct limit_rule rules[LIMITER_MAX_RULES];
        for (size_t k = 0; k < batch; k++)
            rules[k] = rows[at + k].rule;
        struct peek_wait w = {0};
        if (limiter_peek(limiter, subject, (size_t)len, rules, batch, -1, on_peek, &w) != 0)
            return cli_fail("cannot ask the store about user \"%s\"", user_id);
        run_loop_until(base, &w.done, NULL, NULL, 5000);
        if (!w.done || w.result.status != LIMITER_DECIDED)
        {
            char shown[sizeof(sc->redis) + 8];
            return cli_fail("the proxies' Redis (%s) did not answer",
                            url_without_password(sc->redis, shown, sizeof(shown)));
        }
        for (size_t k = 0; k < batch; k++)
            rows[at + k].verdict = w.result.verdicts[k];
    }
    return 0;
}

/* Connects to the proxies' Redis (cluster mode: the map from the seeds, then the user's
 * slot's master) and peeks the rows. Returns 0 or the status, said why. */
static int ask_store(const struct proxy_settings *sc, const char *where, const char *user_id, struct usage_row *rows,
                     size_t n)
{
    char err[512];
    struct redis_sigpipe sigpipe;
    redis_sigpipe_ignore(&sigpipe);
    struct event_base *base = event_base_new();
    struct redis_store_options opts = {
        .url = sc->redis, .tls_ca_file = sc->redis_ca_file, .key_prefix = sc->key_prefix, .command_timeout_ms = 2000,
        .lease_ttl_ms = sc->lease_ttl_ms,
    };
    bool cluster = proxy_settings_cluster(sc);
    struct limiter *limiter = !base ? NULL
                              : cluster ? limiter_redis_cluster_create(base, &opts, err, sizeof(err))
                                        : limiter_redis_create(base, &opts, err, sizeof(err));
    int r;
    if (!limiter) {
        r = !base ? cli_fail("out of memory") : cli_fail("%s: %s", where, err);
        goto out;
    }
    run_loop_until(base, NULL, limiter_ready, limiter, 3000);
    if (!limiter_available(limiter)) {
        char shown[sizeof(sc->redis) + 8], why[256] = "";
        limiter_health(limiter, why, sizeof(why));   /* such as "...: AUTH: WRONGPASS ..." */
        r = cli_fail("cannot reach the proxies' Redis (%s, from %s)%s%s",
                     url_without_password(sc->redis, shown, sizeof(shown)), where, why[0] ? ": " : "", why);
        goto out;
    }
    r = peek_rows(limiter, base, sc, user_id, rows, n);
out:
    if (limiter)
        limiter_destroy(limiter);
    if (base)
        event_base_free(base);
    redis_sigpipe_restore(&sigpipe);
    return r;
}

/* ---- the report ---- */

static json_t *usage_row_json(const struct usage_row *u)
{
    const struct tier_limit *l = u->limit;
    const char *kind = l->kind == TIER_LIMIT_QUOTA ? "quota" : l->kind == TIER_LIMIT_CONCURRENCY ? "concurrency" : "rate";
    int64_t used = u->verdict.limit - u->verdict.remaining;
    json_t *o = json_pack("{s:I, s:s, s:o, s:I, s:I, s:I, s:I, s:s}", "id", (json_int_t)l->id, "kind", kind, "name",
                          catalog_json_text(l->name), "limit", (json_int_t)u->verdict.limit, "used",
                          (json_int_t)(used < 0 ? 0 : used), "remaining", (json_int_t)u->verdict.remaining,
                          "reset_s", (json_int_t)((u->verdict.reset_ms + 999) / 1000), "source",
                          l->own ? "user" : "plan");
    if (!o)
        return NULL;
    char text[64];
    int bad = 0;
    if (l->kind == TIER_LIMIT_QUOTA)
        bad |= json_object_set_new(o, "period", json_string(limit_period_name(l->rule.period)));
    else if (l->kind == TIER_LIMIT_RATE)
        bad |= json_object_set_new(o, "window", json_string(limit_window_format(l->rule.window_ms, text, sizeof(text))));
    bad |= json_object_set_new(o, "route", l->has_route ? json_sprintf("%s %s", l->route_method, l->route_prefix)
                                                        : json_null());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int print_usage_json(const struct tier_user *user, const struct usage_row *rows, size_t n)
{
    json_t *doc = json_pack("{s:o, s:o, s:[]}", "user", catalog_json_text(user->id), "plan",
                            catalog_json_text(tier_user_plan(user)->name), "limits");
    json_t *arr = doc ? json_object_get(doc, "limits") : NULL;
    for (size_t k = 0; arr && k < n; k++) {
        json_t *o = usage_row_json(&rows[k]);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(doc);
            doc = arr = NULL;
        }
    }
    return print_json(doc);
}

static void add_usage_row(struct table *t, const struct usage_row *u)
{
    const struct tier_limit *l = u->limit;
    char id[32], what[96], used[32], remaining[32], reset[32], route[CATALOG_PREFIX_MAX + 32], num[64];
    snprintf(id, sizeof(id), "%" PRId64, l->id);
    if (l->kind == TIER_LIMIT_QUOTA)
        snprintf(what, sizeof(what), "quota %s", limit_quota_format(l->rule.rate, l->rule.period, num, sizeof(num)));
    else if (l->kind == TIER_LIMIT_CONCURRENCY)
        snprintf(what, sizeof(what), "concurrency %" PRId64, l->rule.rate);
    else
        snprintf(what, sizeof(what), "rate %s%s", limit_rate_format(l->rule.rate, l->rule.window_ms, num, sizeof(num)),
                 l->rule.burst ? " +burst" : "");
    int64_t n_used = u->verdict.limit - u->verdict.remaining;
    snprintf(used, sizeof(used), "%" PRId64, n_used < 0 ? 0 : n_used);
    snprintf(remaining, sizeof(remaining), "%" PRId64, u->verdict.remaining);
    snprintf(reset, sizeof(reset), "%" PRId64, (u->verdict.reset_ms + 999) / 1000);
    snprintf(route, sizeof(route), "%s %s", l->route_method, l->has_route ? l->route_prefix : "");
    table_row(t, id, what, used, remaining, reset, l->has_route ? route : "-", l->own ? "user" : "plan");
}

static int print_usage_table(const struct tier_user *user, const struct usage_row *rows, size_t n)
{
    printf("user  %s\nplan  %s\n", user->id, tier_user_plan(user)->name);
    struct table t = {.ncols = 7};
    table_row(&t, "LIMIT-ID", "LIMIT", "USED", "REMAINING", "RESET-S", "ROUTE", "SOURCE");
    for (size_t k = 0; k < n; k++)
        add_usage_row(&t, &rows[k]);
    table_print_free(&t);
    return fflush(stdout) != 0 ? cli_fail("cannot write the output: %s", strerror(errno)) : 0;
}

int cmd_usage(struct cli *c)
{
    const char *user_id = c->args.pos[0];
    int r = check_user_id(c, user_id);
    if (r)
        return r;
    if (c->args.flag[FLAG_KEY_PREFIX] && !c->args.flag[FLAG_REDIS] && !c->args.flag[FLAG_CONFIG])
        return cli_usage_error(&c->args, "--key-prefix goes with --redis");
    char err[512], where[1024];
    struct snapshot *snap = NULL;
    if (snapshot_load(c->db_path, &snap, err, sizeof(err)))
        return cli_fail("%s", err);
    const struct tier_user *user = snapshot_find_user(snap, user_id);
    struct proxy_settings sc;
    struct usage_row *rows = NULL;
    if (!user) {
        r = cli_fail("no user \"%s\"", user_id);
    } else if ((r = read_store_config(c, &sc, where, sizeof(where))) == 0) {
        rows = calloc(tier_user_plan(user)->n_limits + 1, sizeof(*rows));
        size_t n = rows ? usage_rows(tier_user_plan(user), sc.lease_ttl_ms, rows) : 0;
        r = !rows ? cli_fail("out of memory") : ask_store(&sc, where, user->id, rows, n);
        if (r == 0)
            r = c->args.flag[FLAG_JSON] ? print_usage_json(user, rows, n) : print_usage_table(user, rows, n);
    }
    free(rows);
    snapshot_unref(snap);
    return r;
}
