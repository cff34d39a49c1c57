/* tierctl: the table of commands and flags, and main, which runs a command in one
 * transaction (tierctl.h says how the program is built). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "tiers/limit_bounds.h"
#include "tiers/table.h"
#include "tiers/catalog_path.h"
#include "tiers/proxy_settings.h"
#include "tiers/tierctl.h"
#include "tiers/tierctl_fleet.h"

#define PLAN_FLAGS (LIMIT_FLAGS | F(SHADOW) | F(PRIORITY))
#define SIMULATE_FLAGS (F(PLAN) | F(RATE) | F(BURST) | F(ALGORITHM) | F(CONCURRENCY) | F(JSON))

/* The commands: the only source of usage text, and of which arguments and flags each
 * takes. */
static const struct cli_command commands[] = {
    {"init", "", "create the schema and the default plans (idempotent)",
     cmd_init, 0, 0, 0, 0, ACCESS_CREATE},
    {"plan add", "NAME [LIMIT-FLAGS] [--priority P]", "add a plan",
     cmd_plan_add, 1, 1, PLAN_FLAGS, F(RATE), ACCESS_WRITE},
    {"plan set", "NAME [LIMIT-FLAGS] [--priority P]",
     "replace the plan's route-less limits of the kinds given; what is not given stays",
     cmd_plan_set, 1, 1, PLAN_FLAGS, F(RATE), ACCESS_WRITE},
    {"plan list", "[--json]", "list the plans with their limits and number of users",
     cmd_plan_list, 0, 0, F(JSON), 0, ACCESS_READ},
    {"plan show", "NAME [--json]", "show a plan and its limits",
     cmd_plan_show, 1, 1, F(JSON), 0, ACCESS_READ},
    {"plan remove", "NAME", "remove a plan; refused while users are on it",
     cmd_plan_remove, 1, 1, 0, 0, ACCESS_WRITE},
    {"limit add", "PLAN LIMIT-FLAGS [--route \"METHOD /prefix\"]",
     "add limits, per route with --route (\"* /prefix\" = any method); prints the new limit ids",
     cmd_limit_add, 1, 1, LIMIT_FLAGS | F(ROUTE), F(RATE), ACCESS_WRITE},
    {"limit set", "PLAN LIMIT-ID LIMIT-FLAGS",
     "change one limit in place; it keeps its id and its counts (a new algorithm starts afresh)",
     cmd_limit_set, 2, 2, LIMIT_FLAGS, 0, ACCESS_WRITE},
    {"limit remove", "PLAN LIMIT-ID", "remove a limit",
     cmd_limit_remove, 2, 2, 0, 0, ACCESS_WRITE},
    {"cost set", "PLAN \"METHOD /prefix\" N",
     "requests on that route count N against every rate limit and quota of the plan (longest prefix wins)",
     cmd_cost_set, 3, 3, 0, 0, ACCESS_WRITE},
    {"cost remove", "PLAN \"METHOD /prefix\"", "requests on that route count 1 again",
     cmd_cost_remove, 2, 2, 0, 0, ACCESS_WRITE},
    {"user add", "ID --plan NAME", "add a user on a plan",
     cmd_user_add, 1, 1, F(PLAN), 0, ACCESS_WRITE},
    {"user set", "ID --plan NAME", "move a user to another plan",
     cmd_user_set, 1, 1, F(PLAN), 0, ACCESS_WRITE},
    {"user list", "[--plan NAME] [--json]", "list the users, or those on one plan",
     cmd_user_list, 0, 0, F(PLAN) | F(JSON), 0, ACCESS_READ},
    {"user show", "ID [--json]", "show a user and their keys",
     cmd_user_show, 1, 1, F(JSON), 0, ACCESS_READ},
    {"user remove", "ID", "remove a user; also revokes the user's keys",
     cmd_user_remove, 1, 1, 0, 0, ACCESS_WRITE},
    {"user limit add", "USER LIMIT-FLAGS [--route \"METHOD /prefix\"]",
     "the user's own limits; each replaces the plan's limits of its kind on the same route, "
     "their count carried over; prints the ids",
     cmd_user_limit_add, 1, 1, LIMIT_FLAGS | F(ROUTE), F(RATE), ACCESS_WRITE},
    {"user limit remove", "USER LIMIT-ID", "remove one of the user's own limits",
     cmd_user_limit_remove, 2, 2, 0, 0, ACCESS_WRITE},
    {"usage", "USER [--json] [--config FILE | --redis URL [--key-prefix P]]",
     "the user's standing on each limit (used, remaining, reset), read from the proxies' Redis store",
     cmd_usage, 1, 1, F(JSON) | F(REDIS) | F(KEY_PREFIX) | F(CONFIG), 0, ACCESS_NONE},
    {"key create", "USER [--label TEXT] [--json]", "print a new key alone on one line; it is never shown again",
     cmd_key_create, 1, 1, F(LABEL) | F(JSON), 0, ACCESS_WRITE},
    {"key list", "[USER] [--json]", "key id, user, label, created, revoked; never the key itself",
     cmd_key_list, 0, 1, F(JSON), 0, ACCESS_READ},
    {"key revoke", "KEY-ID", "revoke a key",
     cmd_key_revoke, 1, 1, 0, 0, ACCESS_WRITE},
    {"export", "[FILE]", "write the whole catalog as JSON (keys as hashes) to FILE or stdout",
     cmd_export, 0, 1, 0, 0, ACCESS_READ},
    {"backup", "FILE", "write a consistent copy of the live catalog to a new FILE (mode 0600; never overwrites)",
     cmd_backup, 1, 1, 0, 0, ACCESS_READ},
    {"import", "FILE", "replace the whole catalog with FILE (- = stdin); all or nothing, ids kept",
     cmd_import, 1, 1, 0, 0, ACCESS_CREATE},
    {"publish", "[--force]", "publish the local catalog to the fleet (refused when the fleet's changed since this "
     "file last published or pulled, unless --force)", cmd_publish, 0, 0, F(FORCE), 0, ACCESS_NONE},
    {"pull", "", "replace the local catalog by the fleet's", cmd_pull, 0, 0, 0, 0, ACCESS_NONE},
    {"status", "[--json]", "local and published versions, proxies following", cmd_status, 0, 0, F(JSON), 0,
     ACCESS_NONE},
    {"simulate", "LOG [--plan NAME | LIMIT-FLAGS] [--json]",
     "replay an access log against each user's plan, one plan, or the limits given: the requests and "
     "users they would reject; changes nothing",
     cmd_simulate, 1, 1, SIMULATE_FLAGS, F(RATE), ACCESS_NONE},
};

