/* The command line and the environment of tierproxy's configuration: the flags of the
 * directive table (--listen, --upstream, --db, --redis, --admin), -c, --check, --version,
 * --help, and the TIERPROXY_<SECTION>_<KEY> variables.
 *
 * --redis also sets store = redis, as a flag, so over the environment's store too.
 */
#pragma once
#include "proxy/config_table.h"

struct config_pending {
    const struct directive *d;
    const char *value;
    const char *flag; /* as typed, for messages */
};

struct config_args {
    enum config_action action;
    const char *config_path;
    struct config_pending *set; /* in argv order; free() it */
    size_t n_set;
};

/* The text of --help. */
const char *config_args_usage(void);

/* Reads argv into *a. Returns 0; 2 for a usage error (an unknown flag, a missing value),
 * reported with the usage line; -ENOMEM. */
int config_args_parse(int argc, char **argv, struct config_args *a, struct config_report *report);

/* Sets the values the flags give, in argv order, reporting each bad one (named by its
 * flag). Returns 0 or -ENOMEM. */
int config_args_apply(const struct config_args *a, struct proxy_config *cfg, struct config_report *report);

/* Sets every TIERPROXY_<SECTION>_<KEY> of envp, reporting each bad one (named by its
 * variable). A variable naming a known section but no key of it is a problem (a typo);
 * other TIERPROXY_* variables (TIERPROXY_DB, which is tierctl's) are left alone.
 * Returns 0 or -ENOMEM. */
int config_env_apply(struct proxy_config *cfg, char **envp, struct config_report *report);
