/* The command line and the environment of tierproxy's configuration. See config_args.h. */
#include "proxy/config_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char usage_line[] =
    "usage: tierproxy [-c FILE] [--listen ADDR:PORT] [--upstream URL] [--db PATH] "
    "[--redis URL] [--admin ADDR:PORT] [--check] [--version] [--help]";

static const char usage_text[] =
    "usage: tierproxy [-c FILE] [--listen ADDR:PORT] [--upstream URL] [--db PATH]\n"
    "                 [--redis URL] [--admin ADDR:PORT] [--check] [--version] [--help]\n"
    "\n"
    "  -c FILE             read the INI configuration FILE\n"
    "  --listen ADDR:PORT  [proxy] listen (default 127.0.0.1:8080; IPv6 as [::1]:8080; a host\n"
    "                      name is resolved at start)\n"
    "  --upstream URL      [proxy] upstream: http:// or https:// URLs, comma-separated, used in turn\n"
    "  --db PATH           [plans] db: the SQLite catalog (default plans.db)\n"
    "  --redis URL         [limits] redis, and store = redis\n"
    "  --admin ADDR:PORT   [admin] listen for /health and /metrics; --admin= turns it off\n"
    "  --check             validate the configuration and the catalog, exit 0 or 1\n"
    "  --version           print the version and exit\n"
    "  --help              print this help and exit\n"
    "\n"
    "Flags take --flag VALUE or --flag=VALUE. An environment variable TIERPROXY_<SECTION>_<KEY>\n"
    "(e.g. TIERPROXY_LIMITS_STORE=redis) overrides the file, and a flag overrides both.\n";

const char *config_args_usage(void)
{
    return usage_text;
}

static const struct directive *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < config_n_directives; i++) {
        const char *f = config_directives[i].flag;
        if (f && strlen(f) == len && strncmp(f, name, len) == 0)
            return &config_directives[i];
    }
    return NULL;
}

static int usage_error(struct config_report *report, const char *what, const char *arg)
{
    char q[CONFIG_QUOTE_MAX + 8];
    config_report(report, "", "%s \"%s\"; %s", what, config_quote(arg, q, sizeof(q)), usage_line);
    return 2;
}

/* One flag that sets a directive, --flag VALUE or --flag=VALUE, at argv[*pi]. */
static int take_flag(int argc, char **argv, int *pi, struct config_args *a, struct config_report *report)
{
    const char *arg = argv[*pi], *eq = strchr(arg, '='), *value;
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const struct directive *d = find_flag(arg, name_len);
    if (d == NULL)
        return usage_error(report, "unknown option", arg);
    if (eq) {
        value = eq + 1;
    } else {
        if (*pi + 1 >= argc || argv[*pi + 1] == NULL)
            return usage_error(report, "missing value after", arg);
        value = argv[++*pi];
    }
    a->set[a->n_set++] = (struct config_pending){d, value, d->flag};
    if (strcmp(d->flag, "--redis") == 0)
        a->set[a->n_set++] = (struct config_pending){config_find_directive("limits", "store"), "redis", d->flag};
    return 0;
}

int config_args_parse(int argc, char **argv, struct config_args *a, struct config_report *report)
{
    bool help = false, version = false, check = false;

    memset(a, 0, sizeof(*a));
    if (argc > 1) {
        /* --redis sets two directives, so at most two per argument */
        a->set = calloc((size_t)argc * 2, sizeof(*a->set));
        if (a->set == NULL) {
            config_report(report, "", "out of memory");
            return -ENOMEM;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg == NULL)
            break;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            help = true;
        } else if (strcmp(arg, "--version") == 0) {
            version = true;
        } else if (strcmp(arg, "--check") == 0) {
            check = true;
        } else if (strcmp(arg, "-c") == 0 || strcmp(arg, "--config") == 0) {
            if (i + 1 >= argc || argv[i + 1] == NULL)
                return usage_error(report, "missing FILE after", arg);
            a->config_path = argv[++i];
        } else if (strncmp(arg, "--config=", 9) == 0) {
            a->config_path = arg + 9;
        } else if (strncmp(arg, "-c", 2) == 0) {
            a->config_path = arg + 2;
        } else if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0') {
            int r = take_flag(argc, argv, &i, a, report);
            if (r)
                return r;
        } else {
            return usage_error(report, "unexpected argument", arg);
        }
    }
    if (a->config_path && a->config_path[0] == '\0')
        return usage_error(report, "empty FILE after", "-c");
    a->action = help ? CONFIG_HELP : version ? CONFIG_VERSION : check ? CONFIG_CHECK : CONFIG_RUN;
    return 0;
}

/* Sets d from value, given by origin (a flag or a variable, named by where). */
static int set_from(struct proxy_config *cfg, const struct directive *d, enum origin_kind origin, const char *flag,
                    const char *where, const char *value, struct config_report *report)
{
    char why[1024];
    int r = config_directive_set(d, cfg, value, why, sizeof(why));
    if (r == 0)
        r = config_set_origin(cfg, d, origin, 0, flag, value);
    if (r == -ENOMEM) {
        config_report(report, where, "out of memory");
        return r;
    }
    if (r)
        config_report(report, where, "%s", why);
    return 0;
}

int config_args_apply(const struct config_args *a, struct proxy_config *cfg, struct config_report *report)
{
    for (size_t i = 0; i < a->n_set; i++) {
        const struct config_pending *p = &a->set[i];
        if (set_from(cfg, p->d, ORIGIN_FLAG, p->flag, p->flag, p->value, report) != 0)
            return -ENOMEM;
    }
    return 0;
}

/* A TIERPROXY_<SECTION>_... variable of a known section that names none of its keys. */
static void unknown_variable(const char *var, size_t len, struct config_report *report)
{
    for (size_t i = 0; i < config_n_sections; i++) {
        size_t sl = strlen(config_sections[i]);
        if (len >= 11 + sl && strncasecmp(var + 10, config_sections[i], sl) == 0 && var[10 + sl] == '_') {
            char vname[CONFIG_QUOTE_MAX + 8], q[CONFIG_QUOTE_MAX + 8];
            snprintf(vname, sizeof(vname), "%.*s", (int)len, var);
            config_report(report, config_quote(vname, q, sizeof(q)), "unknown variable: [%s] has no such key",
                          config_sections[i]);
            return;
        }
    }
}

int config_env_apply(struct proxy_config *cfg, char **envp, struct config_report *report)
{
    char name[96];

    for (char **e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "TIERPROXY_", 10) != 0 || eq == NULL)
            continue;
        size_t len = (size_t)(eq - *e);
        const struct directive *d = NULL;
        for (size_t i = 0; i < config_n_directives && d == NULL; i++) {
            config_env_name(&config_directives[i], name, sizeof(name));
            if (strlen(name) == len && strncmp(name, *e, len) == 0)
                d = &config_directives[i];
        }
        if (d == NULL)
            unknown_variable(*e, len, report);
        else if (set_from(cfg, d, ORIGIN_ENV, NULL, name, eq + 1, report) != 0)
            return -ENOMEM;
    }
    return 0;
}
