/* tierproxy's configuration: defaults, then the INI file (config_file.c), then
 * TIERPROXY_<SECTION>_<KEY> environment variables, then command-line flags
 * (config_args.c), each overriding the one before, through one table of directives
 * (config_table.c). Every problem is reported, not only the first. */
#include "proxy/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/config_args.h"
#include "proxy/config_file.h"
#include "proxy/config_table.h"

static int apply_defaults(struct proxy_config *cfg, struct config_report *report)
{
    char why[256];
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
        int r = config_directive_set(d, cfg, d->def, why, sizeof(why));
        if (r) {
            config_report(report, "", "default [%s] %s: %s", d->section, d->key, why);
            return r;
        }
    }
    return 0;
}

/* The sources over the defaults, in precedence order: the file, the environment, the flags. */
static int apply_sources(struct proxy_config *cfg, const char *path, const struct config_args *a, char **envp,
                         struct config_report *report)
{
    int r = 0;
    if (path != NULL)
        r = config_file_load(cfg, path, report);
    if (r == 0)
        r = config_env_apply(cfg, envp, report);
    if (r == 0)
        r = config_args_apply(a, cfg, report);
    if (r == 0 && path != NULL && (cfg->config_path = strdup(path)) == NULL) {
        config_report(report, "", "out of memory");
        r = -ENOMEM;
    }
    return r;
}

static int load(int argc, char **argv, char **envp, const char *path_override, struct proxy_config *out,
                enum config_action *paction, struct config_report *report)
{
    struct proxy_config cfg;
    struct config_args a;
    memset(&cfg, 0, sizeof(cfg));
    if (out == NULL)
        return -EINVAL;
    memset(out, 0, sizeof(*out));

    int r = config_args_parse(argc, argv, &a, report);
    if (r)
        goto out;
    cfg.origins = calloc(config_n_directives, sizeof(*cfg.origins));
    if (cfg.origins == NULL) {
        config_report(report, "", "out of memory");
        r = -ENOMEM;
        goto out;
    }
    r = apply_defaults(&cfg, report);
    /* --help and --version read no file: a broken one must not hide them. */
    if (r == 0 && a.action != CONFIG_HELP && a.action != CONFIG_VERSION)
        r = apply_sources(&cfg, path_override ? path_override : a.config_path, &a, envp, report);
    if (r == 0 && report->count > 0)
        r = -EINVAL;
    if (r)
        goto out;
    if (cfg.workers == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.workers = cores < 1 ? 1 : cores > CONFIG_MAX_WORKERS ? CONFIG_MAX_WORKERS : (int)cores;
    }
    if (paction)
        *paction = a.action;
    *out = cfg;
    memset(&cfg, 0, sizeof(cfg));
out:
    config_free(&cfg);
    free(a.set);
    return r;
}

int config_load_reported(int argc, char **argv, char **envp, struct proxy_config *cfg, enum config_action *paction,
                         config_problem_fn *problem, void *ctx, char *err, size_t errlen)
{
    struct config_report report = {.fn = problem, .ctx = ctx, .first = err, .first_len = errlen};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    return load(argc, argv, envp, NULL, cfg, paction, &report);
}

int config_load(int argc, char **argv, char **envp, struct proxy_config *cfg, enum config_action *paction, char *err,
                size_t errlen)
{
    return config_load_reported(argc, argv, envp, cfg, paction, NULL, NULL, err, errlen);
}

int config_reload_reported(const struct proxy_config *current, int argc, char **argv, char **envp,
                           struct proxy_config *fresh, config_problem_fn *problem, void *ctx, char *err,
                           size_t errlen)
{
    enum config_action action;
    struct config_report report = {.fn = problem, .ctx = ctx, .first = err, .first_len = errlen};
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    return load(argc, argv, envp, current ? current->config_path : NULL, fresh, &action, &report);
}

int config_reload(const struct proxy_config *current, int argc, char **argv, char **envp, struct proxy_config *fresh,
                  char *err, size_t errlen)
{
    return config_reload_reported(current, argc, argv, envp, fresh, NULL, NULL, err, errlen);
}

