/* LIMIT-FLAGS: from the command line into catalog limits, and limits back into the words
 * tierctl prints them with (tierctl.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tiers/limit_bounds.h"
#include "tiers/tierctl.h"

/* ---- parsing ---- */

/* Each --rate, whose windows must differ: two rates of one window are one too many. */
static int parse_rates(struct cli *c)
{
    struct limit_flags *lf = &c->lf;
    const struct cli_args *a = &c->args;
    for (int i = 0; i < a->count[FLAG_RATE]; i++) {
        const char *v = a->values[FLAG_RATE][i];
        if (limit_rate_parse(v, &lf->rate_amount[i], &lf->rate_window_ms[i]) != 0)
            return cli_usage_error(a, "invalid rate \"%s\" (N/WINDOW, e.g. 100/min or 10/15s)", v);
        for (int k = 0; k < i; k++)
            if (lf->rate_window_ms[k] == lf->rate_window_ms[i])
                return cli_usage_error(a, "--rate %s and --rate %s have the same window: give one",
                                       a->values[FLAG_RATE][k], v);
        lf->n_rates = i + 1;
    }
    return 0;
}

/* Each rate with the burst and algorithm it goes with, as the limiter would take it. */
static int check_rates(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    for (int i = 0; i < lf->n_rates; i++) {
        struct limit_rule rule = {
            .kind = lf->algorithm ? lf->algorithm_value : LIMIT_SLIDING_LOG,
            .rate = lf->rate_amount[i], .burst = lf->burst ? lf->burst_value : 0,
            .window_ms = lf->rate_window_ms[i],
        };
        if (limit_rule_validate(&rule) != 0)
            return cli_usage_error(&c->args, "rate %s with burst %" PRId64 " is out of range",
                                   c->args.values[FLAG_RATE][i], rule.burst);
    }
    return 0;
}

/* Which of the flags with a value were given. */
static void note_given(struct cli *c)
{
    struct limit_flags *lf = &c->lf;
    const char *const *flag = c->args.flag;
    lf->burst = flag[FLAG_BURST] != NULL;
    lf->algorithm = flag[FLAG_ALGORITHM] != NULL;
    lf->priority = flag[FLAG_PRIORITY] != NULL;
    lf->shadow = flag[FLAG_SHADOW] != NULL;
    lf->concurrency = flag[FLAG_CONCURRENCY] != NULL;
    lf->ws = flag[FLAG_WS_MESSAGES] != NULL;
    lf->quota = flag[FLAG_QUOTA] != NULL;
}

