/* tierctl: manages the plans, limits, users and API keys in the catalog.
 *
 * Built like the SQLite shell: `help_table` is the one source of usage text and of what
 * each command accepts; each command is one cmd_* function; `fail` and `usage_error` are
 * the only ways out with an error. Every command runs in one transaction (main): it is
 * committed only when the command succeeded and its output was written, so a failed
 * command changes nothing.
 *
 * Exit status: 0 done, 1 refused or failed (one line on stderr), 2 bad usage (the reason
 * and the usage line on stderr).
 *
 * stdout carries what the command was asked for (a listing, a new key, new limit ids) and
 * nothing else, so that `KEY=$(tierctl key create alice)` captures the key alone. A
 * command that changes the catalog says what it changed in one line on stderr (`note`),
 * written only once the change is committed; reads say nothing there. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <ini.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <sqlite3.h>

#include "store/catalog.h"
#include "store/limit.h"
#include "tiers/apikey.h"
#include "tiers/catalog_json.h"
#include "tiers/catalog_path.h"
#include "store/limiter.h"
#include "store/utf8.h"
#include "tiers/limit_bounds.h"
#include "tiers/plan_rules.h"
#include "tiers/simulate.h"
#include "tiers/snapshot.h"
#include "tiers/table.h"
#include "tiers/tierctl_fleet.h"

#define EXIT_REFUSED 1
#define EXIT_USAGE 2
#define DEFAULT_DB "./plans.db"
#define MAX_POSITIONAL 4
#define USAGE_DEFAULT_CONFIG "/etc/tierproxy/tierproxy.ini"

enum flag {
    FLAG_RATE, FLAG_BURST, FLAG_ALGORITHM, FLAG_CONCURRENCY, FLAG_WS_MESSAGES, FLAG_QUOTA, FLAG_SHADOW,
    FLAG_PRIORITY, FLAG_ROUTE, FLAG_PLAN, FLAG_LABEL, FLAG_JSON, FLAG_REDIS, FLAG_KEY_PREFIX, FLAG_CONFIG,
    FLAG_DB, FLAG_HELP, FLAG_VERSION, FLAG_FORCE,
    N_FLAGS,
};
#define F(name) (1u << FLAG_##name)
#define LIMIT_FLAGS (F(RATE) | F(BURST) | F(ALGORITHM) | F(CONCURRENCY) | F(WS_MESSAGES) | F(QUOTA))
#define MAX_FLAG_LIMITS 4   /* one per kind: rate, concurrency, ws-messages, quota */

enum access { ACCESS_NONE, ACCESS_READ, ACCESS_WRITE, ACCESS_CREATE };

/* LIMIT-FLAGS after parsing. */
struct limit_flags {
    bool rate, burst, algorithm, concurrency, ws, shadow, quota, priority;
    int64_t rate_amount, rate_window_ms, burst_value, concurrency_value, ws_amount, ws_window_ms;
    int64_t quota_amount, priority_value;
    enum limit_period quota_period;
    enum limit_kind algorithm_value;
    bool shadow_value;
};

struct cli {
    const struct help_row *cmd;
    const char *db_path;
    const char *pos[MAX_POSITIONAL];
    int npos;
    const char *flag[N_FLAGS];         /* the value given, "" for a boolean; NULL = absent */
    struct limit_flags lf;
    char route_method[CATALOG_METHOD_MAX + 1];
    char route_prefix[CATALOG_PREFIX_MAX + 1];
    struct catalog *cat;
    char note[1024];                   /* what a change changed; printed after the commit */
};

typedef int command_fn(struct cli *c);

static command_fn cmd_init, cmd_plan_add, cmd_plan_set, cmd_plan_list, cmd_plan_show, cmd_plan_remove,
    cmd_limit_add, cmd_limit_remove, cmd_user_add, cmd_user_set, cmd_user_list, cmd_user_show,
    cmd_user_remove, cmd_key_create, cmd_key_list, cmd_key_revoke, cmd_export, cmd_import;
static command_fn cmd_limit_set, cmd_backup, cmd_simulate;
static command_fn cmd_cost_set, cmd_cost_remove, cmd_user_limit_add, cmd_user_limit_remove, cmd_usage;
static command_fn cmd_publish, cmd_pull, cmd_status;

/* The help table: a row is a command (run != NULL) or a flag. It is the only source of
 * usage text, and of which arguments and flags a command takes. */
struct help_row {
    const char *words;                 /* "plan add", or "--rate" */
    const char *args;                  /* "NAME [LIMIT-FLAGS]", or the flag's value name */
    const char *text;
    command_fn *run;
    int min_pos, max_pos;
    unsigned flags;                    /* flags the command accepts (--db and --help: all) */
    enum access access;
    enum flag flag;                    /* flag rows */
    bool limit_flag;                   /* listed under LIMIT-FLAGS */
};

static const struct help_row help_table[] = {
    {"init", "", "create the schema and the default plans (idempotent)",
     cmd_init, 0, 0, 0, ACCESS_CREATE, 0, 0},
    {"plan add", "NAME [LIMIT-FLAGS] [--priority P]", "add a plan",
     cmd_plan_add, 1, 1, LIMIT_FLAGS | F(SHADOW) | F(PRIORITY), ACCESS_WRITE, 0, 0},
    {"plan set", "NAME [LIMIT-FLAGS] [--priority P]", "replace the plan's route-less limits of the kinds given",
     cmd_plan_set, 1, 1, LIMIT_FLAGS | F(SHADOW) | F(PRIORITY), ACCESS_WRITE, 0, 0},
    {"plan list", "[--json]", "list the plans with their limits and number of users",
     cmd_plan_list, 0, 0, F(JSON), ACCESS_READ, 0, 0},
    {"plan show", "NAME [--json]", "show a plan and its limits",
     cmd_plan_show, 1, 1, F(JSON), ACCESS_READ, 0, 0},
    {"plan remove", "NAME", "remove a plan; refused while users are on it",
     cmd_plan_remove, 1, 1, 0, ACCESS_WRITE, 0, 0},
    {"limit add", "PLAN LIMIT-FLAGS [--route \"METHOD /prefix\"]",
     "add limits, per route with --route (\"* /prefix\" = any method); prints the new limit ids",
     cmd_limit_add, 1, 1, LIMIT_FLAGS | F(ROUTE), ACCESS_WRITE, 0, 0},
    {"limit set", "PLAN LIMIT-ID LIMIT-FLAGS",
     "change one limit in place; it keeps its id and its counts (a new algorithm starts afresh)",
     cmd_limit_set, 2, 2, LIMIT_FLAGS, ACCESS_WRITE, 0, 0},
    {"limit remove", "PLAN LIMIT-ID", "remove a limit",
     cmd_limit_remove, 2, 2, 0, ACCESS_WRITE, 0, 0},
    {"cost set", "PLAN \"METHOD /prefix\" N",
     "requests on that route count N against every rate limit and quota of the plan (longest prefix wins)",
     cmd_cost_set, 3, 3, 0, ACCESS_WRITE, 0, 0},
    {"cost remove", "PLAN \"METHOD /prefix\"", "requests on that route count 1 again",
     cmd_cost_remove, 2, 2, 0, ACCESS_WRITE, 0, 0},
    {"user add", "ID --plan NAME", "add a user on a plan",
     cmd_user_add, 1, 1, F(PLAN), ACCESS_WRITE, 0, 0},
    {"user set", "ID --plan NAME", "move a user to another plan",
     cmd_user_set, 1, 1, F(PLAN), ACCESS_WRITE, 0, 0},
    {"user list", "[--plan NAME] [--json]", "list the users, or those on one plan",
     cmd_user_list, 0, 0, F(PLAN) | F(JSON), ACCESS_READ, 0, 0},
    {"user show", "ID [--json]", "show a user and their keys",
     cmd_user_show, 1, 1, F(JSON), ACCESS_READ, 0, 0},
    {"user remove", "ID", "remove a user; also revokes the user's keys",
     cmd_user_remove, 1, 1, 0, ACCESS_WRITE, 0, 0},
    {"user limit add", "USER LIMIT-FLAGS [--route \"METHOD /prefix\"]",
     "the user's own limits; each replaces the plan's limits of its kind on the same route, "
     "their count carried over; prints the ids",
     cmd_user_limit_add, 1, 1, LIMIT_FLAGS | F(ROUTE), ACCESS_WRITE, 0, 0},
    {"user limit remove", "USER LIMIT-ID", "remove one of the user's own limits",
     cmd_user_limit_remove, 2, 2, 0, ACCESS_WRITE, 0, 0},
    {"usage", "USER [--json] [--config FILE | --redis URL [--key-prefix P]]",
     "the user's standing on each limit (used, remaining, reset), read from the proxies' Redis store",
     cmd_usage, 1, 1, F(JSON) | F(REDIS) | F(KEY_PREFIX) | F(CONFIG), ACCESS_NONE, 0, 0},
    {"key create", "USER [--label TEXT] [--json]", "print a new key alone on one line; it is never shown again",
     cmd_key_create, 1, 1, F(LABEL) | F(JSON), ACCESS_WRITE, 0, 0},
    {"key list", "[USER] [--json]", "key id, user, label, created, revoked; never the key itself",
     cmd_key_list, 0, 1, F(JSON), ACCESS_READ, 0, 0},
    {"key revoke", "KEY-ID", "revoke a key",
     cmd_key_revoke, 1, 1, 0, ACCESS_WRITE, 0, 0},
    {"export", "[FILE]", "write the whole catalog as JSON (keys as hashes) to FILE or stdout",
     cmd_export, 0, 1, 0, ACCESS_READ, 0, 0},
    {"backup", "FILE", "write a consistent copy of the live catalog to a new FILE (mode 0600; never overwrites)",
     cmd_backup, 1, 1, 0, ACCESS_READ, 0, 0},
    {"import", "FILE", "replace the whole catalog with FILE (- = stdin); all or nothing, ids kept",
     cmd_import, 1, 1, 0, ACCESS_CREATE, 0, 0},
    {"publish", "[--force]", "publish the local catalog to the fleet (refused when the fleet's changed since this "
     "file last published or pulled, unless --force)", cmd_publish, 0, 0, F(FORCE), ACCESS_NONE, 0, 0},
    {"pull", "", "replace the local catalog by the fleet's", cmd_pull, 0, 0, 0, ACCESS_NONE, 0, 0},
    {"status", "[--json]", "local and published versions, proxies following", cmd_status, 0, 0, F(JSON),
     ACCESS_NONE, 0, 0},
    {"simulate", "LOG [--plan NAME | LIMIT-FLAGS] [--json]",
     "replay an access log against each user's plan, one plan, or the limits given: the requests and "
     "users they would reject; changes nothing",
     cmd_simulate, 1, 1, F(PLAN) | F(RATE) | F(BURST) | F(ALGORITHM) | F(CONCURRENCY) | F(JSON), ACCESS_NONE, 0, 0},

    {"--rate", "N/WINDOW", "WINDOW: s, min, h, day, or a count with a unit: 10/15s, 3000/1min",
     NULL, 0, 0, 0, 0, FLAG_RATE, true},
    {"--burst", "N", "extra requests allowed on top of the rate (sliding-log: limit + burst in the window)",
     NULL, 0, 0, 0, 0, FLAG_BURST, true},
    {"--algorithm", "A", "sliding-log (default, exact) | sliding-window | token-bucket | fixed-window",
     NULL, 0, 0, 0, 0, FLAG_ALGORITHM, true},
    {"--concurrency", "N", "at most N requests in flight and WebSocket connections open at once",
     NULL, 0, 0, 0, 0, FLAG_CONCURRENCY, true},
    {"--ws-messages", "N/WINDOW", "client-to-upstream WebSocket messages per connection",
     NULL, 0, 0, 0, 0, FLAG_WS_MESSAGES, true},
    {"--quota", "N/PERIOD", "PERIOD: day | week | month, calendar periods in UTC (weeks start on Monday)",
     NULL, 0, 0, 0, 0, FLAG_QUOTA, true},
    {"--shadow", "on|off", "(plan add/set) count and report, but never reject",
     NULL, 0, 0, 0, 0, FLAG_SHADOW, true},
    {"--priority", "P", "(plan add/set) 0 (shed first) .. 9 (shed last); default 5",
     NULL, 0, 0, 0, 0, FLAG_PRIORITY, false},
    {"--route", "\"METHOD /prefix\"", "(limit add, user limit add) a per-route limit; the longest matching prefix applies",
     NULL, 0, 0, 0, 0, FLAG_ROUTE, false},
    {"--plan", "NAME", "(user add/set/list, simulate) the plan", NULL, 0, 0, 0, 0, FLAG_PLAN, false},
    {"--label", "TEXT", "(key create) a note to tell keys apart", NULL, 0, 0, 0, 0, FLAG_LABEL, false},
    {"--json", NULL, "(list, show, key create, usage) print JSON", NULL, 0, 0, 0, 0, FLAG_JSON, false},
    {"--config", "FILE", "the proxy's INI file: the fleet's Redis ([limits] redis, redis_mode, key_prefix) and"
     " [plans] follow (redis: every change is also published); default $TIERPROXY_CONFIG, else "
     USAGE_DEFAULT_CONFIG, NULL, 0, 0, 0, 0, FLAG_CONFIG, false},
    {"--force", NULL, "(publish) publish even when the fleet's catalog changed since", NULL, 0, 0, 0, 0, FLAG_FORCE,
     false},
    {"--redis", "URL", "(usage) the proxies' Redis, instead of the INI file's", NULL, 0, 0, 0, 0, FLAG_REDIS, false},
    {"--key-prefix", "P", "(usage) the proxies' [limits] key_prefix (default tierproxy:)",
     NULL, 0, 0, 0, 0, FLAG_KEY_PREFIX, false},
    {"--db", "PATH", "the catalog; default $TIERPROXY_PLANS_DB, else $TIERPROXY_DB, else [plans] db of --config FILE,"
     " else " DEFAULT_DB, NULL, 0, 0, 0, 0, FLAG_DB, false},
    {"--help", NULL, "print this help", NULL, 0, 0, 0, 0, FLAG_HELP, false},
    {"--version", NULL, "print the version", NULL, 0, 0, 0, 0, FLAG_VERSION, false},
};
#define N_ROWS (sizeof(help_table) / sizeof(help_table[0]))