/* The flags, by id; those marked true are listed under LIMIT-FLAGS. */
static const struct cli_flag flags[N_FLAGS] = {
    [FLAG_RATE] = {"--rate", "N/WINDOW", "WINDOW: s, min, h, day, or a count with a unit: 10/15s, 3000/1min; "
                   "again for another window (a burst and a sustained rate: --rate 10/s --rate 500/min)", true},
    [FLAG_BURST] = {"--burst", "N", "extra requests allowed on top of each rate (sliding-log: limit + burst in "
                    "the window)", true},
    [FLAG_ALGORITHM] = {"--algorithm", "A", "sliding-log (default, exact) | sliding-window | token-bucket | "
                        "fixed-window, for each rate", true},
    [FLAG_CONCURRENCY] = {"--concurrency", "N", "at most N requests in flight and WebSocket connections open at once",
                          true},
    [FLAG_WS_MESSAGES] = {"--ws-messages", "N/WINDOW", "client-to-upstream WebSocket messages per connection", true},
    [FLAG_QUOTA] = {"--quota", "N/PERIOD", "PERIOD: day | week | month, calendar periods in UTC (weeks start on "
                    "Monday)", true},
    [FLAG_SHADOW] = {"--shadow", "on|off", "(plan add/set) count and report, but never reject; also yes/no, "
                     "true/false, 1/0", true},
    [FLAG_PRIORITY] = {"--priority", "P", "(plan add/set) 0 (shed first) .. 9 (shed last); default 5", false},
    [FLAG_ROUTE] = {"--route", "\"METHOD /prefix\"", "(limit add, user limit add) a per-route limit; the longest "
                    "matching prefix applies", false},
    [FLAG_PLAN] = {"--plan", "NAME", "(user add/set/list, simulate) the plan", false},
    [FLAG_LABEL] = {"--label", "TEXT", "(key create) a note to tell keys apart", false},
    [FLAG_JSON] = {"--json", NULL, "(list, show, key create, usage) print JSON", false},
    [FLAG_CONFIG] = {"--config", "FILE", "the proxy's INI file: the fleet's Redis ([limits] redis, redis_mode, "
                     "key_prefix) and [plans] follow (redis: every change is also published); default "
                     "$TIERPROXY_CONFIG, else " PROXY_SETTINGS_DEFAULT_FILE, false},
    [FLAG_FORCE] = {"--force", NULL, "(publish) publish even when the fleet's catalog changed since", false},
    [FLAG_REDIS] = {"--redis", "URL", "(usage) the proxies' Redis, instead of the INI file's", false},
    [FLAG_KEY_PREFIX] = {"--key-prefix", "P", "(usage) the proxies' [limits] key_prefix (default tierproxy:)", false},
    [FLAG_DB] = {"--db", "PATH", "the catalog; default $TIERPROXY_PLANS_DB, else $TIERPROXY_DB, else [plans] db of"
                 " --config FILE, else " DEFAULT_DB, false},
    [FLAG_HELP] = {"--help", NULL, "print this help, or after a command (or a group of them) its own", false},
    [FLAG_VERSION] = {"--version", NULL, "print the version", false},
};

static const struct cli_spec spec = {
    .commands = commands,
    .n_commands = sizeof(commands) / sizeof(commands[0]),
    .flags = flags,
    .n_flags = N_FLAGS,
    .global = F(DB) | F(CONFIG),
    .help_flag = FLAG_HELP,
    .version_flag = FLAG_VERSION,
    .synopsis = "[--db PATH]",
    .help_head = "        PATH defaults to $TIERPROXY_PLANS_DB, else $TIERPROXY_DB, else [plans] db of --config FILE,"
                 " else " DEFAULT_DB,
    .help_foot = "Flags may come anywhere after tierctl; COMMAND --help lists what a command takes.\n"
                 "A command that changes the catalog says what it changed in one line on stderr.\n"
                 "Exit status: 0 done, 1 refused or failed, 2 bad usage.\n",
};

