/* tierctl: manages the plans, limits, users and API keys in the catalog.
 *
 * Built like the SQLite shell: the command table (tierctl.c) is the one source of usage
 * text and of what each command accepts, read by one argument layer (tierctl_args.h);
 * each command is one cmd_* function, in a file per group of commands; cli_fail and
 * cli_usage_error are the only ways out with an error. Every command that uses the catalog
 * runs in one transaction (main): it is committed only when the command succeeded and its
 * output was written, so a failed command changes nothing.
 *
 * Exit status: 0 done, 1 refused or failed (one line on stderr), 2 bad usage (the reason
 * and the usage line on stderr).
 *
 * stdout carries what the command was asked for (a listing, a new key, new limit ids) and
 * nothing else, so that `KEY=$(tierctl key create alice)` captures the key alone. A
 * command that changes the catalog says what it changed in one line on stderr (`note`),
 * written only once the change is committed; reads say nothing there.
 *
 * The files: tierctl.c (the table, main and its transaction), tierctl_args.c (the
 * argument layer), tierctl_limit_flags.c (LIMIT-FLAGS into catalog limits, and limits
 * into words), tierctl_plan.c, tierctl_limit.c, tierctl_user.c, tierctl_key.c,
 * tierctl_cost.c, tierctl_usage.c, tierctl_simulate.c, and tierctl_transfer.c (export,
 * import, backup; publish, pull and status over tierctl_fleet.c). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "store/catalog/catalog.h"
#include "store/limit.h"
#include "tiers/tierctl_args.h"
#include "tiers/tierctl_fleet.h"

#define DEFAULT_DB "./plans.db"
#define MAX_RATE_FLAGS CLI_MAX_REPEAT   /* --rate given that often in one command */
#define MAX_FLAG_LIMITS (MAX_RATE_FLAGS + 3)   /* and one of each other kind */

/* The flags, in the order --help lists them. */
enum flag {
    FLAG_RATE, FLAG_BURST, FLAG_ALGORITHM, FLAG_CONCURRENCY, FLAG_WS_MESSAGES, FLAG_QUOTA, FLAG_SHADOW,
    FLAG_PRIORITY, FLAG_ROUTE, FLAG_PLAN, FLAG_LABEL, FLAG_JSON, FLAG_CONFIG, FLAG_FORCE, FLAG_REDIS,
    FLAG_KEY_PREFIX, FLAG_DB, FLAG_HELP, FLAG_VERSION,
    N_FLAGS,
};
#define F(name) CLI_FLAG(FLAG_##name)
#define LIMIT_FLAGS (F(RATE) | F(BURST) | F(ALGORITHM) | F(CONCURRENCY) | F(WS_MESSAGES) | F(QUOTA))

/* How a command uses the catalog: main opens it for the command, in one transaction, or
 * (none) the command opens what it needs itself. */
enum access { ACCESS_NONE, ACCESS_READ, ACCESS_WRITE, ACCESS_CREATE };

/* LIMIT-FLAGS after parsing. --burst and --algorithm go with every --rate given. */
struct limit_flags {
    int n_rates;
    int64_t rate_amount[MAX_RATE_FLAGS], rate_window_ms[MAX_RATE_FLAGS];
    bool burst, algorithm, concurrency, ws, shadow, quota, priority;
    int64_t burst_value, concurrency_value, ws_amount, ws_window_ms;
    int64_t quota_amount, priority_value;
    enum limit_period quota_period;
    enum limit_kind algorithm_value;
    bool shadow_value;
};

struct cli {
    struct cli_args args;              /* the command line */
    const char *db_path;
    struct limit_flags lf;
    char route_method[CATALOG_METHOD_MAX + 1];
    char route_prefix[CATALOG_PREFIX_MAX + 1];
    struct catalog *cat;
    char note[1024];                   /* what a change changed; printed after the commit */
    struct fleet_rows rows;            /* with follow = redis: the rows the change writes */
};

typedef int command_fn(struct cli *c);

command_fn cmd_init, cmd_plan_add, cmd_plan_set, cmd_plan_list, cmd_plan_show, cmd_plan_remove;
command_fn cmd_limit_add, cmd_limit_set, cmd_limit_remove;
command_fn cmd_user_add, cmd_user_set, cmd_user_list, cmd_user_show, cmd_user_remove;
command_fn cmd_user_limit_add, cmd_user_limit_remove;
command_fn cmd_key_create, cmd_key_list, cmd_key_revoke;
command_fn cmd_cost_set, cmd_cost_remove;
command_fn cmd_usage, cmd_simulate;
command_fn cmd_export, cmd_import, cmd_backup, cmd_publish, cmd_pull, cmd_status;

/* ---- tierctl.c ---- */

/* Records the one line a change prints on stderr once it is committed. */
__attribute__((format(printf, 2, 3)))
void note(struct cli *c, const char *fmt, ...);

/* Says the catalog's last error; returns the refused status. */
int catalog_failed(struct cli *c);

/* Prints doc on stdout and frees it (NULL: out of memory). Returns 0 or the status, said. */
int print_json(json_t *doc);

struct table;

/* A listing (user list, key list): with --json, *parray is a new array to collect into
 * (else NULL, and a table is printed). Returns 0 or the status, said why. */