/* ---- errors and help ---- */

/* Writes "tierctl: REASON" as one line of UTF-8 text: what it quotes from the command line
 * or the catalog may hold control characters or bytes that are not UTF-8 (each becomes '?'). */
static void say(const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof(line), fmt, ap);
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    utf8_repair(line, strlen(line));
    fprintf(stderr, "tierctl: %s\n", line);
}

/* The one error helper: one line on stderr; returns the refused exit status. */
__attribute__((format(printf, 1, 2)))
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    return EXIT_REFUSED;
}

/* Records the one line a change prints on stderr once it is committed. */
__attribute__((format(printf, 2, 3)))
static void note(struct cli *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->note, sizeof(c->note), fmt, ap);
    va_end(ap);
}

static void print_usage_line(FILE *f, const struct help_row *cmd)
{
    if (cmd)
        fprintf(f, "usage: tierctl [--db PATH] %s%s%s\n", cmd->words, cmd->args[0] ? " " : "", cmd->args);
    else
        fprintf(f, "usage: tierctl [--db PATH] COMMAND ...   (tierctl --help lists the commands)\n");
}

/* Bad usage: the reason and the command's usage line; returns the usage exit status. */
__attribute__((format(printf, 2, 3)))
static int usage_error(const struct help_row *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    print_usage_line(stderr, cmd);
    return EXIT_USAGE;
}

static void print_help(FILE *f)
{
    fprintf(f, "usage: tierctl [--db PATH] COMMAND ...        PATH defaults to $TIERPROXY_PLANS_DB, else "
            "$TIERPROXY_DB, else [plans] db of --config FILE, else %s\n", DEFAULT_DB);
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1)
            fprintf(f, "LIMIT-FLAGS:\n");
        else if (pass == 2)
            fprintf(f, "OTHER FLAGS:\n");
        for (size_t i = 0; i < N_ROWS; i++) {
            const struct help_row *row = &help_table[i];
            bool is_cmd = row->run != NULL;
            if ((pass == 0) != is_cmd || (!is_cmd && (pass == 1) != row->limit_flag))
                continue;
            char left[96];
            snprintf(left, sizeof(left), "%s%s%s", row->words, row->args && row->args[0] ? " " : "",
                     row->args ? row->args : "");
            int width = is_cmd ? 36 : 24;
            if ((int)strlen(left) <= width)
                fprintf(f, "  %-*s %s\n", width, left, row->text);
            else
                fprintf(f, "  %s\n  %-*s %s\n", left, width, "", row->text);
        }
    }
    fprintf(f, "A command that changes the catalog says what it changed in one line on stderr.\n"
               "Exit status: 0 done, 1 refused or failed, 2 bad usage.\n");
}

static const struct help_row *flag_row(const char *name, size_t len)
{
    for (size_t i = 0; i < N_ROWS; i++) {
        const struct help_row *row = &help_table[i];
        if (!row->run && strlen(row->words) == len && strncmp(row->words, name, len) == 0)
            return row;
    }
    return NULL;
}

/* ---- argument parsing ---- */

static int parse_int(const char *text, int64_t min, int64_t max, int64_t *pv)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max || !(text[0] >= '0' && text[0] <= '9'))
        return -EINVAL;
    *pv = v;
    return 0;
}

static int parse_route(struct cli *c, const char *v);

/* Parses and checks the LIMIT-FLAGS and --route; pure, before the catalog is opened. */
static int parse_limit_flags(struct cli *c)
{
    struct limit_flags *lf = &c->lf;
    const char *v;
    if ((v = c->flag[FLAG_RATE])) {
        lf->rate = true;
        if (limit_rate_parse(v, &lf->rate_amount, &lf->rate_window_ms) != 0)
            return usage_error(c->cmd, "invalid rate \"%s\" (N/WINDOW, e.g. 100/min or 10/15s)", v);
    }
    if ((v = c->flag[FLAG_BURST])) {
        lf->burst = true;
        if (parse_int(v, 0, LIMIT_MAX_PRODUCT, &lf->burst_value) != 0)
            return usage_error(c->cmd, "invalid burst \"%s\" (a whole number, 0 or more)", v);
    }
    if ((v = c->flag[FLAG_ALGORITHM])) {
        lf->algorithm = true;
        if (limit_kind_parse(v, &lf->algorithm_value) != 0)
            return usage_error(c->cmd, "unknown algorithm \"%s\" (sliding-log, sliding-window, "
                               "token-bucket, fixed-window)", v);
    }
    if ((v = c->flag[FLAG_CONCURRENCY])) {
        lf->concurrency = true;
        if (parse_int(v, 1, CATALOG_MAX_CONCURRENCY, &lf->concurrency_value) != 0)
            return usage_error(c->cmd, "invalid concurrency \"%s\" (1 to %d)", v, CATALOG_MAX_CONCURRENCY);
    }
    if ((v = c->flag[FLAG_WS_MESSAGES])) {
        lf->ws = true;
        if (limit_rate_parse(v, &lf->ws_amount, &lf->ws_window_ms) != 0)
            return usage_error(c->cmd, "invalid --ws-messages \"%s\" (N/WINDOW, e.g. 10/s)", v);
    }
    if ((v = c->flag[FLAG_QUOTA])) {
        lf->quota = true;
        if (limit_quota_parse(v, &lf->quota_amount, &lf->quota_period) != 0)
            return usage_error(c->cmd, "invalid quota \"%s\" (N/day, N/week or N/month, e.g. 10000/month)", v);
    }
    if ((v = c->flag[FLAG_PRIORITY])) {
        lf->priority = true;
        if (parse_int(v, CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX, &lf->priority_value) != 0)
            return usage_error(c->cmd, "invalid priority \"%s\" (%d, shed first, to %d, shed last)", v,
                               CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
    }
    if ((v = c->flag[FLAG_SHADOW])) {
        lf->shadow = true;
        if (strcmp(v, "on") == 0)
            lf->shadow_value = true;
        else if (strcmp(v, "off") == 0)
            lf->shadow_value = false;
        else
            return usage_error(c->cmd, "--shadow is on or off, not \"%s\"", v);
    }
    if (lf->rate) {
        struct limit_rule rule = {
            .kind = lf->algorithm ? lf->algorithm_value : LIMIT_SLIDING_LOG,
            .rate = lf->rate_amount, .burst = lf->burst ? lf->burst_value : 0,
            .window_ms = lf->rate_window_ms,
        };
        if (limit_rule_validate(&rule) != 0)
            return usage_error(c->cmd, "rate %s with burst %" PRId64 " is out of range", c->flag[FLAG_RATE],
                               rule.burst);
    }
    if ((v = c->flag[FLAG_ROUTE]))
        return parse_route(c, v);
    return 0;
}

/* Parses "METHOD /prefix" (--route, or a cost's route) into c->route_method and
 * c->route_prefix: the method is upper-cased; "*" = any method. */
static int parse_route(struct cli *c, const char *v)
{
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
            return usage_error(c->cmd, "invalid route \"%s\" (\"METHOD /prefix\", e.g. \"GET /v1/search\")", v);
        for (size_t i = 0; i < m; i++) {
            char ch = p[i];
            c->route_method[i] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
        }
        c->route_method[m] = '\0';
        snprintf(c->route_prefix, sizeof(c->route_prefix), "%s", prefix);
        if (catalog_check_route(c->route_method, c->route_prefix, msg, sizeof(msg)) != 0)
            return usage_error(c->cmd, "%s", msg);
        /* a route the proxy's request targets can never meet is a mistake, not a limit */
        if (tier_route_prefix_check(c->route_prefix, msg, sizeof(msg)) != 0)
            return fail("%s", msg);
    }
    return 0;
}

/* Splits argv into the command, its positional arguments and its flags. Returns 0 (with
 * *phelp set when the general help was asked for, c->flag[FLAG_VERSION] for --version),
 * -1 when COMMAND --help was printed, or the exit status of a usage error already
 * reported. */
