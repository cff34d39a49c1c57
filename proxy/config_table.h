/* The inside of tierproxy's configuration, shared by the files that read it: the table of
 * directives (like nginx's ngx_command_t: section, key, type, bounds, default and place
 * in struct proxy_config), the parsing of each value type, and the report of problems.
 * config_file.c reads the INI file, config_args.c the flags and the environment,
 * config.c puts them together. Not for use outside proxy/config*.c.
 *
 * A refused value is quoted (at most 80 characters, control bytes as "?"); in a URL (redis,
 * upstream) the password of each URL (after the user's ":" up to the last "@" before the
 * next "://", or a lone "password@") is "***": redis://:***@h:6379/0, http://alice:***@h.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/config_directive.h"
#include "proxy/config_types.h"
#include "proxy/config_values.h"

extern const struct directive config_directives[];
extern const size_t config_n_directives;
extern const char *const config_sections[];
extern const size_t config_n_sections;

/* Where a value came from; the default when nothing set it. */
enum origin_kind { ORIGIN_DEFAULT = 0, ORIGIN_FILE, ORIGIN_FLAG, ORIGIN_ENV };
struct config_origin {
    enum origin_kind kind;
    int line;         /* ORIGIN_FILE */
    const char *flag; /* ORIGIN_FLAG: the directive table's flag string */
    char *value;      /* the text given (a URL's password masked); NULL: the default's */
};

/* NULL when there is no such directive. */
const struct directive *config_find_directive(const char *section, const char *key);
bool config_known_section(const char *section);



/* Records where d's value in cfg came from, and the text given (value; a URL's password
 * masked, an upstream's too). Returns 0 or -ENOMEM. */
int config_set_origin(struct proxy_config *cfg, const struct directive *d, enum origin_kind kind, int line,
                      const char *flag, const char *value);


/* Frees the values of cfg the table points to, its origins and config_path; zeroes *cfg. */
void config_table_free(struct proxy_config *cfg);

/* TIERPROXY_LIMITS_STORE for [limits] store. */
void config_env_name(const struct directive *d, char *buf, size_t buflen);


/* The problems of one load: each goes to fn (when set) as it is found; the first is kept
 * as one line, "where: why", in first. */
struct config_report {
    config_problem_fn *fn;
    void *ctx;
    char *first;
    size_t first_len;
    unsigned count;
};

/* One problem: where the value came from ("FILE:LINE: [section] key", "--flag",
 * "TIERPROXY_...", or "" when nothing names it) and why, from fmt. */
void config_report(struct config_report *r, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
