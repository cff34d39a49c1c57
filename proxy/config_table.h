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

#include "proxy/config_types.h"

/* Longest token quoted back in a message; a file's path is quoted whole, up to
 * CONFIG_QUOTE_PATH_MAX, so the operator sees which file. */
#define CONFIG_QUOTE_MAX 80
#define CONFIG_QUOTE_PATH_MAX 512
#define CONFIG_MAX_WORKERS 1024
#define CONFIG_KNOWN_SECTIONS "(known: proxy, admin, auth, plans, limits, log)"

enum dtype {
    D_HOSTPORT,   /* char *host at offset, uint16_t port at offset2 */
    D_URLS,       /* char **list at offset, size_t count at offset2: http:// URLs */
    D_CIDRS,      /* struct cidr *list at offset, size_t count at offset2 */
    D_PATHS,      /* char **list at offset, size_t count at offset2: "/prefix" */
    D_INT,        /* int, between min and max */
    D_INT64,      /* int64_t, between min and max */
    D_STRING,     /* char * */
    D_TOKEN,      /* char *, an HTTP header name */
    D_BOOL,       /* bool, from words */
    D_ENUM,       /* an enum (int-sized), from words */
    D_WORD,       /* char *, one of words, stored as the word */
    D_REDIS_URL,  /* char *, redis://..., rediss://... (the store checks it further) or unix://... */
    D_ACCESS_LOG, /* char *: stdout -> "-", off -> NULL, else a path */
    D_STYLES,     /* unsigned: a set of HEADERS_* bits from "draft, ietf" (header_styles_parse) */
    D_SHARE,      /* double, a share: 0 < x <= 1 */
};

/* D_STRING, D_TOKEN and D_HOSTPORT: an empty value means NULL (off). Without it, empty is
 * an error. */
#define F_EMPTY_NULL 1u
/* D_STRING: an empty value is kept as "". */
#define F_EMPTY_OK 2u
/* A running process cannot change it: a reload keeps the running value. */
#define F_RESTART 4u
/* D_STRING: a file the proxy must be able to read (checked when set). */
#define F_READABLE 8u

struct word {
    const char *name;
    int value;
};

struct directive {
    const char *section;
    const char *key;
    enum dtype type;
    size_t offset;
    size_t offset2;
    int64_t min, max;
    const struct word *words;
    unsigned flags;
    const char *def;    /* the default, as it would be written in the file */
    const char *flag;   /* command-line flag, or NULL */
    const char *expect; /* "expected ..." in error messages */
};

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

/* Sets d's field of cfg from the text raw (trimmed here). Returns 0, -EINVAL with the
 * reason in why (the refused value quoted, a URL's password masked), or -ENOMEM. */
int config_directive_set(const struct directive *d, struct proxy_config *cfg, const char *raw, char *why,
                         size_t whylen);

/* s for a message: at most buflen - 8 characters (then "..."), non-printable bytes as '?'.
 * Returns buf (CONFIG_QUOTE_MAX + 8 bytes: at most CONFIG_QUOTE_MAX characters). */
const char *config_quote(const char *s, char *buf, size_t buflen);

/* Records where d's value in cfg came from, and the text given (value; a URL's password
 * masked, an upstream's too). Returns 0 or -ENOMEM. */
int config_set_origin(struct proxy_config *cfg, const struct directive *d, enum origin_kind kind, int line,
                      const char *flag, const char *value);

/* url quoted as config_quote does, with the password of each URL in it as *** (see
 * config_quote_url in config.h). */
const char *config_quote_masked(const char *url, char *buf, size_t buflen);

/* Frees the values of cfg the table points to, its origins and config_path; zeroes *cfg. */
void config_table_free(struct proxy_config *cfg);

/* TIERPROXY_LIMITS_STORE for [limits] store. */
void config_env_name(const struct directive *d, char *buf, size_t buflen);

/* Leading and trailing white space cut off, in place. */
char *config_trim(char *s);

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