static int parse_args(int argc, char **argv, struct cli *c, bool *phelp)
{
    int i = 1;
    /* Global flags before the command. */
    while (i < argc && argv[i][0] == '-' && argv[i][1]) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *phelp = true;
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            c->flag[FLAG_VERSION] = "";
            return 0;
        } else if (strcmp(argv[i], "--db") == 0) {
            if (i + 1 >= argc)
                return usage_error(NULL, "--db needs a PATH");
            c->flag[FLAG_DB] = argv[i + 1];
            i += 2;
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            c->flag[FLAG_DB] = argv[i] + 5;
            i++;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            c->flag[FLAG_CONFIG] = argv[i + 1];
            i += 2;
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            c->flag[FLAG_CONFIG] = argv[i] + 9;
            i++;
        } else {
            return usage_error(NULL, "unknown option \"%s\"", argv[i]);
        }
    }
    if (i >= argc)
        return usage_error(NULL, "no command given");
    if (strcmp(argv[i], "help") == 0) {
        *phelp = true;
        return 0;
    }
    /* The command: one word, or a group and a word ("plan add"). */
    bool group_known = false;
    for (size_t k = 0; k < N_ROWS && !c->cmd; k++) {
        const struct help_row *row = &help_table[k];
        if (!row->run)
            continue;
        const char *space = strchr(row->words, ' ');
        size_t first = space ? (size_t)(space - row->words) : strlen(row->words);
        if (strlen(argv[i]) != first || strncmp(argv[i], row->words, first) != 0)
            continue;
        group_known = true;
        if (!space) {
            c->cmd = row;
            continue;
        }
        /* the rest of the words ("add", or "limit add"), one argument each */
        const char *w = space + 1;
        int at = i + 1;
        bool match = true;
        while (*w && match) {
            size_t len = strcspn(w, " ");
            match = at < argc && strlen(argv[at]) == len && strncmp(argv[at], w, len) == 0;
            w += len + (w[len] == ' ');
            at++;
        }
        if (match)
            c->cmd = row;
    }
    if (!c->cmd) {
        if (!group_known)
            return usage_error(NULL, "unknown command \"%s\"", argv[i]);
        char list[128] = "";
        for (size_t k = 0; k < N_ROWS; k++) {
            const char *w = help_table[k].words;
            size_t n = strlen(argv[i]);
            if (help_table[k].run && strncmp(w, argv[i], n) == 0 && w[n] == ' ')
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", list[0] ? "|" : "", w + n + 1);
        }
        (void)fail("%s %s", i + 1 < argc ? "unknown subcommand" : "missing subcommand for",
                   i + 1 < argc ? argv[i + 1] : argv[i]);   /* the reason; the status is usage's */
        fprintf(stderr, "usage: tierctl [--db PATH] %s %s ...\n", argv[i], list);
        return EXIT_USAGE;
    }
    for (const char *w = c->cmd->words; w; w = strchr(w + 1, ' '))
        i++;

    /* Positional arguments and flags, in any order; "--" ends the flags. */
    bool flags_done = false;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!flags_done && strcmp(a, "--") == 0) {
            flags_done = true;
            continue;
        }
        if (!flags_done && a[0] == '-' && a[1]) {
            if (a[1] != '-')
                return usage_error(c->cmd, "unknown option \"%s\"", a);
            const char *eq = strchr(a, '=');
            const struct help_row *fr = flag_row(a, eq ? (size_t)(eq - a) : strlen(a));
            if (!fr)
                return usage_error(c->cmd, "unknown option \"%.*s\"", eq ? (int)(eq - a) : (int)strlen(a), a);
            if (fr->flag == FLAG_HELP) {
                print_usage_line(stdout, c->cmd);
                printf("  %s\n", c->cmd->text);
                *phelp = false;
                return -1;
            }
            bool global = fr->flag == FLAG_DB || fr->flag == FLAG_CONFIG;
            if (!global && !(c->cmd->flags & (1u << fr->flag)))
                return usage_error(c->cmd, "%s does not take %s", c->cmd->words, fr->words);
            if (c->flag[fr->flag] && !global)
                return usage_error(c->cmd, "%s given twice", fr->words);
            const char *value;
            if (!fr->args) {
                if (eq)
                    return usage_error(c->cmd, "%s takes no value", fr->words);
                value = "";
            } else if (eq) {
                value = eq + 1;
            } else {
                if (i + 1 >= argc)
                    return usage_error(c->cmd, "%s needs a value (%s)", fr->words, fr->args);
                value = argv[++i];
            }
            c->flag[fr->flag] = value;
            continue;
        }
        if (c->npos >= c->cmd->max_pos)
            return usage_error(c->cmd, "unexpected argument \"%s\"", a);
        c->pos[c->npos++] = a;
    }
    if (c->npos < c->cmd->min_pos)
        return usage_error(c->cmd, "missing arguments");
    return parse_limit_flags(c);
}

/* ---- output helpers ---- */

static int print_json(json_t *doc)
{
    if (!doc)
        return fail("out of memory");
    int r = json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    putchar('\n');
    return r ? fail("cannot write output") : 0;
}

/* "100/min", "100/min burst 10 token-bucket", "concurrency 10", "ws-messages 10/s",
 * each followed by " on GET /v1" for a route. */
static void describe_limit(const struct catalog_limit *l, char *buf, size_t len)
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

static int catalog_failed(struct cli *c)
{
    return fail("%s", catalog_errmsg(c->cat));
}

/* Writes a changed limit in place (same id). Returns 0, or the exit status after saying why
 * (a rate and burst the catalog cannot hold are refused by name). */
static int update_limit(struct cli *c, const struct catalog_limit *l)
{
    int r = catalog_limit_update(c->cat, l);
    if (r == CATALOG_INVALID) {
        char rate[64];
        return fail("rate %s with burst %" PRId64 " is out of range",
                    limit_rate_format(l->amount, l->window_ms, rate, sizeof(rate)), l->burst);
    }
    return r ? catalog_failed(c) : 0;
}

/* ---- what a change line says ---- */

/* Appends to a note being built; a note longer than buf is cut, never overrun. */
__attribute__((format(printf, 3, 4)))
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
}

static const char *kind_word(enum catalog_limit_kind kind)
{
    return kind == CATALOG_LIMIT_RATE ? "rate" : kind == CATALOG_LIMIT_CONCURRENCY ? "concurrency"
         : kind == CATALOG_LIMIT_QUOTA ? "quota" : "ws-messages";
}

/* A limit's numbers without its kind: "3/10s", "100/min burst 10 token-bucket", "10" (a
 * concurrency), each followed by " on GET /v1" for a route. */
static void describe_value(const struct catalog_limit *l, char *buf, size_t len)
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

/* "rate 3/10s", "concurrency 10", "ws-messages 10/s on GET /v1". */
static void describe_full(const struct catalog_limit *l, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s ", kind_word(l->kind));
    if (n > 0 && (size_t)n < len)
        describe_value(l, buf + n, len - (size_t)n);
}

/* ---- limits read back for a change ---- */

/* A limit as read, with its route copied (the catalog's strings last only for the
 * callback). */
struct limit_copy {
    struct catalog_limit l;
    char method[CATALOG_METHOD_MAX + 1];
    char prefix[CATALOG_PREFIX_MAX + 1];
};

#define MAX_PLAN_LIMITS 64

/* Which limits of a plan collect_limits keeps, and where. */
struct limit_pick {
    int kind;                          /* an enum catalog_limit_kind, or -1 = any */
    bool routeless_only;
    int64_t id;                        /* 0 = any */
    struct limit_copy *items;          /* MAX_PLAN_LIMITS of them */
    size_t n;
};

static int pick_limit(void *ctx, const struct catalog_limit *l)
{
    struct limit_pick *pick = ctx;
    if ((pick->kind >= 0 && (int)l->kind != pick->kind) || (pick->routeless_only && l->route_method) ||
        (pick->id && l->id != pick->id))
        return 0;
    if (pick->n == MAX_PLAN_LIMITS)
        return -E2BIG;
    struct limit_copy *copy = &pick->items[pick->n++];
    copy->l = *l;
    if (l->route_method) {
        snprintf(copy->method, sizeof(copy->method), "%s", l->route_method);
        snprintf(copy->prefix, sizeof(copy->prefix), "%s", l->route_prefix);
        copy->l.route_method = copy->method;
        copy->l.route_prefix = copy->prefix;
    }
    return 0;
}

/* Fills pick with the plan's limits it asks for, in id order. Returns 0 or an exit status
 * already reported. */
static int collect_limits(struct cli *c, const char *plan_name, int64_t plan_id, struct limit_pick *pick)
{
    pick->n = 0;
    int r = catalog_limit_each(c->cat, plan_id, pick_limit, pick);
    if (r == -E2BIG)
        return fail("plan \"%s\" has more than %d limits of that kind", plan_name, MAX_PLAN_LIMITS);
    return r ? catalog_failed(c) : 0;
}

/* ---- init ---- */

static int cmd_init(struct cli *c)
{
    static const struct { const char *name; int64_t rate; } defaults[] = {
        {"free", 100}, {"starter", 3000}, {"pro", 20000},
    };
    char created[64] = "";
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
        int64_t plan_id;
        int r = catalog_plan_find(c->cat, defaults[i].name, &plan_id, NULL);
        if (r == 0)
            continue;   /* exists: left as the operator made it */
        if (r != CATALOG_NOT_FOUND)
            return catalog_failed(c);
        struct catalog_plan plan = {.name = defaults[i].name, .priority = CATALOG_PRIORITY_DEFAULT};
        struct catalog_limit rate = {
            .kind = CATALOG_LIMIT_RATE, .algorithm = LIMIT_SLIDING_LOG,
            .amount = defaults[i].rate, .window_ms = 60000,
        };
        struct catalog_limit concurrency = {.kind = CATALOG_LIMIT_CONCURRENCY, .amount = 10};
        if (catalog_plan_add(c->cat, &plan, &plan_id))
            return catalog_failed(c);
        rate.plan_id = concurrency.plan_id = plan_id;
        if (catalog_limit_add(c->cat, &rate, NULL) || catalog_limit_add(c->cat, &concurrency, NULL))
            return catalog_failed(c);
        append(created, sizeof(created), "%s%s", created[0] ? ", " : "", defaults[i].name);
    }
    if (created[0])
        note(c, "catalog %s: created plans %s", c->db_path, created);
    else
        note(c, "catalog %s: the default plans exist; nothing changed", c->db_path);
    return 0;
}

/* ---- plans ---- */

/* The limits the LIMIT-FLAGS ask for, route-less or (with_route) on --route, in the
 * order rate, concurrency, ws-messages; at most 3. Burst and algorithm default to 0 and
 * sliding-log. */
static int flag_limits(struct cli *c, int64_t plan_id, bool with_route, struct catalog_limit *limits)
{
    const struct limit_flags *lf = &c->lf;
    int n = 0;
    const char *method = with_route && c->flag[FLAG_ROUTE] ? c->route_method : NULL;
    const char *prefix = method ? c->route_prefix : NULL;
    if (lf->rate)
        limits[n++] = (struct catalog_limit){
            .plan_id = plan_id, .kind = CATALOG_LIMIT_RATE,
            .algorithm = lf->algorithm ? lf->algorithm_value : LIMIT_SLIDING_LOG,
            .amount = lf->rate_amount, .window_ms = lf->rate_window_ms,
            .burst = lf->burst ? lf->burst_value : 0,
            .route_method = method, .route_prefix = prefix,
        };
    if (lf->concurrency)
        limits[n++] = (struct catalog_limit){
            .plan_id = plan_id, .kind = CATALOG_LIMIT_CONCURRENCY, .amount = lf->concurrency_value,
            .route_method = method, .route_prefix = prefix,
        };
    if (lf->ws)
        limits[n++] = (struct catalog_limit){
            .plan_id = plan_id, .kind = CATALOG_LIMIT_WS_MESSAGES, .amount = lf->ws_amount,
            .window_ms = lf->ws_window_ms, .route_method = method, .route_prefix = prefix,
        };
    if (lf->quota)
        limits[n++] = (struct catalog_limit){
            .plan_id = plan_id, .kind = CATALOG_LIMIT_QUOTA, .amount = lf->quota_amount,
            .period = lf->quota_period, .route_method = method, .route_prefix = prefix,
        };
    return n;
}