/* The value of each flag given but --rate and --route. */
static int parse_values(struct cli *c)
{
    struct limit_flags *lf = &c->lf;
    const struct cli_args *a = &c->args;
    const char *v;
    if ((v = a->flag[FLAG_BURST]) && cli_parse_int(v, 0, LIMIT_MAX_PRODUCT, &lf->burst_value) != 0)
        return cli_usage_error(a, "invalid burst \"%s\" (a whole number, 0 or more)", v);
    if ((v = a->flag[FLAG_ALGORITHM]) && limit_kind_parse(v, &lf->algorithm_value) != 0)
        return cli_usage_error(a, "unknown algorithm \"%s\" (sliding-log, sliding-window, token-bucket, "
                               "fixed-window)", v);
    if ((v = a->flag[FLAG_PRIORITY]) &&
        cli_parse_int(v, CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX, &lf->priority_value) != 0)
        return cli_usage_error(a, "invalid priority \"%s\" (%d, shed first, to %d, shed last)", v,
                               CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
    if ((v = a->flag[FLAG_SHADOW]) && cli_parse_bool(v, &lf->shadow_value) != 0)
        return cli_usage_error(a, "--shadow is on or off, not \"%s\"", v);
    if ((v = a->flag[FLAG_CONCURRENCY]) && cli_parse_int(v, 1, CATALOG_MAX_CONCURRENCY, &lf->concurrency_value) != 0)
        return cli_usage_error(a, "invalid concurrency \"%s\" (1 to %d)", v, CATALOG_MAX_CONCURRENCY);
    if ((v = a->flag[FLAG_WS_MESSAGES]) && limit_rate_parse(v, &lf->ws_amount, &lf->ws_window_ms) != 0)
        return cli_usage_error(a, "invalid --ws-messages \"%s\" (N/WINDOW, e.g. 10/s)", v);
    if ((v = a->flag[FLAG_QUOTA]) && limit_quota_parse(v, &lf->quota_amount, &lf->quota_period) != 0)
        return cli_usage_error(a, "invalid quota \"%s\" (N/day, N/week or N/month, e.g. 10000/month)", v);
    return 0;
}

int limit_flags_parse(struct cli *c)
{
    note_given(c);
    int r = parse_rates(c);
    if (r == 0)
        r = parse_values(c);
    if (r == 0)
        r = check_rates(c);
    if (r == 0 && c->args.flag[FLAG_ROUTE])
        r = parse_route(c, c->args.flag[FLAG_ROUTE]);
    return r;
}

int parse_route(struct cli *c, const char *v)
{
    const char *p = v;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t m = strcspn(p, " \t");
    const char *prefix = p + m;
    while (*prefix == ' ' || *prefix == '\t')
        prefix++;
    char msg[256];
    if (m == 0 || m >= sizeof(c->route_method) || !*prefix || strlen(prefix) >= sizeof(c->route_prefix))
        return cli_usage_error(&c->args, "invalid route \"%s\" (\"METHOD /prefix\", e.g. \"GET /v1/search\")", v);
    for (size_t i = 0; i < m; i++) {
        char ch = p[i];
        c->route_method[i] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
    }
    c->route_method[m] = '\0';
    snprintf(c->route_prefix, sizeof(c->route_prefix), "%s", prefix);
    if (catalog_check_route(c->route_method, c->route_prefix, msg, sizeof(msg)) != 0)
        return cli_usage_error(&c->args, "%s", msg);
    /* a route the proxy's request targets can never meet is a mistake, not a limit */
    if (tier_route_prefix_check(c->route_prefix, msg, sizeof(msg)) != 0)
        return cli_fail("%s", msg);
    return 0;
}

int limit_flags_check(struct cli *c, bool need_kind)
{
    const struct limit_flags *lf = &c->lf;
    if (need_kind && !lf->n_rates && !lf->concurrency && !lf->ws && !lf->quota)
        return cli_usage_error(&c->args, "give --rate, --concurrency, --ws-messages or --quota");
    if ((lf->burst || lf->algorithm) && !lf->n_rates)
        return cli_usage_error(&c->args, "--burst and --algorithm go with --rate");
    return 0;
}

/* ---- into catalog limits ---- */

int limits_from_flags(const struct cli *c, int64_t plan_id, bool with_route, struct catalog_limit *limits)
{
    const struct limit_flags *lf = &c->lf;
    int n = 0;
    const char *method = with_route && c->args.flag[FLAG_ROUTE] ? c->route_method : NULL;
    const char *prefix = method ? c->route_prefix : NULL;
    for (int i = 0; i < lf->n_rates; i++)
        limits[n++] = (struct catalog_limit){
            .kind = CATALOG_LIMIT_RATE, .algorithm = lf->algorithm ? lf->algorithm_value : LIMIT_SLIDING_LOG,
            .amount = lf->rate_amount[i], .window_ms = lf->rate_window_ms[i],
            .burst = lf->burst ? lf->burst_value : 0,
        };
    if (lf->concurrency)
        limits[n++] = (struct catalog_limit){.kind = CATALOG_LIMIT_CONCURRENCY, .amount = lf->concurrency_value};
    if (lf->ws)
        limits[n++] = (struct catalog_limit){
            .kind = CATALOG_LIMIT_WS_MESSAGES, .amount = lf->ws_amount, .window_ms = lf->ws_window_ms,
        };
    if (lf->quota)
        limits[n++] = (struct catalog_limit){
            .kind = CATALOG_LIMIT_QUOTA, .amount = lf->quota_amount, .period = lf->quota_period,
        };
    for (int i = 0; i < n; i++) {
        limits[i].plan_id = plan_id;
        limits[i].route_method = method;
        limits[i].route_prefix = prefix;
    }
    return n;
}

/* ---- into words ---- */

void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (n + 1 < len)
        vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

const char *kind_word(enum catalog_limit_kind kind)
{
    return kind == CATALOG_LIMIT_RATE ? "rate" : kind == CATALOG_LIMIT_CONCURRENCY ? "concurrency"
         : kind == CATALOG_LIMIT_QUOTA ? "quota" : "ws-messages";
}

void describe_limit(const struct catalog_limit *l, char *buf, size_t len)
{
    char rate[64];
    size_t n = 0;
    switch (l->kind) {
    case CATALOG_LIMIT_RATE:
        n = (size_t)snprintf(buf, len, "%s", limit_rate_format(l->amount, l->window_ms, rate, sizeof(rate)));
        if (l->burst && n < len)
            n += (size_t)snprintf(buf + n, len - n, " burst %" PRId64, l->burst);
        if (l->algorithm != LIMIT_SLIDING_LOG && n < len)
            n += (size_t)snprintf(buf + n, len - n, " %s", limit_kind_name(l->algorithm));
        break;
    case CATALOG_LIMIT_CONCURRENCY:
        n = (size_t)snprintf(buf, len, "concurrency %" PRId64, l->amount);
        break;
    case CATALOG_LIMIT_WS_MESSAGES:
        n = (size_t)snprintf(buf, len, "ws-messages %s", limit_rate_format(l->amount, l->window_ms, rate, sizeof(rate)));
        break;
    case CATALOG_LIMIT_QUOTA:
        n = (size_t)snprintf(buf, len, "quota %s", limit_quota_format(l->amount, l->period, rate, sizeof(rate)));
        break;
    }
    if (l->route_method && n < len)
        snprintf(buf + n, len - n, " on %s %s", l->route_method, l->route_prefix);
}

void describe_value(const struct catalog_limit *l, char *buf, size_t len)
{
    if (l->kind == CATALOG_LIMIT_CONCURRENCY || l->kind == CATALOG_LIMIT_QUOTA) {
        char quota[64];
        if (l->kind == CATALOG_LIMIT_QUOTA)
            snprintf(buf, len, "%s", limit_quota_format(l->amount, l->period, quota, sizeof(quota)));
        else
            snprintf(buf, len, "%" PRId64, l->amount);
        if (l->route_method)
            append(buf, len, " on %s %s", l->route_method, l->route_prefix);
        return;
    }
    struct catalog_limit as_rate = *l;
    as_rate.kind = CATALOG_LIMIT_RATE;   /* ws-messages: the rate alone, no burst or algorithm */
    describe_limit(&as_rate, buf, len);
}

void describe_full(const struct catalog_limit *l, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s ", kind_word(l->kind));
    if (n > 0 && (size_t)n < len)
        describe_value(l, buf + n, len - (size_t)n);
}