_Static_assert(N_FLAGS <= CLI_MAX_FLAGS, "flag ids are bits of a command's mask");

/* ---- helpers of every command ---- */

void note(struct cli *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->note, sizeof(c->note), fmt, ap);
    va_end(ap);
}

int catalog_failed(struct cli *c)
{
    return cli_fail("%s", catalog_errmsg(c->cat));
}

int print_json(json_t *doc)
{
    if (!doc)
        return cli_fail("out of memory");
    int r = json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(doc);
    putchar('\n');
    return r ? cli_fail("cannot write output") : 0;
}

int listing_start(struct cli *c, json_t **parray)
{
    *parray = NULL;
    if (c->args.flag[FLAG_JSON] && !(*parray = json_array()))
        return cli_fail("out of memory");
    return 0;
}

int listing_end(struct cli *c, int r, json_t *array, struct table *t)
{
    if (r) {
        json_decref(array);
        table_print_free_silent(t);
        return r == -ENOMEM ? cli_fail("out of memory") : catalog_failed(c);
    }
    if (array)
        return print_json(array);
    table_print_free(t);
    return 0;
}

/* ---- main ---- */

/* Ends the command's transaction: commits when status is 0, the change left within the
 * catalog's bounds and stdout written; else rolls back. Returns the status. */
static int finish_transaction(struct cli *c, int status)
{
    char err[512];
    bool write = c->args.cmd->access != ACCESS_READ;
    /* every change (limit add/set, plan set, import, ...) leaves no request meeting more
     * limits than the proxy checks at once (limit_bounds.h) */
    if (status == 0 && write &&
        (tier_catalog_check_bounds(c->cat, err, sizeof(err)) != 0 ||
         tier_catalog_check_costs(c->cat, err, sizeof(err)) != 0))
        status = cli_fail("%s; nothing was changed", err);
    if (status == 0 && (fflush(stdout) != 0 || ferror(stdout)))
        status = cli_fail("cannot write the output: %s; nothing was changed", strerror(errno));
    if (status) {
        catalog_rollback(c->cat);
        return status;
    }
    if (catalog_commit(c->cat))
        return cli_fail("%s; nothing was changed%s", catalog_errmsg(c->cat),
                        strcmp(c->args.cmd->words, "key create") == 0 ? " and the key above is not valid" : "");
    if (c->note[0])
        fprintf(stderr, "%s\n", c->note);
    return 0;
}

/* Runs a command that uses the catalog in one transaction; a change is also published when
 * the proxy's file says follow = redis. Returns the exit status. */
static int run_in_transaction(struct cli *c)
{
    enum access access = (enum access)c->args.cmd->access;
    enum catalog_mode mode = access == ACCESS_READ ? CATALOG_READ_ONLY
                           : access == ACCESS_WRITE ? CATALOG_READ_WRITE
                           : CATALOG_CREATE;
    char err[512];
    struct proxy_settings fleet = {0};
    int status;
    if (access != ACCESS_READ && (status = read_fleet_config(c, &fleet, false)) != 0)
        return status;
    if (catalog_open(c->db_path, mode, &c->cat, err, sizeof(err)))
        return cli_fail("%s", err);
    if (catalog_begin(c->cat, access != ACCESS_READ)) {
        status = catalog_failed(c);
    } else {
        if (fleet.follow)
            fleet_rows_record(c->cat, &c->rows);
        status = finish_transaction(c, c->args.cmd->run(c));
    }
    if (status == 0 && fleet.follow) {
        fleet_rows_committed(c->cat, &c->rows);
        status = publish_in_transaction(c, &fleet, false, "the change is made, but not published"
                                        " (`tierctl publish` sends it later): ");
    }
    fleet_rows_stop(&c->rows);
    catalog_close(c->cat);
    return status;
}

int main(int argc, char **argv)
{
    struct cli c = {0};
    int status = cli_parse(&spec, argc, argv, &c.args);
    if (status == CLI_HELPED)
        return 0;
    if (status == CLI_VERSION) {
        printf("tierctl %s (catalog schema %d, SQLite %s)\n", TIERCTL_VERSION, CATALOG_SCHEMA_VERSION,
               sqlite3_libversion());
        return 0;
    }
    if (status || (status = limit_flags_parse(&c)) != 0)
        return status;
    char db_from_config[4096], err[512];
    if (catalog_path_find(c.args.flag[FLAG_DB], c.args.flag[FLAG_CONFIG], DEFAULT_DB, &c.db_path, db_from_config,
                          sizeof(db_from_config), err, sizeof(err)) != 0)
        return cli_fail("%s", err);
    if (c.args.cmd->access == ACCESS_NONE)
        return c.args.cmd->run(&c);   /* opens what it needs itself */
    return run_in_transaction(&c);
}