/* Adds the limits the LIMIT-FLAGS ask for; limits (MAX_FLAG_LIMITS) receives them with their new ids. */
static int add_flag_limits(struct cli *c, int64_t plan_id, bool with_route, struct catalog_limit *limits, int *pn)
{
    int n = flag_limits(c, plan_id, with_route, limits);
    for (int i = 0; i < n; i++) {
        if (catalog_limit_add(c->cat, &limits[i], &limits[i].id))
            return catalog_failed(c);
    }
    *pn = n;
    return 0;
}

static int check_plan_name(struct cli *c, const char *name)
{
    char msg[256];
    if (catalog_check_plan_name(name, msg, sizeof(msg)))
        return usage_error(c->cmd, "%s", msg);
    return 0;
}

static int cmd_plan_add(struct cli *c)
{
    const char *name = c->pos[0];
    int r = check_plan_name(c, name);
    if (r)
        return r;
    if ((c->lf.burst || c->lf.algorithm) && !c->lf.rate)
        return usage_error(c->cmd, "--burst and --algorithm go with --rate");
    struct catalog_plan plan = {
        .name = name, .shadow = c->lf.shadow && c->lf.shadow_value,
        .priority = c->lf.priority ? (int)c->lf.priority_value : CATALOG_PRIORITY_DEFAULT,
    };
    int64_t plan_id;
    if (catalog_plan_add(c->cat, &plan, &plan_id))
        return catalog_failed(c);
    struct catalog_limit limits[MAX_FLAG_LIMITS];
    int n = 0;
    r = add_flag_limits(c, plan_id, false, limits, &n);
    if (r)
        return r;
    char text[512] = "";
    for (int i = 0; i < n; i++) {
        char one[CATALOG_PREFIX_MAX + 128];
        describe_full(&limits[i], one, sizeof(one));
        append(text, sizeof(text), "%s%s", i ? ", " : "", one);
    }
    note(c, "plan %s: added with %s%s, priority %d", name, n ? text : "no limits", plan.shadow ? ", shadow on" : "",
         plan.priority);
    return 0;
}

/* Appends "ids 7, 8" or "id 7" style lists: " (limit 7 kept; 8 removed)". */
static void append_ids(char *buf, size_t len, const char *what, const int64_t *ids, size_t n, bool *first)
{
    if (n == 0)
        return;
    append(buf, len, "%s", *first ? " (" : "; ");
    *first = false;
    for (size_t i = 0; i < n; i++)
        append(buf, len, "%s%" PRId64, i ? ", " : (n > 1 ? "limits " : "limit "), ids[i]);
    append(buf, len, " %s", what);
}

/* plan set for one kind: the plan's route-less limits of want's kind become want. The one
 * that survives keeps its id, and so the users' counts: the first with want's window, else
 * the first. The others are removed; with none, want is added. Appends to text what it
 * replaced: "rate 3/10s, 100/day -> 5/s (limit 7 kept; 8 removed)". */
static int replace_routeless(struct cli *c, const char *plan_name, struct catalog_limit want, char *text,
                             size_t len)
{
    struct limit_copy items[MAX_PLAN_LIMITS];
    struct limit_pick pick = {.kind = (int)want.kind, .routeless_only = true, .items = items};
    int r = collect_limits(c, plan_name, want.plan_id, &pick);
    if (r)
        return r;
    size_t keep = 0;
    for (size_t i = 0; i < pick.n; i++) {
        if (items[i].l.window_ms == want.window_ms && items[i].l.period == want.period) {
            keep = i;
            break;
        }
    }
    int64_t kept[1], removed[MAX_PLAN_LIMITS], added[1];
    size_t nkept = 0, nremoved = 0, nadded = 0;
    if (pick.n > 0) {
        want.id = items[keep].l.id;
        if ((r = update_limit(c, &want)) != 0)
            return r;
        kept[nkept++] = want.id;
        for (size_t i = 0; i < pick.n; i++) {
            if (i != keep) {
                if (catalog_limit_remove(c->cat, want.plan_id, items[i].l.id))
                    return catalog_failed(c);
                removed[nremoved++] = items[i].l.id;
            }
        }
    } else {
        want.id = 0;
        if (catalog_limit_add(c->cat, &want, &want.id))
            return catalog_failed(c);
        added[nadded++] = want.id;
    }
    char value[CATALOG_PREFIX_MAX + 96];
    append(text, len, "%s%s ", text[0] ? "; " : "", kind_word(want.kind));
    for (size_t i = 0; i < pick.n; i++) {
        describe_value(&items[i].l, value, sizeof(value));
        append(text, len, "%s%s", i ? ", " : "", value);
    }
    describe_value(&want, value, sizeof(value));
    append(text, len, "%s -> %s", pick.n ? "" : "none", value);
    bool first = true;
    append_ids(text, len, "kept", kept, nkept, &first);
    append_ids(text, len, "removed", removed, nremoved, &first);
    append_ids(text, len, "added", added, nadded, &first);
    if (!first)
        append(text, len, ")");
    return 0;
}

/* plan set --burst/--algorithm without --rate: every route-less rate limit of the plan
 * takes the new burst/algorithm in place, keeping its id. */
static int change_routeless_rates(struct cli *c, const char *plan_name, int64_t plan_id, char *text, size_t len)
{
    const struct limit_flags *lf = &c->lf;
    struct limit_copy items[MAX_PLAN_LIMITS];
    struct limit_pick pick = {.kind = CATALOG_LIMIT_RATE, .routeless_only = true, .items = items};
    int r = collect_limits(c, plan_name, plan_id, &pick);
    if (r)
        return r;
    if (pick.n == 0)
        return fail("plan \"%s\" has no plan-wide rate limit to change: give --rate", plan_name);
    char value[CATALOG_PREFIX_MAX + 96];
    append(text, len, "%srate ", text[0] ? "; " : "");
    for (size_t i = 0; i < pick.n; i++) {
        describe_value(&items[i].l, value, sizeof(value));
        append(text, len, "%s%s", i ? ", " : "", value);
    }
    append(text, len, " -> ");
    int64_t ids[MAX_PLAN_LIMITS];
    for (size_t i = 0; i < pick.n; i++) {
        struct catalog_limit l = items[i].l;
        if (lf->burst)
            l.burst = lf->burst_value;
        if (lf->algorithm)
            l.algorithm = lf->algorithm_value;
        if ((r = update_limit(c, &l)) != 0)
            return r;
        describe_value(&l, value, sizeof(value));
        append(text, len, "%s%s", i ? ", " : "", value);
        ids[i] = l.id;
    }
    bool first = true;
    append_ids(text, len, "kept", ids, pick.n, &first);
    append(text, len, ")");
    return 0;
}

static int cmd_plan_set(struct cli *c)
{
    const char *name = c->pos[0];
    struct limit_flags *lf = &c->lf;
    if (!lf->rate && !lf->burst && !lf->algorithm && !lf->concurrency && !lf->ws && !lf->shadow && !lf->quota &&
        !lf->priority)
        return usage_error(c->cmd, "nothing to set: give LIMIT-FLAGS, --shadow or --priority");
    int64_t plan_id;
    bool shadow;
    if (catalog_plan_find(c->cat, name, &plan_id, &shadow))
        return catalog_failed(c);
    char text[sizeof(c->note)] = "";
    int r = 0;
    if (!lf->rate && (lf->burst || lf->algorithm))
        r = change_routeless_rates(c, name, plan_id, text, sizeof(text));
    struct catalog_limit want[MAX_FLAG_LIMITS];
    int n = flag_limits(c, plan_id, false, want);
    for (int i = 0; r == 0 && i < n; i++)
        r = replace_routeless(c, name, want[i], text, sizeof(text));
    if (r)
        return r;
    if (lf->shadow) {
        if (catalog_plan_set_shadow(c->cat, plan_id, lf->shadow_value))
            return catalog_failed(c);
        append(text, sizeof(text), "%sshadow %s -> %s", text[0] ? "; " : "", shadow ? "on" : "off",
               lf->shadow_value ? "on" : "off");
    }
    if (lf->priority) {
        int old = 0;
        if (catalog_plan_priority(c->cat, plan_id, &old) ||
            catalog_plan_set_priority(c->cat, plan_id, (int)lf->priority_value))
            return catalog_failed(c);
        append(text, sizeof(text), "%spriority %d -> %d", text[0] ? "; " : "", old, (int)lf->priority_value);
    }
    note(c, "plan %s: %s", name, text);
    return 0;
}

/* A plan as JSON for list/show: its export form plus the number of users. */
struct plan_view {
    json_t *array;                     /* JSON output: plans collected here */
    struct table *table;               /* text output */
    struct catalog *cat;
};

static int collect_limit_json(void *ctx, const struct catalog_limit *l)
{
    json_t *o = catalog_json_limit(l);
    if (!o || json_array_append_new(ctx, o))
        return -ENOMEM;
    return 0;
}

struct summary {
    char text[1024];
};

static int collect_limit_summary(void *ctx, const struct catalog_limit *l)
{
    struct summary *s = ctx;
    char one[CATALOG_PREFIX_MAX + 96];
    describe_limit(l, one, sizeof(one));
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof(s->text) - n, "%s%s", n ? "; " : "", one);
    return 0;
}

static int collect_cost_json(void *ctx, const struct catalog_cost *cost)
{
    json_t *o = catalog_json_cost(cost);
    if (!o || json_array_append_new(ctx, o))
        return -ENOMEM;
    return 0;
}