int listing_start(struct cli *c, json_t **parray);

/* Ends a listing: r is what the catalog's walk returned. Prints the array (and frees it)
 * or the table (freeing it); on r != 0 frees both, prints nothing and says why. Returns
 * the status. */
int listing_end(struct cli *c, int r, json_t *array, struct table *t);

/* ---- tierctl_limit_flags.c ---- */

/* Parses and checks the LIMIT-FLAGS, --shadow, --priority and --route into c->lf and
 * c->route_*; pure, before the catalog is opened. Returns 0 or the status, said why. */
int limit_flags_parse(struct cli *c);

/* Parses "METHOD /prefix" (--route, or a cost's route) into c->route_method and
 * c->route_prefix: the method upper-cased; "*" = any method. Returns 0 or the status. */
int parse_route(struct cli *c, const char *v);

/* Usage errors shared by the commands that add limits: --burst or --algorithm without
 * --rate, and (need_kind) no limit at all. Returns 0 or the usage status, said why. */
int limit_flags_check(struct cli *c, bool need_kind);

/* The limits the LIMIT-FLAGS ask for, route-less or (with_route) on --route, in the order
 * rates (as given), concurrency, ws-messages, quota; at most MAX_FLAG_LIMITS. Burst and
 * algorithm default to 0 and sliding-log. Returns how many. */
int limits_from_flags(const struct cli *c, int64_t plan_id, bool with_route, struct catalog_limit *limits);

/* Appends to a line being built; one longer than buf is cut, never overrun. */
__attribute__((format(printf, 3, 4)))
void append(char *buf, size_t len, const char *fmt, ...);

/* "rate", "concurrency", "quota", "ws-messages". */
const char *kind_word(enum catalog_limit_kind kind);

/* "100/min", "100/min burst 10 token-bucket", "concurrency 10", "ws-messages 10/s",
 * "quota 100/day", each followed by " on GET /v1" for a route. */
void describe_limit(const struct catalog_limit *l, char *buf, size_t len);

/* A limit's numbers without its kind: "3/10s", "100/min burst 10 token-bucket", "10". */
void describe_value(const struct catalog_limit *l, char *buf, size_t len);

/* "rate 3/10s", "concurrency 10", "ws-messages 10/s on GET /v1". */
void describe_full(const struct catalog_limit *l, char *buf, size_t len);

/* ---- tierctl_limit.c ---- */

#define MAX_PLAN_LIMITS 64

/* A limit as read, with its route copied (the catalog's strings last only for the
 * callback). */
struct limit_copy {
    struct catalog_limit l;
    char method[CATALOG_METHOD_MAX + 1];
    char prefix[CATALOG_PREFIX_MAX + 1];
};

/* Which limits of a plan collect_limits keeps, and where. */
struct limit_pick {
    int kind;                          /* an enum catalog_limit_kind, or -1 = any */
    bool routeless_only;
    int64_t id;                        /* 0 = any */
    struct limit_copy *items;          /* MAX_PLAN_LIMITS of them */
    size_t n;
};

/* Fills pick with the plan's limits it asks for, in id order. Returns 0 or the status. */
int collect_limits(struct cli *c, const char *plan_name, int64_t plan_id, struct limit_pick *pick);

/* Writes a changed limit in place (same id). Returns 0, or the status after saying why
 * (a rate and burst the catalog cannot hold are refused by name). */
int update_limit(struct cli *c, const struct catalog_limit *l);

/* Adds the limits; each receives its new id. Returns 0 or the status, said why. */
int add_limits(struct cli *c, struct catalog_limit *limits, int n);

/* Once limits were added for whom ("plan gold", "user alice"): checks the catalog's
 * bounds, prints the new ids on stdout and notes "WHOM: added WHAT 7 rate 10/s".
 * Returns 0 or the status, said why. */
int announce_new_limits(struct cli *c, const struct catalog_limit *limits, int n, const char *whom,
                        const char *what);

/* catalog_limit_each callbacks: a limit as a row of `plan show` and `user show` (ctx: a
 * struct table of 6 columns), and as JSON appended to ctx (a json array). */
int limit_table_row(void *ctx, const struct catalog_limit *l);
int limit_json_append(void *ctx, const struct catalog_limit *l);

/* ---- tierctl_user.c, tierctl_key.c ---- */

/* A user id tierctl takes. Returns 0 or the usage status, said why. */
int check_user_id(struct cli *c, const char *id);

/* Keys as listed: JSON (array set) or table rows (with a USER column when show_user). */
struct key_view {
    json_t *array;
    struct table *table;
    bool show_user;
};

/* catalog_key_each callback for a struct key_view. */
int list_key(void *ctx, const struct catalog_key *key);

/* ---- tierctl_transfer.c ---- */

struct proxy_settings;

/* Reads where the fleet's catalog lives (tierctl_fleet.h); needed: a file must be found.
 * Returns 0 or the status, said why. */
int read_fleet_config(struct cli *c, struct proxy_settings *fc, bool needed);

/* Publishes the catalog in a write transaction of its own; status 0 or 1 (said why, after
 * failed). */
int publish_in_transaction(struct cli *c, const struct proxy_settings *fc, bool force, const char *failed);
