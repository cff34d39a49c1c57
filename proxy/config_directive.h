/* What a configuration directive is: its type of value, its flags, and the row that
 * describes it (config_table.c holds the rows, config_values.c their setters). Not for
 * use outside proxy/config*.c. */
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

struct directive;

/* Sets the field of cfg that d names from v (trimmed; cut up in place where that helps).
 * Returns 0; -EINVAL with the reason in why, the field unchanged; or -ENOMEM. One per type
 * of value: config_values.h. */
typedef int config_setter(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen);

/* A directive: where it is written, how its value is read (set, within min..max or words)
 * and where it goes in struct proxy_config (offset, and offset2 for a second field: a
 * port, a list's count). Rows are written with the per-type macros of config_table.c. */
struct directive {
    const char *section;
    const char *key;
    enum dtype type;
    config_setter *set;
    size_t offset;
    size_t offset2;
    int64_t min, max;
    const struct word *words;
    unsigned flags;
    const char *def;    /* the default, as it would be written in the file */
    const char *flag;   /* command-line flag, or NULL */
    const char *expect; /* "expected ..." in error messages */
};