static json_t *plan_json(struct catalog *cat, const struct catalog_plan *plan)
{
    int64_t users = 0;
    json_t *o = json_pack("{s:I, s:o, s:b, s:i, s:I, s:[], s:[]}", "id", (json_int_t)plan->id, "name",
                          catalog_json_text(plan->name), "shadow", plan->shadow, "priority", plan->priority, "users", (json_int_t)0, "limits",
                          "costs");
    if (!o)
        return NULL;
    if (catalog_plan_user_count(cat, plan->id, &users) ||
        json_object_set_new(o, "users", json_integer(users)) ||
        catalog_limit_each(cat, plan->id, collect_limit_json, json_object_get(o, "limits")) ||
        catalog_cost_each(cat, plan->id, collect_cost_json, json_object_get(o, "costs"))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int collect_cost_summary(void *ctx, const struct catalog_cost *cost)
{
    struct summary *s = ctx;
    size_t n = strlen(s->text);
    snprintf(s->text + n, sizeof(s->text) - n, "%scost %" PRId64 " on %s %s", n ? "; " : "", cost->cost,
             cost->route_method, cost->route_prefix);
    return 0;
}

static int list_plan(void *ctx, const struct catalog_plan *plan)
{
    struct plan_view *v = ctx;
    if (v->array) {
        json_t *o = plan_json(v->cat, plan);
        if (!o || json_array_append_new(v->array, o))
            return -EIO;
        return 0;
    }
    int64_t users = 0;
    struct summary s = {.text = ""};
    int r = catalog_plan_user_count(v->cat, plan->id, &users);
    if (r == 0)
        r = catalog_limit_each(v->cat, plan->id, collect_limit_summary, &s);
    if (r == 0)
        r = catalog_cost_each(v->cat, plan->id, collect_cost_summary, &s);
    if (r)
        return r;
    char nusers[32], priority[16];
    snprintf(nusers, sizeof(nusers), "%" PRId64, users);
    snprintf(priority, sizeof(priority), "%d", plan->priority);
    return table_row(v->table, plan->name, plan->shadow ? "on" : "off", priority, nusers, s.text[0] ? s.text : "none");
}

static int cmd_plan_list(struct cli *c)
{
    struct table t = {.ncols = 5};
    struct plan_view v = {.cat = c->cat, .table = &t};
    if (c->flag[FLAG_JSON] && !(v.array = json_array()))
        return fail("out of memory");
    if (!v.array)
        table_row(&t, "NAME", "SHADOW", "PRIORITY", "USERS", "LIMITS");
    int r = catalog_plan_each(c->cat, list_plan, &v);
    if (r) {
        json_decref(v.array);
        table_print_free(&t);   /* frees; nothing printed on failure paths that matter */
        return r == -EIO || r == -ENOMEM ? fail("cannot list plans: %s", catalog_errmsg(c->cat)) : catalog_failed(c);
    }
    if (v.array)
        return print_json(v.array);
    table_print_free(&t);
    return 0;
}

static int show_limit_row(void *ctx, const struct catalog_limit *l)
{
    char id[32], amount[64], route[CATALOG_PREFIX_MAX + 32];
    snprintf(id, sizeof(id), "%" PRId64, l->id);
    if (l->kind == CATALOG_LIMIT_CONCURRENCY)
        snprintf(amount, sizeof(amount), "%" PRId64, l->amount);
    else if (l->kind == CATALOG_LIMIT_QUOTA)
        limit_quota_format(l->amount, l->period, amount, sizeof(amount));
    else
        limit_rate_format(l->amount, l->window_ms, amount, sizeof(amount));
    char burst[32];
    snprintf(burst, sizeof(burst), "%" PRId64, l->burst);
    if (l->route_method)
        snprintf(route, sizeof(route), "%s %s", l->route_method, l->route_prefix);
    bool rate = l->kind == CATALOG_LIMIT_RATE;
    return table_row(ctx, id, catalog_limit_kind_name(l->kind), amount, rate ? burst : "-",
                     rate ? limit_kind_name(l->algorithm) : "-", l->route_method ? route : "-");
}

static int cost_row(void *ctx, const struct catalog_cost *cost)
{
    char n[32], route[CATALOG_PREFIX_MAX + 32];
    snprintf(n, sizeof(n), "%" PRId64, cost->cost);
    snprintf(route, sizeof(route), "%s %s", cost->route_method, cost->route_prefix);
    return table_row(ctx, n, route);
}

static int cmd_plan_show(struct cli *c)
{
    struct catalog_plan plan = {.name = c->pos[0]};
    bool shadow;
    if (catalog_plan_find(c->cat, plan.name, &plan.id, &shadow))
        return catalog_failed(c);
    plan.shadow = shadow;
    if (catalog_plan_priority(c->cat, plan.id, &plan.priority))
        return catalog_failed(c);
    if (c->flag[FLAG_JSON]) {
        json_t *o = plan_json(c->cat, &plan);
        return o ? print_json(o) : catalog_failed(c);
    }
    int64_t users = 0;
    if (catalog_plan_user_count(c->cat, plan.id, &users))
        return catalog_failed(c);
    printf("plan      %s\nid        %" PRId64 "\nshadow    %s\npriority  %d\nusers     %" PRId64 "\n", plan.name,
           plan.id, plan.shadow ? "on" : "off", plan.priority, users);
    struct table t = {.ncols = 6};
    table_row(&t, "LIMIT-ID", "KIND", "AMOUNT", "BURST", "ALGORITHM", "ROUTE");
    int r = catalog_limit_each(c->cat, plan.id, show_limit_row, &t);
    if (r == 0)
        table_print_free(&t);
    else
        return catalog_failed(c);
    struct table costs = {.ncols = 2};
    table_row(&costs, "COST", "ROUTE");
    if (catalog_cost_each(c->cat, plan.id, cost_row, &costs)) {
        table_print_free(&costs);
        return catalog_failed(c);
    }
    if (costs.nrows > 1)
        table_print_free(&costs);
    else
        table_print_free_silent(&costs);
    return 0;
}

static int count_limit(void *ctx, const struct catalog_limit *l)
{
    (void)l;
    (*(int64_t *)ctx)++;
    return 0;
}

static int cmd_plan_remove(struct cli *c)
{
    const char *name = c->pos[0];
    int64_t plan_id, nlimits = 0;
    if (catalog_plan_find(c->cat, name, &plan_id, NULL) || catalog_limit_each(c->cat, plan_id, count_limit, &nlimits))
        return catalog_failed(c);
    int r = catalog_plan_remove(c->cat, plan_id);
    if (r == CATALOG_IN_USE)
        return fail("plan \"%s\" is in use: %s", name, catalog_errmsg(c->cat));
    if (r)
        return catalog_failed(c);
    note(c, "plan %s: removed, with its %" PRId64 " limit%s", name, nlimits, nlimits == 1 ? "" : "s");
    return 0;
}

/* ---- limits ---- */

static int cmd_limit_add(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    if (!lf->rate && !lf->concurrency && !lf->ws && !lf->quota)
        return usage_error(c->cmd, "give --rate, --concurrency, --ws-messages or --quota");
    if ((lf->burst || lf->algorithm) && !lf->rate)
        return usage_error(c->cmd, "--burst and --algorithm go with --rate");
    int64_t plan_id;
    int n = 0;
    if (catalog_plan_find(c->cat, c->pos[0], &plan_id, NULL))
        return catalog_failed(c);
    struct catalog_limit limits[MAX_FLAG_LIMITS];
    int r = add_flag_limits(c, plan_id, true, limits, &n);
    if (r)
        return r;
    char err[512];
    if (tier_catalog_check_bounds(c->cat, err, sizeof(err)) != 0 ||
        tier_catalog_check_costs(c->cat, err, sizeof(err)) != 0)   /* before the ids go out */
        return fail("%s; nothing was changed", err);
    char text[sizeof(c->note)] = "";
    for (int i = 0; i < n; i++) {
        char one[CATALOG_PREFIX_MAX + 128];
        printf("%" PRId64 "\n", limits[i].id);
        describe_full(&limits[i], one, sizeof(one));
        append(text, sizeof(text), "%s%" PRId64 " %s", i ? ", " : "", limits[i].id, one);
    }
    note(c, "plan %s: added limit%s %s", c->pos[0], n == 1 ? "" : "s", text);
    return 0;
}

/* Reads limit pos[1] of plan pos[0] into *one. Returns 0 or an exit status already
 * reported. */
static int find_limit(struct cli *c, int64_t *pplan_id, struct limit_copy *one)
{
    int64_t limit_id;
    if (parse_int(c->pos[1], 1, CATALOG_ID_MAX, &limit_id))
        return usage_error(c->cmd, "invalid LIMIT-ID \"%s\"", c->pos[1]);
    if (catalog_plan_find(c->cat, c->pos[0], pplan_id, NULL))
        return catalog_failed(c);
    struct limit_pick pick = {.kind = -1, .id = limit_id, .items = one};
    int r = collect_limits(c, c->pos[0], *pplan_id, &pick);
    if (r)
        return r;
    if (pick.n == 0)
        return fail("plan \"%s\" has no limit %" PRId64, c->pos[0], limit_id);
    return 0;
}

static int cmd_limit_remove(struct cli *c)
{
    int64_t plan_id;
    struct limit_copy old;
    int r = find_limit(c, &plan_id, &old);
    if (r)
        return r;
    if (catalog_limit_remove(c->cat, plan_id, old.l.id))
        return catalog_failed(c);
    char text[CATALOG_PREFIX_MAX + 128];
    describe_full(&old.l, text, sizeof(text));
    note(c, "plan %s: removed limit %" PRId64 " (%s)", c->pos[0], old.l.id, text);
    return 0;
}

/* Changes only what the flags give; the limit keeps its id, so the stores keep counting
 * under it (they start afresh by themselves when the algorithm changes: a state is tagged
 * with its kind, store/limit.h). */
static int cmd_limit_set(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    if (!lf->rate && !lf->burst && !lf->algorithm && !lf->concurrency && !lf->ws && !lf->quota)
        return usage_error(c->cmd, "give the LIMIT-FLAGS to change");
    int64_t plan_id;
    struct limit_copy old;
    int r = find_limit(c, &plan_id, &old);
    if (r)
        return r;
    struct catalog_limit l = old.l;
    bool rate_flags = lf->rate || lf->burst || lf->algorithm;
    switch (l.kind) {
    case CATALOG_LIMIT_QUOTA:
        if (rate_flags || lf->concurrency || lf->ws)
            return fail("limit %" PRId64 " is a quota: give --quota", l.id);
        l.amount = lf->quota_amount;
        l.period = lf->quota_period;
        break;
    case CATALOG_LIMIT_RATE:
        if (lf->concurrency || lf->ws || lf->quota)
            return fail("limit %" PRId64 " is a rate limit: give --rate, --burst or --algorithm", l.id);
        if (lf->rate) {
            l.amount = lf->rate_amount;
            l.window_ms = lf->rate_window_ms;
        }
        if (lf->burst)
            l.burst = lf->burst_value;
        if (lf->algorithm)
            l.algorithm = lf->algorithm_value;
        break;
    case CATALOG_LIMIT_CONCURRENCY:
        if (rate_flags || lf->ws || lf->quota)
            return fail("limit %" PRId64 " is a concurrency limit: give --concurrency", l.id);
        l.amount = lf->concurrency_value;
        break;
    case CATALOG_LIMIT_WS_MESSAGES:
        if (rate_flags || lf->concurrency || lf->quota)
            return fail("limit %" PRId64 " is a ws-messages limit: give --ws-messages", l.id);
        l.amount = lf->ws_amount;
        l.window_ms = lf->ws_window_ms;
        break;
    }
    if ((r = update_limit(c, &l)) != 0)
        return r;
    char before[CATALOG_PREFIX_MAX + 96], after[CATALOG_PREFIX_MAX + 96];
    describe_value(&old.l, before, sizeof(before));
    describe_value(&l, after, sizeof(after));
    note(c, "plan %s: limit %" PRId64 " %s %s -> %s%s", c->pos[0], l.id, kind_word(l.kind), before, after,
         l.algorithm != old.l.algorithm ? " (a new algorithm: its counts start afresh)" : "");
    return 0;
}

/* ---- users ---- */

static int check_user_id(struct cli *c, const char *id)
{
    char msg[256];
    if (catalog_check_user_id(id, msg, sizeof(msg)))
        return usage_error(c->cmd, "%s", msg);
    return 0;
}

static int user_plan_name(void *ctx, const struct catalog_user *user)
{
    snprintf(ctx, CATALOG_NAME_MAX + 1, "%s", user->plan_name ? user->plan_name : "?");
    return 0;
}

static int user_add_or_set(struct cli *c, bool add)
{
    const char *id = c->pos[0], *plan = c->flag[FLAG_PLAN];
    int r = check_user_id(c, id);
    if (r)
        return r;
    if (!plan)
        return usage_error(c->cmd, "--plan NAME is required");
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

static int cmd_user_add(struct cli *c)
{
    return user_add_or_set(c, true);
}

static int cmd_user_set(struct cli *c)
{
    return user_add_or_set(c, false);
}

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

static int cmd_user_list(struct cli *c)
{
    int64_t plan_id = 0;
    if (c->flag[FLAG_PLAN] && catalog_plan_find(c->cat, c->flag[FLAG_PLAN], &plan_id, NULL))
        return catalog_failed(c);
    struct table t = {.ncols = 3};
    struct user_view v = {.table = &t};
    if (c->flag[FLAG_JSON] && !(v.array = json_array()))
        return fail("out of memory");
    if (!v.array)
        table_row(&t, "USER", "PLAN", "CREATED");
    int r = catalog_user_each(c->cat, plan_id, list_user, &v);
    if (r) {
        json_decref(v.array);
        table_print_free(&t);
        return r == -ENOMEM ? fail("out of memory") : catalog_failed(c);
    }
    if (v.array)
        return print_json(v.array);
    table_print_free(&t);
    return 0;
}

struct key_view {
    json_t *array;
    struct table *table;
    bool show_user;
};

static int list_key(void *ctx, const struct catalog_key *key)
{
    struct key_view *v = ctx;
    if (v->array) {
        json_t *o = catalog_json_key(key, 0);
        return !o || json_array_append_new(v->array, o) ? -ENOMEM : 0;
    }
    char id[32];
    snprintf(id, sizeof(id), "%" PRId64, key->id);
    if (v->show_user)
        return table_row(v->table, id, key->user_id, key->label[0] ? key->label : "-", key->created,
                         key->revoked ? key->revoked : "no");
    return table_row(v->table, id, key->label[0] ? key->label : "-", key->created,
                     key->revoked ? key->revoked : "no");
}

static int show_user(void *ctx, const struct catalog_user *user)
{
    json_t **po = ctx;
    *po = catalog_json_user(user);
    return *po ? 0 : -ENOMEM;
}

static int cmd_user_show(struct cli *c)
{
    json_t *user = NULL;
    int r = catalog_user_get(c->cat, c->pos[0], show_user, &user);
    if (r) {
        json_decref(user);
        return r == -ENOMEM ? fail("out of memory") : catalog_failed(c);
    }
    if (c->flag[FLAG_JSON]) {
        json_t *keys = json_array(), *limits = json_array();
        struct key_view v = {.array = keys};
        if (!limits || json_object_set_new(user, "limits", limits) ||
            catalog_user_limit_each(c->cat, c->pos[0], collect_limit_json, limits)) {
            json_decref(keys);
            json_decref(user);
            return fail("cannot list the user's limits: %s", catalog_errmsg(c->cat));
        }
        if (!keys || json_object_set_new(user, "keys", keys) ||
            catalog_key_each(c->cat, c->pos[0], false, list_key, &v)) {
            json_decref(user);
            return fail("cannot list the user's keys: %s", catalog_errmsg(c->cat));
        }
        return print_json(user);
    }
    printf("user     %s\nplan     %s\ncreated  %s\n", json_string_value(json_object_get(user, "id")),
           json_string_value(json_object_get(user, "plan")), json_string_value(json_object_get(user, "created")));
    json_decref(user);
    struct table own = {.ncols = 6};
    table_row(&own, "LIMIT-ID", "KIND", "AMOUNT", "BURST", "ALGORITHM", "ROUTE");
    if (catalog_user_limit_each(c->cat, c->pos[0], show_limit_row, &own)) {
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
    r = catalog_key_each(c->cat, c->pos[0], false, list_key, &v);
    if (r) {
        table_print_free(&t);
        return catalog_failed(c);
    }
    if (t.nrows == 1) {
        table_print_free(&t);
        printf("keys     none\n");
        return 0;
    }
    table_print_free(&t);
    return 0;
}

static int cmd_user_remove(struct cli *c)
{
    int64_t revoked = 0;
    if (catalog_user_remove(c->cat, c->pos[0], &revoked))
        return catalog_failed(c);
    note(c, "user %s: removed; %" PRId64 " key%s revoked", c->pos[0], revoked, revoked == 1 ? "" : "s");
    return 0;
}

/* ---- a user's own limits ---- */

static int cmd_user_limit_add(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    const char *user = c->pos[0];
    int r = check_user_id(c, user);
    if (r)
        return r;
    if (!lf->rate && !lf->concurrency && !lf->ws && !lf->quota)
        return usage_error(c->cmd, "give --rate, --concurrency, --ws-messages or --quota");
    if ((lf->burst || lf->algorithm) && !lf->rate)
        return usage_error(c->cmd, "--burst and --algorithm go with --rate");
    if (catalog_user_find(c->cat, user, NULL))
        return catalog_failed(c);
    struct catalog_limit limits[MAX_FLAG_LIMITS];
    int n = flag_limits(c, 0, true, limits);
    char text[sizeof(c->note)] = "";
    for (int i = 0; i < n; i++) {
        limits[i].user_id = user;
        if (catalog_limit_add(c->cat, &limits[i], &limits[i].id))
            return catalog_failed(c);
    }
    char err[512];
    if (tier_catalog_check_bounds(c->cat, err, sizeof(err)) != 0 ||
        tier_catalog_check_costs(c->cat, err, sizeof(err)) != 0)   /* before the ids go out */
        return fail("%s; nothing was changed", err);
    for (int i = 0; i < n; i++) {
        char one[CATALOG_PREFIX_MAX + 128];
        printf("%" PRId64 "\n", limits[i].id);
        describe_full(&limits[i], one, sizeof(one));
        append(text, sizeof(text), "%s%" PRId64 " %s", i ? ", " : "", limits[i].id, one);
    }
    note(c, "user %s: added own limit%s %s", user, n == 1 ? "" : "s", text);
    return 0;
}

static int cmd_user_limit_remove(struct cli *c)
{
    const char *user = c->pos[0];
    int64_t limit_id;
    int r = check_user_id(c, user);
    if (r)
        return r;
    if (parse_int(c->pos[1], 1, CATALOG_ID_MAX, &limit_id))
        return usage_error(c->cmd, "invalid LIMIT-ID \"%s\"", c->pos[1]);
    if (catalog_user_find(c->cat, user, NULL) || catalog_user_limit_remove(c->cat, user, limit_id))
        return catalog_failed(c);
    note(c, "user %s: removed own limit %" PRId64 "; the plan's limits of its kind apply again", user, limit_id);
    return 0;
}

/* ---- costs ---- */

static int cmd_cost_set(struct cli *c)
{
    int64_t plan_id, n, old = 0;
    int r = parse_route(c, c->pos[1]);
    if (r)
        return r;
    if (parse_int(c->pos[2], 1, CATALOG_MAX_COST, &n))
        return usage_error(c->cmd, "invalid cost \"%s\" (a whole number, 1 to %d)", c->pos[2], CATALOG_MAX_COST);
    if (catalog_plan_find(c->cat, c->pos[0], &plan_id, NULL))
        return catalog_failed(c);
    struct catalog_cost cost = {
        .plan_id = plan_id, .route_method = c->route_method, .route_prefix = c->route_prefix, .cost = n,
    };
    if (catalog_cost_set(c->cat, &cost, &old))
        return catalog_failed(c);
    if (old)
        note(c, "plan %s: cost on %s %s %" PRId64 " -> %" PRId64, c->pos[0], c->route_method, c->route_prefix,
             old, n);
    else
        note(c, "plan %s: cost on %s %s 1 -> %" PRId64, c->pos[0], c->route_method, c->route_prefix, n);
    return 0;
}

static int cmd_cost_remove(struct cli *c)
{
    int64_t plan_id;
    int r = parse_route(c, c->pos[1]);
    if (r)
        return r;
    if (catalog_plan_find(c->cat, c->pos[0], &plan_id, NULL) ||
        catalog_cost_remove(c->cat, plan_id, c->route_method, c->route_prefix))
        return catalog_failed(c);
    note(c, "plan %s: cost on %s %s removed (requests there count 1)", c->pos[0], c->route_method, c->route_prefix);
    return 0;
}

/* ---- keys ---- */

/* stdout: the key alone on one line, or with --json
 * {"key_id": 3, "user": "alice", "label": "laptop", "key": "tp_..."}. The key is written
 * straight from our buffer (hex: nothing to escape), never copied into a JSON value that
 * would be freed without being wiped. */
static int print_new_key(struct cli *c, int64_t id, const char *user, const char *label, const char *key)
{
    if (!c->flag[FLAG_JSON]) {
        printf("%s\n", key);
        return 0;
    }
    json_t *juser = catalog_json_text(user), *jlabel = catalog_json_text(label);
    char *quser = juser ? json_dumps(juser, JSON_ENCODE_ANY) : NULL;
    char *qlabel = jlabel ? json_dumps(jlabel, JSON_ENCODE_ANY) : NULL;
    int r = 0;
    if (quser && qlabel)
        printf("{\"key_id\": %" PRId64 ", \"user\": %s, \"label\": %s, \"key\": \"%s\"}\n", id, quser, qlabel, key);
    else
        r = fail("out of memory");
    free(quser);
    free(qlabel);
    json_decref(juser);
    json_decref(jlabel);
    return r;
}

static int cmd_key_create(struct cli *c)
{
    const char *user = c->pos[0], *label = c->flag[FLAG_LABEL] ? c->flag[FLAG_LABEL] : "";
    char msg[256];
    int r = check_user_id(c, user);
    if (r)
        return r;
    if (catalog_check_label(label, msg, sizeof(msg)))
        return usage_error(c->cmd, "%s", msg);
    if (catalog_user_find(c->cat, user, NULL))
        return catalog_failed(c);
    char key[APIKEY_TEXT_LEN + 1];
    struct catalog_key record = {.user_id = user, .label = label};
    if (apikey_generate(key) != 0)
        return fail("cannot generate a key: the random number generator failed");
    int64_t id = 0;
    if (apikey_hash(key, strlen(key), record.hash) != 0) {
        r = fail("cannot hash the key");
    } else if (catalog_key_add(c->cat, &record, &id)) {
        r = catalog_failed(c);
    } else {
        /* Written before the commit; main commits only if stdout took it. */
        r = print_new_key(c, id, user, label, key);
    }
    OPENSSL_cleanse(key, sizeof(key));
    if (r == 0)
        note(c, "key %" PRId64 " created for user %s%s%s%s; it is shown only this once, on stdout", id, user,
             label[0] ? " (label \"" : "", label, label[0] ? "\")" : "");
    return r;
}

static int cmd_key_list(struct cli *c)
{
    const char *user = c->npos ? c->pos[0] : NULL;
    if (user && catalog_user_find(c->cat, user, NULL))
        return catalog_failed(c);
    struct table t = {.ncols = 5};
    struct key_view v = {.table = &t, .show_user = true};
    if (c->flag[FLAG_JSON] && !(v.array = json_array()))
        return fail("out of memory");
    if (!v.array)
        table_row(&t, "KEY-ID", "USER", "LABEL", "CREATED", "REVOKED");
    int r = catalog_key_each(c->cat, user, false, list_key, &v);
    if (r) {
        json_decref(v.array);
        table_print_free(&t);
        return r == -ENOMEM ? fail("out of memory") : catalog_failed(c);
    }
    if (v.array)
        return print_json(v.array);
    table_print_free(&t);
    return 0;
}

static int cmd_key_revoke(struct cli *c)
{
    int64_t id;
    if (parse_int(c->pos[0], 1, CATALOG_ID_MAX, &id))
        return usage_error(c->cmd, "invalid KEY-ID \"%s\"", c->pos[0]);
    if (catalog_key_revoke(c->cat, id))
        return catalog_failed(c);
    note(c, "key %" PRId64 " revoked", id);
    return 0;
}

/* ---- export and import ---- */

/* Writes doc to path through a temporary file and a rename, so a reader never sees half
 * a file. */
static int write_json_file(json_t *doc, const char *path)
{
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp)
        return fail("out of memory");
    snprintf(tmp, n, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return fail("cannot write %s: %s", path, strerror(e));
    }
    FILE *f = fdopen(fd, "w");
    int r = 0;
    if (!f) {
        close(fd);
        r = -1;
    } else {
        r = json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (r == 0 && fputc('\n', f) == EOF)
            r = -1;
        if (r == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
            r = -1;
        if (fclose(f) != 0)
            r = -1;
    }
    int e = errno;
    if (r == 0 && rename(tmp, path) != 0) {
        e = errno;
        r = -1;
    }
    if (r) {
        unlink(tmp);
        free(tmp);
        return fail("cannot write %s: %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}

static int cmd_export(struct cli *c)
{
    char err[512];
    json_t *doc = NULL;
    struct catalog_json_repairs repairs;
    if (catalog_json_export(c->cat, &doc, &repairs, err, sizeof(err)))
        return fail("export failed: %s", err);
    int r;
    if (c->npos == 0 || strcmp(c->pos[0], "-") == 0) {
        r = print_json(doc);
    } else {
        r = write_json_file(doc, c->pos[0]);
        json_decref(doc);
    }
    if (r == 0 && repairs.count)
        fprintf(stderr, "tierctl: warning: %s%s is not valid UTF-8: exported with '?' for each byte that is not\n",
                repairs.first, repairs.count > 1 ? " (and others)" : "");
    return r;
}

static int cmd_backup(struct cli *c)
{
    int r = catalog_backup(c->cat, c->pos[0]);
    return r ? catalog_failed(c) : 0;
}

static int cmd_import(struct cli *c)
{
    const char *path = c->pos[0];
    json_error_t jerr;
    json_t *doc = strcmp(path, "-") == 0 ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr)
                                         : json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        if (jerr.line < 0)
            return fail("%s", jerr.text);
        return fail("%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    char err[512];
    int r = catalog_json_import(c->cat, doc, err, sizeof(err));
    if (r) {
        json_decref(doc);
        return fail("%s: %s (nothing imported)", path, err);
    }
    /* The import checked the document's shape: these are arrays of objects. */
    json_t *plans = json_object_get(doc, "plans"), *plan;
    size_t i, nlimits = 0;
    json_array_foreach(plans, i, plan)
        nlimits += json_array_size(json_object_get(plan, "limits"));
    note(c, "catalog %s: imported %s, replacing everything: %zu plans, %zu limits, %zu users, %zu keys", c->db_path,
         strcmp(path, "-") == 0 ? "stdin" : path, json_array_size(plans), nlimits,
         json_array_size(json_object_get(doc, "users")), json_array_size(json_object_get(doc, "api_keys")));
    json_decref(doc);
    return 0;
}

/* ---- usage ---- */

/* Where the proxies keep their counts: [limits] of the proxy's INI file, or --redis. */
struct store_config {
    char store[16];                    /* "memory" or "redis" */
    char redis[1024];
    char redis_ca_file[1024];          /* rediss://: "" verifies with the system's CAs */
    char key_prefix[128];
    char redis_mode[16];               /* "single" or "cluster" (redis then holds the seeds) */
    int64_t lease_ttl_ms;
    bool seen_redis;
};

static int on_ini(void *ctx, const char *section, const char *name, const char *value)
{
    struct store_config *sc = ctx;
    if (strcmp(section, "limits") != 0)
        return 1;   /* the proxy checks the rest; here only [limits] matters */
    if (strcmp(name, "store") == 0)
        snprintf(sc->store, sizeof(sc->store), "%s", value);
    else if (strcmp(name, "redis") == 0)
        snprintf(sc->redis, sizeof(sc->redis), "%s", value), sc->seen_redis = true;
    else if (strcmp(name, "key_prefix") == 0)
        snprintf(sc->key_prefix, sizeof(sc->key_prefix), "%s", value);
    else if (strcmp(name, "redis_ca_file") == 0)
        snprintf(sc->redis_ca_file, sizeof(sc->redis_ca_file), "%s", value);
    else if (strcmp(name, "redis_mode") == 0)
        snprintf(sc->redis_mode, sizeof(sc->redis_mode), "%s", value);
    else if (strcmp(name, "lease_ttl_ms") == 0 && parse_int(value, 1, INT64_MAX / 4, &sc->lease_ttl_ms) != 0)
        return 0;
    return 1;
}

/* The proxy's defaults, its INI file (--config, $TIERPROXY_CONFIG, the default path), its
 * TIERPROXY_LIMITS_* variables, then --redis and --key-prefix, each over the one before. */
static int read_store_config(struct cli *c, struct store_config *sc, char *where, size_t wherelen)
{
    *sc = (struct store_config){.store = "memory", .redis = "redis://127.0.0.1:6379/0",
                                .key_prefix = "tierproxy:", .redis_mode = "single", .lease_ttl_ms = 30000};
    const char *file = c->flag[FLAG_CONFIG];
    if (!file && !c->flag[FLAG_REDIS]) {
        const char *env = getenv("TIERPROXY_CONFIG");
        file = env && env[0] ? env : USAGE_DEFAULT_CONFIG;
    }
    snprintf(where, wherelen, "%s", file ? file : "--redis");
    if (file) {
        int line = ini_parse(file, on_ini, sc);
        if (line < 0)
            return fail("cannot read %s: %s (give --config FILE, the proxy's, or --redis URL)", file, strerror(errno));
        if (line > 0)
            return fail("%s:%d: cannot read [limits] there", file, line);
    }
    const char *env;
    if ((env = getenv("TIERPROXY_LIMITS_STORE")) && env[0])
        snprintf(sc->store, sizeof(sc->store), "%s", env);
    if ((env = getenv("TIERPROXY_LIMITS_REDIS")) && env[0])
        snprintf(sc->redis, sizeof(sc->redis), "%s", env);
    if ((env = getenv("TIERPROXY_LIMITS_KEY_PREFIX")))
        snprintf(sc->key_prefix, sizeof(sc->key_prefix), "%s", env);
    if ((env = getenv("TIERPROXY_LIMITS_REDIS_CA_FILE")))
        snprintf(sc->redis_ca_file, sizeof(sc->redis_ca_file), "%s", env);
    if ((env = getenv("TIERPROXY_LIMITS_REDIS_MODE")) && env[0])
        snprintf(sc->redis_mode, sizeof(sc->redis_mode), "%s", env);
    if (c->flag[FLAG_REDIS]) {
        snprintf(sc->store, sizeof(sc->store), "redis");
        snprintf(sc->redis, sizeof(sc->redis), "%s", c->flag[FLAG_REDIS]);
    }
    if (c->flag[FLAG_KEY_PREFIX])
        snprintf(sc->key_prefix, sizeof(sc->key_prefix), "%s", c->flag[FLAG_KEY_PREFIX]);
    if (strcmp(sc->store, "redis") != 0)
        return fail("%s has [limits] store = %s: the counts live inside each tierproxy process, where tierctl"
                    " cannot read them (usage needs store = redis; a proxy's RateLimit headers show its counts)",
                    where, sc->store);
    if (strcmp(sc->redis_mode, "single") != 0 && strcmp(sc->redis_mode, "cluster") != 0)
        return fail("%s: [limits] redis_mode: expected single or cluster, got \"%s\"", where, sc->redis_mode);
    return 0;
}

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

static bool limiter_ready(const void *arg)
{
    return limiter_available(arg);
}

/* One row of the report: the limit, its store rule, and its standing. */
struct usage_row {
    const struct tier_limit *limit;
    struct limit_rule rule;
    struct limit_verdict verdict;
};

static json_t *usage_row_json(const struct usage_row *u)
{
    const struct tier_limit *l = u->limit;
    const char *kind = l->kind == TIER_LIMIT_QUOTA ? "quota" : l->kind == TIER_LIMIT_CONCURRENCY ? "concurrency" : "rate";
    int64_t used = u->verdict.limit - u->verdict.remaining;
    json_t *o = json_pack("{s:I, s:s, s:o, s:I, s:I, s:I, s:I, s:s}", "id", (json_int_t)l->id, "kind", kind, "name",
                          catalog_json_text(l->name), "limit", (json_int_t)u->verdict.limit, "used", (json_int_t)(used < 0 ? 0 : used),
                          "remaining", (json_int_t)u->verdict.remaining, "reset_s",
                          (json_int_t)((u->verdict.reset_ms + 999) / 1000), "source", l->own ? "user" : "plan");
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

/* `usage USER`: every rate limit, quota and concurrency limit that applies to the user
 * (the plan's, with the user's own in their place), peeked in the proxies' Redis the way a
 * check would see it, with nothing recorded (limiter_peek). ws-messages limits count per
 * connection inside a proxy and are not shown. */

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
static int cmd_usage(struct cli *c)
{
    const char *user_id = c->pos[0];
    int r = check_user_id(c, user_id);
    if (r)
        return r;
    if (c->flag[FLAG_KEY_PREFIX] && !c->flag[FLAG_REDIS] && !c->flag[FLAG_CONFIG])
        return usage_error(c->cmd, "--key-prefix goes with --redis");
    char err[512], where[1024];
    struct snapshot *snap = NULL;
    if (snapshot_load(c->db_path, &snap, err, sizeof(err)))
        return fail("%s", err);
    const struct tier_user *user = snapshot_find_user(snap, user_id);
    if (!user) {
        snapshot_unref(snap);
        return fail("no user \"%s\"", user_id);
    }
    struct store_config sc;
    if ((r = read_store_config(c, &sc, where, sizeof(where))) != 0) {
        snapshot_unref(snap);
        return r;
    }
    const struct tier_plan *plan = tier_user_plan(user);
    struct usage_row *rows = calloc(plan->n_limits + 1, sizeof(*rows));
    size_t n = 0;
    for (size_t i = 0; rows && i < plan->n_limits; i++) {
        const struct tier_limit *l = &plan->limits[i];
        if (l->kind == TIER_LIMIT_WS_MESSAGES)
            continue;
        rows[n].limit = l;
        rows[n].rule = l->rule;
        if (l->kind == TIER_LIMIT_CONCURRENCY)
            rows[n].rule = (struct limit_rule){.id = l->rule.id, .kind = LIMIT_CONCURRENCY, .rate = l->rule.rate,
                                               .window_ms = sc.lease_ttl_ms};
        n++;
    }
    struct event_base *base = rows ? event_base_new() : NULL;
    struct redis_store_options opts = {
        .url = sc.redis, .tls_ca_file = sc.redis_ca_file, .key_prefix = sc.key_prefix, .command_timeout_ms = 2000,
        .lease_ttl_ms = sc.lease_ttl_ms,
    };
    /* cluster mode: the map from the seeds, then the user's slot's master */
    bool cluster = strcmp(sc.redis_mode, "cluster") == 0;
    struct limiter *limiter = !base ? NULL
                              : cluster ? limiter_redis_cluster_create(base, &opts, err, sizeof(err))
                                        : limiter_redis_create(base, &opts, err, sizeof(err));
    if (!rows || !base || !limiter) {
        r = !rows || !base ? fail("out of memory") : fail("%s: %s", where, err);
        goto out;
    }
    run_loop_until(base, NULL, limiter_ready, limiter, 3000);
    char shown[sizeof(sc.redis) + 8];
    url_without_password(sc.redis, shown, sizeof(shown));
    if (!limiter_available(limiter)) {
        char why[256] = "";
        limiter_health(limiter, why, sizeof(why));   /* such as "...: AUTH: WRONGPASS ..." */
        r = fail("cannot reach the proxies' Redis (%s, from %s)%s%s", shown, where, why[0] ? ": " : "", why);
        goto out;
    }
    char subject[CATALOG_USER_ID_MAX + 8];
    int len = snprintf(subject, sizeof(subject), "u:%s", user->id);   /* the proxies' subject */
    for (size_t at = 0; at < n; at += LIMITER_MAX_RULES) {
        size_t batch = n - at < LIMITER_MAX_RULES ? n - at : LIMITER_MAX_RULES;
        struct limit_rule rules[LIMITER_MAX_RULES];
        for (size_t k = 0; k < batch; k++)
            rules[k] = rows[at + k].rule;
        struct peek_wait w = {0};
        if (limiter_peek(limiter, subject, (size_t)len, rules, batch, -1, on_peek, &w) != 0) {
            r = fail("cannot ask the store about user \"%s\"", user->id);
            goto out;
        }
        run_loop_until(base, &w.done, NULL, NULL, 5000);
        if (!w.done || w.result.status != LIMITER_DECIDED) {
            r = fail("the proxies' Redis (%s) did not answer", shown);
            goto out;
        }
        for (size_t k = 0; k < batch; k++)
            rows[at + k].verdict = w.result.verdicts[k];
    }
    if (c->flag[FLAG_JSON]) {
        json_t *doc = json_pack("{s:o, s:o, s:[]}", "user", catalog_json_text(user->id), "plan",
                                catalog_json_text(plan->name), "limits");
        json_t *arr = doc ? json_object_get(doc, "limits") : NULL;
        for (size_t k = 0; arr && k < n; k++) {
            json_t *o = usage_row_json(&rows[k]);
            if (!o || json_array_append_new(arr, o)) {
                json_decref(doc);
                doc = arr = NULL;
            }
        }
        r = print_json(doc);
        goto out;
    }
    printf("user  %s\nplan  %s\n", user->id, plan->name);
    struct table t = {.ncols = 7};
    table_row(&t, "LIMIT-ID", "LIMIT", "USED", "REMAINING", "RESET-S", "ROUTE", "SOURCE");
    for (size_t k = 0; k < n; k++) {
        const struct usage_row *u = &rows[k];
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
        table_row(&t, id, what, used, remaining, reset, l->has_route ? route : "-", l->own ? "user" : "plan");
    }
    table_print_free(&t);
    r = fflush(stdout) != 0 ? fail("cannot write the output: %s", strerror(errno)) : 0;
out:
    if (limiter)
        limiter_destroy(limiter);
    if (base)
        event_base_free(base);
    free(rows);
    snapshot_unref(snap);
    return r;
}

/* ---- simulate ---- */

/* Replays an access log (tiers/simulate.h). The catalog is read only for --plan or each
 * user's plan, never written; with LIMIT-FLAGS none is needed. */
static int cmd_simulate(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    const char *plan = c->flag[FLAG_PLAN];
    bool given = lf->rate || lf->burst || lf->algorithm || lf->concurrency;
    if (plan && given)
        return usage_error(c->cmd, "give --plan or LIMIT-FLAGS, not both");
    if ((lf->burst || lf->algorithm) && !lf->rate)
        return usage_error(c->cmd, "--burst and --algorithm go with --rate");
    struct simulate_options opt = {0};
    char against[256] = "", rate[64];
    size_t off = 0;
    if (lf->rate) {
        opt.given[opt.n_given++] = (struct limit_rule){
            .id = 1, .kind = lf->algorithm ? lf->algorithm_value : LIMIT_SLIDING_LOG,
            .rate = lf->rate_amount, .burst = lf->burst ? lf->burst_value : 0, .window_ms = lf->rate_window_ms,
        };
        const struct limit_rule *r = &opt.given[0];
        off += (size_t)snprintf(against, sizeof(against), "%s",
                                limit_rate_format(r->rate, r->window_ms, rate, sizeof(rate)));
        if (r->burst)
            off += (size_t)snprintf(against + off, sizeof(against) - off, " burst %" PRId64, r->burst);
        off += (size_t)snprintf(against + off, sizeof(against) - off, " %s", limit_kind_name(r->kind));
    }
    if (lf->concurrency) {
        opt.given[opt.n_given++] = (struct limit_rule){
            .id = 2, .kind = LIMIT_CONCURRENCY, .rate = lf->concurrency_value, .window_ms = 30000,
        };
        snprintf(against + off, sizeof(against) - off, "%sconcurrency %" PRId64, off ? ", " : "",
                 lf->concurrency_value);
    }
    struct snapshot *snap = NULL;
    char err[512];
    if (!given) {
        if (snapshot_load(c->db_path, &snap, err, sizeof(err)))
            return fail("%s", err);
        opt.snap = snap;
        if (plan) {
            opt.plan = snapshot_find_plan(snap, plan);
            if (!opt.plan) {
                snapshot_unref(snap);
                return fail("no plan named \"%s\" in %s", plan, c->db_path);
            }
            snprintf(against, sizeof(against), "the current limits of plan %s in %s", plan, c->db_path);
        } else {
            snprintf(against, sizeof(against), "each user's current plan in %s", c->db_path);
        }
    }
    int r = simulate_file(c->pos[0], &opt, against, c->flag[FLAG_JSON] != NULL, stdout, stderr, err, sizeof(err));
    snapshot_unref(snap);
    if (r)
        return fail("%s", err);
    if (fflush(stdout) != 0 || ferror(stdout))
        return fail("cannot write the output: %s", strerror(errno));
    return 0;
}

/* ---- the fleet's catalog (tiers/tierctl_fleet.h) ---- */

static int read_fleet_config(struct cli *c, struct fleet_config *fc, bool needed)
{
    char err[1200];
    if (fleet_config_read(c->flag[FLAG_CONFIG], fc, err, sizeof(err)) != 0)
        return fail("%s", err);
    if (needed && !fc->found)
        return fail("%s does not exist: give the proxy's file with --config FILE or $TIERPROXY_CONFIG, to find the"
                    " fleet's Redis", fc->file);
    return 0;
}

/* Publishes the catalog in a write transaction of its own; status 0 or 1 (said why). */
static int publish_in_transaction(struct cli *c, const struct fleet_config *fc, bool force, const char *failed)
{
    char msg[1536];
    int r = catalog_begin(c->cat, true);
    if (r)
        snprintf(msg, sizeof(msg), "%s", catalog_errmsg(c->cat));
    else if ((r = fleet_publish(c->cat, c->db_path, fc, force, msg, sizeof(msg))) == 0 && catalog_commit(c->cat)) {
        snprintf(msg, sizeof(msg), "published, but cannot mark %s as published: %s", c->db_path, catalog_errmsg(c->cat));
        r = -1;
    }
    if (r) {
        catalog_rollback(c->cat);
        return fail("%s%s", failed, msg);
    }
    fprintf(stderr, "tierctl: %s\n", msg);
    return 0;
}

static int cmd_publish(struct cli *c)
{
    struct fleet_config fc;
    char err[512];
    int r = read_fleet_config(c, &fc, true);
    if (r)
        return r;
    if (catalog_open(c->db_path, CATALOG_READ_WRITE, &c->cat, err, sizeof(err)))
        return fail("%s", err);
    r = publish_in_transaction(c, &fc, c->flag[FLAG_FORCE] != NULL, "");
    catalog_close(c->cat);
    return r;
}

static int cmd_pull(struct cli *c)
{
    struct fleet_config fc;
    char err[512], msg[1536];
    int r = read_fleet_config(c, &fc, true);
    if (r)
        return r;
    if (catalog_open(c->db_path, CATALOG_CREATE, &c->cat, err, sizeof(err)))
        return fail("%s", err);
    r = fleet_pull(c->cat, c->db_path, &fc, msg, sizeof(msg));
    catalog_close(c->cat);
    if (r)
        return fail("%s", msg);
    fprintf(stderr, "tierctl: %s\n", msg);
    return 0;
}

static int cmd_status(struct cli *c)
{
    struct fleet_config fc;
    char err[1024];
    int r = read_fleet_config(c, &fc, true);
    if (r)
        return r;
    if (access(c->db_path, F_OK) == 0) {
        if (catalog_open(c->db_path, CATALOG_READ_ONLY, &c->cat, err, sizeof(err)))
            return fail("%s", err);
        if (catalog_begin(c->cat, false)) {
            r = catalog_failed(c);
            catalog_close(c->cat);
            return r;
        }
    }
    r = fleet_status(c->cat, c->db_path, &fc, c->flag[FLAG_JSON] != NULL, stdout, err, sizeof(err));
    catalog_close(c->cat);
    if (fflush(stdout) != 0)
        return fail("cannot write the output: %s", strerror(errno));
    return r ? fail("%s", err) : 0;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    struct cli c = {0};
    bool help = false;
    int status = parse_args(argc, argv, &c, &help);
    if (status == -1)
        return 0;   /* COMMAND --help */
    if (status)
        return status;
    if (help) {
        print_help(stdout);
        return 0;
    }
    if (c.flag[FLAG_VERSION]) {
        printf("tierctl %s (catalog schema %d, SQLite %s)\n", TIERCTL_VERSION, CATALOG_SCHEMA_VERSION,
               sqlite3_libversion());
        return 0;
    }
    char db_from_config[4096], err[512];
    if (catalog_path_find(c.flag[FLAG_DB], c.flag[FLAG_CONFIG], DEFAULT_DB, &c.db_path, db_from_config,
                          sizeof(db_from_config), err, sizeof(err)) != 0)
        return fail("%s", err);
    if (c.cmd->access == ACCESS_NONE)
        return c.cmd->run(&c);   /* opens what it needs itself */
    enum catalog_mode mode = c.cmd->access == ACCESS_READ ? CATALOG_READ_ONLY
                           : c.cmd->access == ACCESS_WRITE ? CATALOG_READ_WRITE
                           : CATALOG_CREATE;
    struct fleet_config fleet = {0};
    if (c.cmd->access != ACCESS_READ && (status = read_fleet_config(&c, &fleet, false)) != 0)
        return status;
    if (catalog_open(c.db_path, mode, &c.cat, err, sizeof(err)))
        return fail("%s", err);
    if (catalog_begin(c.cat, c.cmd->access != ACCESS_READ)) {
        status = catalog_failed(&c);
        goto out;
    }
    status = c.cmd->run(&c);
    if (status == 0 && c.cmd->access != ACCESS_READ) {
        /* every change (limit add/set, plan set, import, ...) leaves no request meeting more
         * limits than the proxy checks at once (limit_bounds.h) */
        if (tier_catalog_check_bounds(c.cat, err, sizeof(err)) != 0 ||
            tier_catalog_check_costs(c.cat, err, sizeof(err)) != 0)
            status = fail("%s; nothing was changed", err);
    }
    if (status == 0 && (fflush(stdout) != 0 || ferror(stdout)))
        status = fail("cannot write the output: %s; nothing was changed", strerror(errno));
    if (status) {
        catalog_rollback(c.cat);
    } else if (catalog_commit(c.cat)) {
        status = fail("%s; nothing was changed%s", catalog_errmsg(c.cat),
                      strcmp(c.cmd->words, "key create") == 0 ? " and the key above is not valid" : "");
    } else {
        if (c.note[0])
            fprintf(stderr, "%s\n", c.note);
        if (fleet.follow)
            status = publish_in_transaction(&c, &fleet, false, "the change is made, but not published"
                                            " (`tierctl publish` sends it later): ");
    }
out:
    catalog_close(c.cat);
    return status;
}