static bool same_string(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

/* Swaps size bytes of a and b; whether they differed. */
static bool swap_bytes(void *a, void *b, size_t size)
{
    unsigned char tmp[sizeof(struct config_origin) > 16 ? sizeof(struct config_origin) : 16];
    bool differs = memcmp(a, b, size) != 0;
    memcpy(tmp, a, size);
    memcpy(a, b, size);
    memcpy(b, tmp, size);
    return differs;
}

/* The width of a directive's value held in place (0: a string or a list). */
static size_t scalar_size(enum dtype type)
{
    switch (type) {
    case D_INT:
    case D_ENUM:
        return sizeof(int);
    case D_INT64:
        return sizeof(int64_t);
    case D_BOOL:
        return sizeof(bool);
    case D_SHARE:
        return sizeof(double);
    default:
        return 0;
    }
}

/* Swaps d's value between running and fresh: whether it differed; -1 for a list (lists
 * are all reloadable). */
static int swap_value(const struct directive *d, struct proxy_config *running, struct proxy_config *fresh)
{
    char *a = (char *)running + d->offset, *b = (char *)fresh + d->offset;
    size_t size = scalar_size(d->type);
    if (size > 0)
        return swap_bytes(a, b, size);
    switch (d->type) {
    case D_HOSTPORT:
    case D_STRING:
    case D_TOKEN:
    case D_WORD:
    case D_REDIS_URL:
    case D_ACCESS_LOG: {
        bool differs = !same_string(*(char **)a, *(char **)b);
        swap_bytes(a, b, sizeof(char *));
        if (d->type == D_HOSTPORT)
            differs |= swap_bytes((char *)running + d->offset2, (char *)fresh + d->offset2, sizeof(uint16_t));
        return differs;
    }
    default:
        return -1;
    }
}

void config_keep_restart_only(struct proxy_config *running, struct proxy_config *fresh, char *changed,
                              size_t changed_len)
{
    size_t used = 0;
    if (changed_len > 0)
        changed[0] = '\0';
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
        if (!(d->flags & F_RESTART))
            continue;
        if (running->origins != NULL && fresh->origins != NULL)
            swap_bytes(&running->origins[i], &fresh->origins[i], sizeof(struct config_origin));
        if (swap_value(d, running, fresh) == 1 && used < changed_len) {
            int n = snprintf(changed + used, changed_len - used, "%s[%s] %s", used ? ", " : "", d->section, d->key);
            if (n > 0)
                used += (size_t)n < changed_len - used ? (size_t)n : changed_len - used - 1;
        }
    }
}

static struct config_origin origin_of(const struct proxy_config *cfg, const struct directive *d)
{
    return cfg->origins != NULL ? cfg->origins[d - config_directives] : (struct config_origin){0};
}

/* Where a value came from, short: "FILE:LINE", "--flag", "TIERPROXY_...", "the default". */
static const char *source_of(const struct proxy_config *cfg, const struct directive *d, char *buf, size_t buflen)
{
    struct config_origin o = origin_of(cfg, d);
    switch (o.kind) {
    case ORIGIN_FILE:
        snprintf(buf, buflen, "%s:%d", cfg->config_path != NULL ? cfg->config_path : "?", o.line);
        break;
    case ORIGIN_FLAG:
        snprintf(buf, buflen, "%s", o.flag);
        break;
    case ORIGIN_ENV:
        config_env_name(d, buf, buflen);
        break;
    case ORIGIN_DEFAULT:
        snprintf(buf, buflen, "the default");
        break;
    }
    return buf;
}

const char *config_origin(const struct proxy_config *cfg, const char *section, const char *key, char *buf,
                          size_t buflen)
{
    const struct directive *d = config_find_directive(section, key);
    if (buflen == 0)
        return buf;
    if (d == NULL) {
        snprintf(buf, buflen, "[%s] %s", section, key);
        return buf;
    }
    if (origin_of(cfg, d).kind == ORIGIN_DEFAULT) {
        snprintf(buf, buflen, "[%s] %s (default)", d->section, d->key);
        return buf;
    }
    source_of(cfg, d, buf, buflen);
    if (origin_of(cfg, d).kind == ORIGIN_FILE) {
        size_t used = strlen(buf);
        snprintf(buf + used, buflen - used, ": [%s] %s", d->section, d->key);
    }
    return buf;
}

void config_settings(const struct proxy_config *cfg, config_setting_fn *fn, void *ctx)
{
    char name[64], from[1200];
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
        const char *value = cfg->origins != NULL && cfg->origins[i].value != NULL ? cfg->origins[i].value : d->def;
        snprintf(name, sizeof(name), "[%s] %s", d->section, d->key);
        fn(ctx, name, value, source_of(cfg, d, from, sizeof(from)));
    }
}

const char *config_quote_url(const char *url, char *buf, size_t buflen)
{
    return config_quote_masked(url, buf, buflen);
}

void config_free(struct proxy_config *cfg)
{
    config_table_free(cfg);
}

const char *config_usage(void)
{
    return config_args_usage();
}

