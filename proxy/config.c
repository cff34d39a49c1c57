/* tierproxy's configuration, as one table of directives (like nginx's ngx_command_t):
 * section, key, type, bounds, default and place in struct proxy_config. The same table
 * drives the INI file (libinih), the command-line flags and the TIERPROXY_<SECTION>_<KEY>
 * environment variables. Precedence: defaults < file < flags < environment. */
#include "proxy/config.h"

#include "proxy/http_token.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <arpa/inet.h>

/* Longest line accepted in the INI file; longer lines are an error naming the line. */
#define CONFIG_LINE_MAX 16384
/* Longest token quoted back in an error message. */
#define QUOTE_MAX 80
#define MAX_TIMEOUT_MS INT64_C(86400000) /* one day */
#define MAX_WORKERS 1024

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
    D_REDIS_URL,  /* char *, redis://... or unix://... */
    D_ACCESS_LOG, /* char *: stdout -> "-", off -> NULL, else a path */
    D_STYLES,     /* unsigned: a set of HEADERS_* bits from "draft, ietf" (header_styles_parse) */
    D_SHARE,      /* double, a share: 0 < x <= 1 */
};

/* D_STRING and D_HOSTPORT: an empty value means NULL (off). Without it, empty is an error. */
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

/* Where a value came from; the default when nothing set it. */
enum origin_kind { ORIGIN_DEFAULT = 0, ORIGIN_FILE, ORIGIN_FLAG, ORIGIN_ENV };
struct config_origin {
    enum origin_kind kind;
    int line;         /* ORIGIN_FILE */
    const char *flag; /* ORIGIN_FLAG: the directive table's flag string */
};

_Static_assert(sizeof(enum store_kind) == sizeof(int), "D_ENUM writes an int");
_Static_assert(sizeof(enum limiter_store_error) == sizeof(int), "D_ENUM writes an int");
_Static_assert(sizeof(enum redis_mode) == sizeof(int), "D_ENUM writes an int");

static const struct word bool_words[] = {
    {"yes", 1}, {"no", 0}, {"true", 1}, {"false", 0}, {"on", 1}, {"off", 0},
    {"1", 1},   {"0", 0},  {NULL, 0},
};
static const struct word store_error_words[] = {
    {"open", LIMITER_STORE_ERROR_OPEN}, {"closed", LIMITER_STORE_ERROR_CLOSED}, {"local", LIMITER_STORE_ERROR_LOCAL},
    {NULL, 0}};
static const struct word path_case_words[] = {{"insensitive", 1}, {"sensitive", 0}, {NULL, 0}};
static const struct word underscore_words[] = {{"forward", 1}, {"drop", 0}, {NULL, 0}};
static const struct word store_words[] = {
    {"memory", STORE_MEMORY}, {"redis", STORE_REDIS}, {NULL, 0}};
static const struct word follow_words[] = {{"none", 0}, {"redis", 1}, {NULL, 0}};
static const struct word redis_mode_words[] = {
    {"single", REDIS_MODE_SINGLE}, {"cluster", REDIS_MODE_CLUSTER}, {NULL, 0}};
static const struct word level_words[] = {
    {"debug", 0}, {"info", 1}, {"warn", 2}, {"error", 3}, {NULL, 0}};

#define OFF(field) offsetof(struct proxy_config, field)
#define HOSTPORT_EXPECT "HOST:PORT (IPv6 as [::1]:8080)"

static const struct directive directives[] = {
    {"proxy", "listen", D_HOSTPORT, OFF(listen_host), OFF(listen_port), 0, 0, NULL, F_RESTART,
     "127.0.0.1:8080", "--listen", HOSTPORT_EXPECT},
    {"proxy", "upstream", D_URLS, OFF(upstreams), OFF(n_upstreams), 0, 0, NULL, 0,
     "http://127.0.0.1:3000", "--upstream", "comma-separated http:// or https:// URLs"},
    {"proxy", "upstream_ca_file", D_STRING, OFF(upstream_ca_file), 0, 0, 0, NULL,
     F_EMPTY_NULL | F_READABLE, "", NULL, "a PEM file of CA certificates, or empty for the system's"},
    {"proxy", "upstream_tls_verify", D_BOOL, OFF(upstream_tls_verify), 0, 0, 0, bool_words, 0, "yes",
     NULL, "yes or no"},
    {"proxy", "workers", D_INT, OFF(workers), 0, 0, MAX_WORKERS, NULL, F_RESTART, "0", NULL, NULL},
    {"proxy", "connect_timeout_ms", D_INT64, OFF(connect_timeout_ms), 0, 1, MAX_TIMEOUT_MS,
     NULL, 0, "2000", NULL, NULL},
    {"proxy", "upstream_timeout_ms", D_INT64, OFF(upstream_timeout_ms), 0, 1, MAX_TIMEOUT_MS,
     NULL, 0, "30000", NULL, NULL},
    {"proxy", "websocket_idle_timeout_ms", D_INT64, OFF(websocket_idle_timeout_ms), 0, 0, MAX_TIMEOUT_MS,
     NULL, 0, "3600000", NULL, NULL},
    {"proxy", "upstream_max_inflight", D_INT64, OFF(upstream_max_inflight), 0, 0, INT64_C(1000000000), NULL, 0,
     "0", NULL, NULL},
    {"proxy", "max_body_bytes", D_INT64, OFF(max_body_bytes), 0, 0, INT64_C(1) << 40, NULL, 0,
     "10485760", NULL, NULL},
    {"proxy", "trusted_proxies", D_CIDRS, OFF(trusted_proxies), OFF(n_trusted_proxies), 0, 0,
     NULL, 0, "", NULL, "comma-separated CIDRs such as 10.0.0.0/8 or ::1/128"},
    {"proxy", "exempt_paths", D_PATHS, OFF(exempt_paths), OFF(n_exempt_paths), 0, 0, NULL, 0,
     "", NULL, "comma-separated path prefixes starting with /"},
    {"proxy", "path_case", D_BOOL, OFF(path_case_insensitive), 0, 0, 0, path_case_words, 0, "sensitive", NULL,
     "sensitive or insensitive"},
    {"proxy", "underscores_in_headers", D_BOOL, OFF(underscores_forward), 0, 0, 0, underscore_words, 0, "drop",
     NULL, "drop or forward"},
    {"admin", "listen", D_HOSTPORT, OFF(admin_host), OFF(admin_port), 0, 0, NULL, F_EMPTY_NULL | F_RESTART,
     "127.0.0.1:9090", "--admin", HOSTPORT_EXPECT " or empty for off"},
    {"auth", "key_header", D_TOKEN, OFF(key_header), 0, 0, 0, NULL, 0, "Authorization", NULL,
     "a header name"},
    {"auth", "anonymous_plan", D_STRING, OFF(anonymous_plan), 0, 0, 0, NULL, F_EMPTY_NULL, "",
     NULL, "a plan name or empty"},
    {"auth", "forward_key", D_BOOL, OFF(forward_key), 0, 0, 0, bool_words, 0, "no", NULL,
     "yes or no"},
    {"plans", "db", D_STRING, OFF(db), 0, 0, 0, NULL, F_RESTART, "plans.db", "--db", "a file path"},
    {"plans", "refresh_ms", D_INT64, OFF(refresh_ms), 0, 1, MAX_TIMEOUT_MS, NULL, F_RESTART, "1000",
     NULL, NULL},
    {"plans", "follow", D_BOOL, OFF(follow_redis), 0, 0, 0, follow_words, F_RESTART, "none", NULL, "none or redis"},
    {"limits", "store", D_ENUM, OFF(store), 0, 0, 0, store_words, F_RESTART, "memory", NULL,
     "memory or redis"},
    {"limits", "redis_mode", D_ENUM, OFF(redis_mode), 0, 0, 0, redis_mode_words, F_RESTART, "single", NULL,
     "single or cluster"},
    {"limits", "redis", D_REDIS_URL, OFF(redis_url), 0, 0, 0, NULL, F_RESTART,
     "redis://127.0.0.1:6379/0", "--redis",
     "redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path"},
    {"limits", "redis_ca_file", D_STRING, OFF(redis_ca_file), 0, 0, 0, NULL, F_EMPTY_NULL | F_READABLE | F_RESTART,
     "", NULL, "a PEM file of CA certificates, or empty for the system's"},
    {"limits", "key_prefix", D_STRING, OFF(key_prefix), 0, 0, 0, NULL, F_EMPTY_OK | F_RESTART,
     "tierproxy:", NULL, "a key prefix"},
    {"limits", "on_store_error", D_ENUM, OFF(rate_on_store_error), 0, 0, 0, store_error_words, 0,
     "local", NULL, "open, closed or local"},
    {"limits", "concurrency_on_store_error", D_ENUM, OFF(concurrency_on_store_error), 0, 0, 0,
     store_error_words, 0, "local", NULL, "open, closed or local"},
    {"limits", "local_share", D_SHARE, OFF(local_share), 0, 0, 0, NULL, 0, "1.0", NULL,
     "a number greater than 0 and at most 1"},
    {"limits", "lease_ttl_ms", D_INT64, OFF(lease_ttl_ms), 0, 1, MAX_TIMEOUT_MS, NULL, F_RESTART,
     "30000", NULL, NULL},
    {"limits", "memory_max_subjects", D_INT64, OFF(memory_max_subjects), 0, 1, INT64_C(1000000000), NULL,
     F_RESTART, "1000000", NULL, NULL},
    {"limits", "headers", D_STYLES, OFF(headers), 0, 0, 0, NULL, 0, "draft", NULL,
     "a comma-separated list of draft, ietf, x; or off"},
    {"log", "access", D_ACCESS_LOG, OFF(access_log), 0, 0, 0, NULL, F_RESTART, "stdout", NULL,
     "stdout, off or a file path"},
    {"log", "level", D_WORD, OFF(log_level), 0, 0, 0, level_words, 0, "info", NULL,
     "debug, info, warn or error"},
};
#define N_DIRECTIVES (sizeof(directives) / sizeof(directives[0]))

static const char *const sections[] = {"proxy", "admin", "auth", "plans", "limits", "log"};
#define N_SECTIONS (sizeof(sections) / sizeof(sections[0]))

static const char usage_line[] =
    "usage: tierproxy [-c FILE] [--listen ADDR:PORT] [--upstream URL] [--db PATH] "
    "[--redis URL] [--admin ADDR:PORT] [--check] [--version] [--help]";

static const char usage_text[] =
    "usage: tierproxy [-c FILE] [--listen ADDR:PORT] [--upstream URL] [--db PATH]\n"
    "                 [--redis URL] [--admin ADDR:PORT] [--check] [--version] [--help]\n"
    "\n"
    "  -c FILE             read the INI configuration FILE\n"
    "  --listen ADDR:PORT  [proxy] listen (default 127.0.0.1:8080; IPv6 as [::1]:8080)\n"
    "  --upstream URL      [proxy] upstream: http:// or https:// URLs, comma-separated, used in turn\n"
    "  --db PATH           [plans] db: the SQLite catalog (default plans.db)\n"
    "  --redis URL         [limits] redis, and store = redis\n"
    "  --admin ADDR:PORT   [admin] listen for /health and /metrics; --admin= turns it off\n"
    "  --check             validate the configuration and the catalog, exit 0 or 1\n"
    "  --version           print the version and exit\n"
    "  --help              print this help and exit\n"
    "\n"
    "Flags take --flag VALUE or --flag=VALUE. A flag overrides the file, and an environment\n"
    "variable TIERPROXY_<SECTION>_<KEY> (e.g. TIERPROXY_LIMITS_STORE=redis) overrides both.\n";

const char *config_usage(void)
{
    return usage_text;
}

/* ---------------------------------------------------------------- small helpers */

static void errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* A token for an error message: at most QUOTE_MAX characters, non-printable bytes as '?'. */
static const char *quote(const char *s, char *buf, size_t buflen)
{
    size_t o = 0, i;
    for (i = 0; s[i] && o + 4 < buflen && i < QUOTE_MAX; i++)
        buf[o++] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (s[i] && o + 4 <= buflen) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

static void why_got(char *why, size_t whylen, const char *expect, const char *got)
{
    char q[QUOTE_MAX + 8];
    errf(why, whylen, "expected %s, got \"%s\"", expect, quote(got, q, sizeof(q)));
}

static char *trim(char *s)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        end--;
    *end = '\0';
    return s;
}

static bool has_ctl(const char *s)
{
    for (; *s; s++)
        if (iscntrl((unsigned char)*s))
            return true;
    return false;
}

static bool has_space_or_ctl(const char *s)
{
    for (; *s; s++)
        if (iscntrl((unsigned char)*s) || isspace((unsigned char)*s))
            return true;
    return false;
}

/* Parses a whole decimal number in [min, max]. Returns 0 or -EINVAL. */
static int parse_int64(const char *s, int64_t min, int64_t max, int64_t *pv)
{
    char *end;
    long long v;
    if (!(isdigit((unsigned char)s[0]) || (s[0] == '-' && isdigit((unsigned char)s[1]))))
        return -EINVAL;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *pv = v;
    return 0;
}

static int lookup_word(const struct word *words, const char *s, int *pv)
{
    for (const struct word *w = words; w->name; w++) {
        if (strcasecmp(w->name, s) == 0) {
            *pv = w->value;
            return 0;
        }
    }
    return -EINVAL;
}

static void free_strv(char **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Splits s (modified in place) at commas into trimmed items. An empty s gives no items.
 * Returns 0 with *pitems (free() the array only; items point into s) and *pn, -EINVAL
 * for an empty item ("a,,b"), -ENOMEM. */
static int split_commas(char *s, char ***pitems, size_t *pn)
{
    size_t n = 1, i = 0;
    char **items;

    *pitems = NULL;
    *pn = 0;
    if (*s == '\0')
        return 0;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    items = calloc(n, sizeof(*items));
    if (items == NULL)
        return -ENOMEM;
    for (char *p = s;; i++) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        items[i] = trim(p);
        if (*items[i] == '\0') {
            free(items);
            return -EINVAL;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    *pitems = items;
    *pn = n;
    return 0;
}

/* ---------------------------------------------------------------- value types */

static bool hostname_ok(const char *h)
{
    if (*h == '\0')
        return false;
    for (; *h; h++)
        if (!isalnum((unsigned char)*h) && *h != '.' && *h != '-' && *h != '_')
            return false;
    return true;
}

/* "host:port" or "[v6]:port" -> *phost (allocated, no brackets) and *pport. */
static int parse_hostport(const char *v, char **phost, uint16_t *pport)
{
    const char *host, *hend, *port;
    int64_t p;
    char *h;

    if (v[0] == '[') {
        host = v + 1;
        hend = strchr(host, ']');
        if (hend == NULL || hend[1] != ':')
            return -EINVAL;
        port = hend + 2;
    } else {
        hend = strrchr(v, ':');
        if (hend == NULL)
            return -EINVAL;
        host = v;
        port = hend + 1;
    }
    if (parse_int64(port, 1, 65535, &p))
        return -EINVAL;
    h = strndup(host, (size_t)(hend - host));
    if (h == NULL)
        return -ENOMEM;
    if (v[0] == '[') {
        unsigned char a[16];
        if (inet_pton(AF_INET6, h, a) != 1)
            goto bad;
    } else if (!hostname_ok(h)) {
        goto bad;
    }
    *phost = h;
    *pport = (uint16_t)p;
    return 0;
bad:
    free(h);
    return -EINVAL;
}

/* One upstream URL, in place: checks it and strips trailing slashes. https:// upstreams
 * are verified per [proxy] upstream_tls_verify and upstream_ca_file. */
static int check_upstream(char *u, char *why, size_t whylen)
{
    char q[QUOTE_MAX + 8];
    size_t len, scheme_len;

    if (strncasecmp(u, "http://", 7) == 0)
        scheme_len = 7;
    else if (strncasecmp(u, "https://", 8) == 0)
        scheme_len = 8;
    else
        goto bad;
    if (has_space_or_ctl(u) || strpbrk(u, "?#") != NULL)
        goto bad;
    len = strlen(u);
    while (len > scheme_len && u[len - 1] == '/')
        u[--len] = '\0';
    /* an authority must follow the scheme */
    if (u[scheme_len] == '\0' || u[scheme_len] == '/')
        goto bad;
    return 0;
bad:
    errf(why, whylen, "expected http://HOST[:PORT][/PATH] or https://..., got \"%s\"",
         quote(u, q, sizeof(q)));
    return -EINVAL;
}

static int set_list(const struct directive *d, void *field, size_t *pcount, const char *v,
                    char *why, size_t whylen)
{
    char q[QUOTE_MAX + 8];
    char **items = NULL, **strs = NULL, *copy;
    struct cidr *cidrs = NULL;
    size_t n = 0;
    int r;

    copy = strdup(v); /* split_commas cuts it up; v stays whole for messages */
    if (copy == NULL)
        return -ENOMEM;
    r = split_commas(copy, &items, &n);
    if (r == -EINVAL) {
        errf(why, whylen, "empty item in \"%s\"", quote(v, q, sizeof(q)));
        goto out;
    }
    if (r)
        goto out;
    if (n == 0 && d->type == D_URLS) {
        why_got(why, whylen, d->expect, "");
        r = -EINVAL;
        goto out;
    }
    if (n > 0) {
        if (d->type == D_CIDRS)
            cidrs = calloc(n, sizeof(*cidrs));
        else
            strs = calloc(n, sizeof(*strs));
        if (cidrs == NULL && strs == NULL) {
            r = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (d->type == D_CIDRS) {
            if (cidr_parse(items[i], &cidrs[i])) {
                errf(why, whylen, "expected a CIDR such as 10.0.0.0/8 or ::1/128, got \"%s\"",
                     quote(items[i], q, sizeof(q)));
                r = -EINVAL;
                goto out;
            }
            continue;
        }
        if (d->type == D_URLS) {
            r = check_upstream(items[i], why, whylen);
            if (r)
                goto out;
        } else if (items[i][0] != '/' || has_space_or_ctl(items[i])) {
            errf(why, whylen, "expected a path prefix starting with /, got \"%s\"",
                 quote(items[i], q, sizeof(q)));
            r = -EINVAL;
            goto out;
        }
        strs[i] = strdup(items[i]);
        if (strs[i] == NULL) {
            r = -ENOMEM;
            goto out;
        }
    }
    if (d->type == D_CIDRS) {
        free(*(struct cidr **)field);
        *(struct cidr **)field = cidrs;
        cidrs = NULL;
    } else {
        free_strv(*(char ***)field, *pcount);
        *(char ***)field = strs;
        strs = NULL;
    }
    *pcount = n;
    r = 0;
out:
    free(items);
    free(copy);
    free(cidrs);
    free_strv(strs, n);
    return r;
}

static int replace_string(void *field, const char *s)
{
    char *copy = NULL;
    if (s != NULL && (copy = strdup(s)) == NULL)
        return -ENOMEM;
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
}

static bool token_ok(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (!http_token_char((unsigned char)*s))
            return false;
    return true;
}

/* Sets d's field from the text v. Returns 0, -EINVAL with the reason in why, or -ENOMEM. */
static int directive_set(const struct directive *d, struct proxy_config *cfg, const char *raw,
                         char *why, size_t whylen)
{
    char *field = (char *)cfg + d->offset;
    char *copy, *v, q[QUOTE_MAX + 8];
    int64_t n;
    int w, r = -EINVAL;

    copy = strdup(raw);
    if (copy == NULL)
        return -ENOMEM;
    v = trim(copy);

    switch (d->type) {
    case D_HOSTPORT: {
        char *host = NULL;
        uint16_t port = 0;
        if (*v == '\0' && (d->flags & F_EMPTY_NULL)) {
            r = 0;
        } else {
            r = parse_hostport(v, &host, &port);
            if (r == -EINVAL)
                why_got(why, whylen, d->expect, v);
            if (r)
                break;
        }
        free(*(char **)field);
        *(char **)field = host;
        *(uint16_t *)((char *)cfg + d->offset2) = port;
        break;
    }
    case D_URLS:
    case D_CIDRS:
    case D_PATHS:
        r = set_list(d, field, (size_t *)((char *)cfg + d->offset2), v, why, whylen);
        break;
    case D_INT:
    case D_INT64:
        if (parse_int64(v, d->min, d->max, &n)) {
            errf(why, whylen, "expected a whole number from %lld to %lld, got \"%s\"",
                 (long long)d->min, (long long)d->max, quote(v, q, sizeof(q)));
            break;
        }
        if (d->type == D_INT)
            *(int *)field = (int)n;
        else
            *(int64_t *)field = n;
        r = 0;
        break;
    case D_STRING:
        if (has_ctl(v)) {
            why_got(why, whylen, d->expect, v);
        } else if (*v == '\0' && (d->flags & F_EMPTY_NULL)) {
            r = replace_string(field, NULL);
        } else if (*v == '\0' && !(d->flags & F_EMPTY_OK)) {
            why_got(why, whylen, d->expect, v);
        } else if ((d->flags & F_READABLE) && access(v, R_OK) != 0) {
            errf(why, whylen, "cannot read \"%s\": %s", quote(v, q, sizeof(q)), strerror(errno));
        } else {
            r = replace_string(field, v);
        }
        break;
    case D_SHARE: {
        /* strtod takes "nan", "inf" and hex; a share is plain decimal digits */
        bool plain = *v != '\0';
        for (const char *c = v; *c != '\0'; c++)
            plain = plain && (isdigit((unsigned char)*c) || *c == '.');
        char *end = NULL;
        errno = 0;
        double x = plain ? strtod(v, &end) : 0.0;
        if (!plain || errno != 0 || end == v || *end != '\0' || !(x > 0.0 && x <= 1.0)) {
            why_got(why, whylen, d->expect, v);
            break;
        }
        *(double *)field = x;
        r = 0;
        break;
    }
    case D_STYLES: {
        unsigned styles;
        if (header_styles_parse(v, &styles, why, whylen) == 0) {
            *(unsigned *)field = styles;
            r = 0;
        }
        break;
    }
    case D_TOKEN:
        if (!token_ok(v))
            why_got(why, whylen, d->expect, v);
        else
            r = replace_string(field, v);
        break;
    case D_BOOL:
    case D_ENUM:
    case D_WORD:
        if (lookup_word(d->words, v, &w)) {
            why_got(why, whylen, d->expect, v);
            break;
        }
        r = 0;
        if (d->type == D_BOOL) {
            *(bool *)field = w != 0;
        } else if (d->type == D_ENUM) {
            *(int *)field = w;
        } else {
            for (const struct word *x = d->words; x->name; x++)
                if (x->value == w)
                    r = replace_string(field, x->name);
        }
        break;
    case D_REDIS_URL:
        if ((strncasecmp(v, "redis://", 8) == 0 && v[8] != '\0') ||
            (strncasecmp(v, "rediss://", 9) == 0 && v[9] != '\0') ||
            (strncasecmp(v, "unix://", 7) == 0 && v[7] != '\0')) {
            if (has_space_or_ctl(v))
                why_got(why, whylen, d->expect, "...");
            else
                r = replace_string(field, v);
        } else {
            /* Quote only the scheme: the rest may hold a password. */
            const char *sep = strstr(v, "://");
            if (sep && sep - v < 16 && !has_space_or_ctl(v))
                errf(why, whylen, "expected %s, got \"%.*s://...\"", d->expect,
                     (int)(sep - v), v);
            else
                why_got(why, whylen, d->expect, "...");
        }
        break;
    case D_ACCESS_LOG:
        if (strcasecmp(v, "stdout") == 0 || strcmp(v, "-") == 0)
            r = replace_string(field, "-");
        else if (strcasecmp(v, "off") == 0)
            r = replace_string(field, NULL);
        else if (*v == '\0' || has_ctl(v))
            why_got(why, whylen, d->expect, v);
        else
            r = replace_string(field, v);
        break;
    }
    free(copy);
    if (r == -ENOMEM)
        errf(why, whylen, "out of memory");
    return r;
}

static const struct directive *find_directive(const char *section, const char *key)
{
    for (size_t i = 0; i < N_DIRECTIVES; i++)
        if (strcmp(directives[i].section, section) == 0 && strcmp(directives[i].key, key) == 0)
            return &directives[i];
    return NULL;
}

static bool known_section(const char *s)
{
    for (size_t i = 0; i < N_SECTIONS; i++)
        if (strcmp(sections[i], s) == 0)
            return true;
    return false;
}

/* Edit distance, for "did you mean". Only short names are compared. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), prev[64], cur[64];
    if (la >= 63 || lb >= 63)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(prev[0]));
    }
    return prev[lb];
}

/* "; did you mean "listen"?" for a key close to one of the section's keys, else "". */
static void suggest_key(const char *section, const char *key, char *buf, size_t buflen)
{
    const char *best = NULL;
    size_t best_d = 3;
    buf[0] = '\0';
    for (size_t i = 0; i < N_DIRECTIVES; i++) {
        if (strcmp(directives[i].section, section) != 0)
            continue;
        size_t dist = edit_distance(key, directives[i].key);
        if (dist < best_d) {
            best_d = dist;
            best = directives[i].key;
        }
    }
    if (best)
        snprintf(buf, buflen, "; did you mean \"%s\"?", best);
}

/* ---------------------------------------------------------------- the INI file */

#define KNOWN_SECTIONS "(known: proxy, admin, auth, plans, limits, log)"

/* An fgets-style reader for ini_parse_stream that counts lines (libinih 55 does not pass
 * line numbers to the handler), refuses overlong lines, and catches unknown [sections]
 * that hold no keys (libinih never shows those to the handler; one with keys is reported
 * by the handler, on the line of its first key). */
struct ini_source {
    FILE *f;
    const char *path;
    char *line;      /* CONFIG_LINE_MAX + 2 bytes */
    size_t len, pos; /* the current line, and how much of it went out */
    int lineno;
    int rc;          /* first error, with its text in err */
    char *err;
    size_t errlen;
    int set_on_line[N_DIRECTIVES];
    struct proxy_config *cfg;
    char unknown_section[64]; /* the last [section] header, when unknown */
    int unknown_line;         /* its line, or 0 */
};

/* An unknown section that got to its end without a key. Returns NULL for the reader. */
static char *unknown_empty_section(struct ini_source *s)
{
    char q[QUOTE_MAX + 8];
    errf(s->err, s->errlen, "%s:%d: unknown section [%s] " KNOWN_SECTIONS, s->path,
         s->unknown_line, quote(s->unknown_section, q, sizeof(q)));
    s->rc = -EINVAL;
    return NULL;
}

static char *ini_source_read(char *str, int num, void *stream)
{
    struct ini_source *s = stream;
    size_t k;

    if (s->rc || num < 2)
        return NULL;
    if (s->pos >= s->len) {
        if (fgets(s->line, CONFIG_LINE_MAX + 2, s->f) == NULL) {
            if (ferror(s->f)) {
                errf(s->err, s->errlen, "%s: read error after line %d", s->path, s->lineno);
                s->rc = -EIO;
                return NULL;
            }
            return s->unknown_line ? unknown_empty_section(s) : NULL;
        }
        s->lineno++;
        s->len = strlen(s->line);
        s->pos = 0;
        if (s->len > CONFIG_LINE_MAX && s->line[s->len - 1] != '\n') {
            errf(s->err, s->errlen, "%s:%d: line longer than %d bytes", s->path, s->lineno,
                 CONFIG_LINE_MAX);
            s->rc = -EINVAL;
            return NULL;
        }
        const char *p = s->line;
        if (s->lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0)
            p += 3;
        while (*p == ' ' || *p == '\t')
            p++;
        const char *close = *p == '[' ? strchr(p, ']') : NULL;
        if (close) {
            char name[sizeof(s->unknown_section)];
            size_t nlen = (size_t)(close - p - 1);
            if (s->unknown_line)
                return unknown_empty_section(s);
            if (nlen >= sizeof(name))
                nlen = sizeof(name) - 1;
            memcpy(name, p + 1, nlen);
            name[nlen] = '\0';
            if (!known_section(trim(name))) {
                snprintf(s->unknown_section, sizeof(s->unknown_section), "%s", trim(name));
                s->unknown_line = s->lineno;
            }
        }
    }
    k = s->len - s->pos;
    if (k > (size_t)num - 1)
        k = (size_t)num - 1;
    memcpy(str, s->line + s->pos, k);
    str[k] = '\0';
    s->pos += k;
    return str;
}

static int ini_source_handler(void *user, const char *section_raw, const char *key,
                              const char *value)
{
    struct ini_source *s = user;
    char section_buf[64], *section, why[256], hint[64], q[QUOTE_MAX + 8];
    const struct directive *d;
    size_t idx;
    int r;

    snprintf(section_buf, sizeof(section_buf), "%s", section_raw);
    section = trim(section_buf);
    if (section[0] == '\0') {
        errf(s->err, s->errlen, "%s:%d: key \"%s\" outside any [section]", s->path, s->lineno,
             quote(key, q, sizeof(q)));
        s->rc = -EINVAL;
        return 0;
    }
    if (!known_section(section)) {
        char qs[QUOTE_MAX + 8];
        errf(s->err, s->errlen, "%s:%d: unknown section [%s] for key \"%s\" " KNOWN_SECTIONS,
             s->path, s->lineno, quote(section, qs, sizeof(qs)), quote(key, q, sizeof(q)));
        s->rc = -EINVAL;
        return 0;
    }
    d = find_directive(section, key);
    if (d == NULL) {
        suggest_key(section, key, hint, sizeof(hint));
        errf(s->err, s->errlen, "%s:%d: unknown key \"%s\" in [%s]%s", s->path, s->lineno,
             quote(key, q, sizeof(q)), section, hint);
        s->rc = -EINVAL;
        return 0;
    }
    idx = (size_t)(d - directives);
    if (s->set_on_line[idx]) {
        errf(s->err, s->errlen, "%s:%d: [%s] %s: set twice (first on line %d)", s->path,
             s->lineno, d->section, d->key, s->set_on_line[idx]);
        s->rc = -EINVAL;
        return 0;
    }
    s->set_on_line[idx] = s->lineno;
    r = directive_set(d, s->cfg, value, why, sizeof(why));
    if (r) {
        errf(s->err, s->errlen, "%s:%d: [%s] %s: %s", s->path, s->lineno, d->section, d->key,
             why);
        s->rc = r;
        return 0;
    }
    s->cfg->origins[idx] = (struct config_origin){ORIGIN_FILE, s->lineno, NULL};
    s->cfg->file_settings++;
    return 1;
}

/* libinih 55 as packaged keeps its options in globals: set ours for the parse and put the
 * previous values back afterwards. Not thread-safe; configuration loads on one thread. */
struct inih_options {
    bool multiline, inline_comments, use_stack, realloc_, stop_on_first_error, no_value, bom;
    char *inline_prefixes, *start_prefixes;
    int max_line, initial_alloc;
};

static void inih_options_swap(struct inih_options *o)
{
    struct inih_options cur = {
        ini_allow_multiline, ini_allow_inline_comments, ini_use_stack, ini_allow_realloc,
        ini_stop_on_first_error, ini_allow_no_value, ini_allow_bom, ini_inline_comment_prefixes,
        ini_start_comment_prefixes, ini_max_line, ini_initial_alloc,
    };
    ini_allow_multiline = o->multiline;
    ini_allow_inline_comments = o->inline_comments;
    ini_use_stack = o->use_stack;
    ini_allow_realloc = o->realloc_;
    ini_stop_on_first_error = o->stop_on_first_error;
    ini_allow_no_value = o->no_value;
    ini_allow_bom = o->bom;
    ini_inline_comment_prefixes = o->inline_prefixes;
    ini_start_comment_prefixes = o->start_prefixes;
    ini_max_line = o->max_line;
    ini_initial_alloc = o->initial_alloc;
    *o = cur;
}

static int load_file(struct proxy_config *cfg, const char *path, char *err, size_t errlen)
{
    static char inline_prefixes[] = ";", start_prefixes[] = ";#";
    struct ini_source s;
    struct inih_options opts = {
        .multiline = false,      /* an indented line is not a continuation */
        .inline_comments = true, /* "key = value   ; comment" */
        .use_stack = false,
        .realloc_ = true, /* lines up to CONFIG_LINE_MAX, not 200 bytes */
        .stop_on_first_error = true,
        .no_value = false,
        .bom = true,
        .inline_prefixes = inline_prefixes,
        .start_prefixes = start_prefixes,
        .max_line = CONFIG_LINE_MAX + 3,
        .initial_alloc = 256,
    };
    int r;

    memset(&s, 0, sizeof(s));
    s.path = path;
    s.err = err;
    s.errlen = errlen;
    s.cfg = cfg;
    s.f = fopen(path, "r");
    if (s.f == NULL) {
        r = -errno;
        errf(err, errlen, "cannot open config file \"%s\": %s", path, strerror(errno));
        return r == -ENOMEM ? r : -EINVAL;
    }
    s.line = malloc(CONFIG_LINE_MAX + 2);
    if (s.line == NULL) {
        fclose(s.f);
        errf(err, errlen, "out of memory");
        return -ENOMEM;
    }

    inih_options_swap(&opts);
    r = ini_parse_stream(ini_source_read, &s, ini_source_handler, &s);
    inih_options_swap(&opts);

    if (s.rc) {
        r = s.rc;
    } else if (r == -2) {
        errf(err, errlen, "out of memory");
        r = -ENOMEM;
    } else if (r != 0) {
        errf(err, errlen, "%s:%d: expected [section] or key = value", path, r);
        r = -EINVAL;
    }
    free(s.line);
    fclose(s.f);
    return r == -EIO ? -EINVAL : r;
}

/* ---------------------------------------------------------------- flags and environment */

struct pending {
    const struct directive *d;
    const char *value;
    const char *flag; /* as typed, for errors */
};

static const struct directive *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_DIRECTIVES; i++) {
        const char *f = directives[i].flag;
        if (f && strlen(f) == len && strncmp(f, name, len) == 0)
            return &directives[i];
    }
    return NULL;
}

struct args {
    enum config_action action;
    const char *config_path;
    struct pending *set; /* in argv order */
    size_t n_set;
};

static int usage_error(char *err, size_t errlen, const char *what, const char *arg)
{
    char q[QUOTE_MAX + 8];
    errf(err, errlen, "%s \"%s\"; %s", what, quote(arg, q, sizeof(q)), usage_line);
    return 2;
}

/* Reads argv. Returns 0, 2 for a usage error, -ENOMEM. */
static int parse_args(int argc, char **argv, struct args *a, char *err, size_t errlen)
{
    bool help = false, version = false, check = false;

    memset(a, 0, sizeof(*a));
    if (argc > 1) {
        /* --redis sets two directives, so at most two per argument */
        a->set = calloc((size_t)argc * 2, sizeof(*a->set));
        if (a->set == NULL) {
            errf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq, *value;
        const struct directive *d;
        size_t name_len;

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
                return usage_error(err, errlen, "missing FILE after", arg);
            a->config_path = argv[++i];
        } else if (strncmp(arg, "--config=", 9) == 0) {
            a->config_path = arg + 9;
        } else if (strncmp(arg, "-c", 2) == 0) {
            a->config_path = arg + 2;
        } else if (strncmp(arg, "--", 2) == 0 && arg[2] != '\0') {
            eq = strchr(arg, '=');
            name_len = eq ? (size_t)(eq - arg) : strlen(arg);
            d = find_flag(arg, name_len);
            if (d == NULL)
                return usage_error(err, errlen, "unknown option", arg);
            if (eq) {
                value = eq + 1;
            } else {
                if (i + 1 >= argc || argv[i + 1] == NULL)
                    return usage_error(err, errlen, "missing value after", arg);
                value = argv[++i];
            }
            a->set[a->n_set++] = (struct pending){d, value, d->flag};
            if (strcmp(d->flag, "--redis") == 0)
                a->set[a->n_set++] = (struct pending){find_directive("limits", "store"),
                                                      "redis", d->flag};
        } else {
            return usage_error(err, errlen, "unexpected argument", arg);
        }
    }
    if (a->config_path && a->config_path[0] == '\0')
        return usage_error(err, errlen, "empty FILE after", "-c");
    a->action = help ? CONFIG_HELP : version ? CONFIG_VERSION : check ? CONFIG_CHECK : CONFIG_RUN;
    return 0;
}

/* TIERPROXY_LIMITS_STORE for [limits] store. */
static void env_name(const struct directive *d, char *buf, size_t buflen)
{
    size_t o = (size_t)snprintf(buf, buflen, "TIERPROXY_%s_%s", d->section, d->key);
    for (size_t i = 0; i < o && i < buflen; i++)
        buf[i] = (char)toupper((unsigned char)buf[i]);
}

/* Applies every TIERPROXY_<SECTION>_<KEY> in envp. A variable naming a known section but
 * no key of it is an error (a typo); other TIERPROXY_* variables (TIERPROXY_DB, which is
 * tierctl's) are left alone. */
static int apply_env(struct proxy_config *cfg, char **envp, char *err, size_t errlen)
{
    char name[96], why[256];

    if (envp == NULL)
        return 0;
    for (char **e = envp; *e; e++) {
        const char *eq = strchr(*e, '=');
        size_t len;
        bool matched = false;

        if (strncmp(*e, "TIERPROXY_", 10) != 0 || eq == NULL)
            continue;
        len = (size_t)(eq - *e);
        for (size_t i = 0; i < N_DIRECTIVES && !matched; i++) {
            env_name(&directives[i], name, sizeof(name));
            if (strlen(name) != len || strncmp(name, *e, len) != 0)
                continue;
            matched = true;
            int r = directive_set(&directives[i], cfg, eq + 1, why, sizeof(why));
            if (r) {
                errf(err, errlen, "%.*s: %s", (int)len, *e, why);
                return r;
            }
            cfg->origins[i] = (struct config_origin){ORIGIN_ENV, 0, NULL};
        }
        if (matched)
            continue;
        for (size_t i = 0; i < N_SECTIONS; i++) {
            size_t sl = strlen(sections[i]);
            if (len >= 11 + sl && strncasecmp(*e + 10, sections[i], sl) == 0 &&
                (*e)[10 + sl] == '_') {
                char vname[QUOTE_MAX + 8], q[QUOTE_MAX + 8];
                snprintf(vname, sizeof(vname), "%.*s", (int)len, *e);
                errf(err, errlen, "%s: unknown variable: [%s] has no such key",
                     quote(vname, q, sizeof(q)), sections[i]);
                return -EINVAL;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- load, reload, free */

static int apply_defaults(struct proxy_config *cfg, char *err, size_t errlen)
{
    char why[256];
    for (size_t i = 0; i < N_DIRECTIVES; i++) {
        int r = directive_set(&directives[i], cfg, directives[i].def, why, sizeof(why));
        if (r) {
            errf(err, errlen, "default [%s] %s: %s", directives[i].section, directives[i].key,
                 why);
            return r;
        }
    }
    return 0;
}

static int load(int argc, char **argv, char **envp, const char *path_override,
                struct proxy_config *out, enum config_action *paction, char *err, size_t errlen)
{
    struct proxy_config cfg;
    struct args a;
    const char *path;
    char why[256];
    int r;

    memset(&cfg, 0, sizeof(cfg));
    if (out)
        memset(out, 0, sizeof(*out));
    if (err && errlen)
        err[0] = '\0';
    if (out == NULL)
        return -EINVAL;

    r = parse_args(argc, argv, &a, err, errlen);
    if (r)
        goto out;
    path = path_override ? path_override : a.config_path;

    cfg.origins = calloc(N_DIRECTIVES, sizeof(*cfg.origins));
    if (cfg.origins == NULL) {
        errf(err, errlen, "out of memory");
        r = -ENOMEM;
        goto out;
    }
    r = apply_defaults(&cfg, err, errlen);
    if (r)
        goto out;
    /* --help and --version read no file: a broken one must not hide them. */
    if (a.action == CONFIG_HELP || a.action == CONFIG_VERSION)
        goto done;

    if (path) {
        r = load_file(&cfg, path, err, errlen);
        if (r)
            goto out;
    }
    for (size_t i = 0; i < a.n_set; i++) {
        r = directive_set(a.set[i].d, &cfg, a.set[i].value, why, sizeof(why));
        if (r) {
            errf(err, errlen, "%s: %s", a.set[i].flag, why);
            goto out;
        }
        cfg.origins[a.set[i].d - directives] = (struct config_origin){ORIGIN_FLAG, 0, a.set[i].flag};
    }
    r = apply_env(&cfg, envp, err, errlen);
    if (r)
        goto out;

    if (path && (cfg.config_path = strdup(path)) == NULL) {
        errf(err, errlen, "out of memory");
        r = -ENOMEM;
        goto out;
    }
done:
    if (cfg.workers == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.workers = cores < 1 ? 1 : cores > MAX_WORKERS ? MAX_WORKERS : (int)cores;
    }
    if (paction)
        *paction = a.action;
    *out = cfg;
    memset(&cfg, 0, sizeof(cfg));
    r = 0;
out:
    config_free(&cfg);
    free(a.set);
    return r;
}

int config_load(int argc, char **argv, char **envp, struct proxy_config *cfg,
                enum config_action *paction, char *err, size_t errlen)
{
    return load(argc, argv, envp, NULL, cfg, paction, err, errlen);
}

int config_reload(const struct proxy_config *current, int argc, char **argv, char **envp,
                  struct proxy_config *fresh, char *err, size_t errlen)
{
    enum config_action action;
    return load(argc, argv, envp, current ? current->config_path : NULL, fresh, &action, err,
                errlen);
}

static bool same_string(const char *a, const char *b)
{
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

#define SWAP(type, a, b)                                                                       \
    do {                                                                                       \
        type swap_tmp = *(type *)(a);                                                          \
        *(type *)(a) = *(type *)(b);                                                           \
        *(type *)(b) = swap_tmp;                                                               \
    } while (0)

void config_keep_restart_only(struct proxy_config *running, struct proxy_config *fresh, char *changed,
                              size_t changed_len)
{
    size_t used = 0;
    if (changed_len > 0)
        changed[0] = '\0';
    for (size_t i = 0; i < N_DIRECTIVES; i++) {
        const struct directive *d = &directives[i];
        if (!(d->flags & F_RESTART))
            continue;
        char *a = (char *)running + d->offset, *b = (char *)fresh + d->offset;
        bool differs;
        if (running->origins != NULL && fresh->origins != NULL)
            SWAP(struct config_origin, &running->origins[i], &fresh->origins[i]);
        switch (d->type) {
        case D_HOSTPORT:
            differs = !same_string(*(char **)a, *(char **)b) ||
                      *(uint16_t *)((char *)running + d->offset2) != *(uint16_t *)((char *)fresh + d->offset2);
            SWAP(char *, a, b);
            SWAP(uint16_t, (char *)running + d->offset2, (char *)fresh + d->offset2);
            break;
        case D_STRING:
        case D_TOKEN:
        case D_WORD:
        case D_REDIS_URL:
        case D_ACCESS_LOG:
            differs = !same_string(*(char **)a, *(char **)b);
            SWAP(char *, a, b);
            break;
        case D_INT:
        case D_ENUM:
            differs = *(int *)a != *(int *)b;
            SWAP(int, a, b);
            break;
        case D_INT64:
            differs = *(int64_t *)a != *(int64_t *)b;
            SWAP(int64_t, a, b);
            break;
        case D_BOOL:
            differs = *(bool *)a != *(bool *)b;
            SWAP(bool, a, b);
            break;
        case D_SHARE:
            differs = *(double *)a != *(double *)b;
            SWAP(double, a, b);
            break;
        default: /* lists are all reloadable */
            continue;
        }
        if (differs && used < changed_len) {
            int n = snprintf(changed + used, changed_len - used, "%s[%s] %s", used ? ", " : "", d->section, d->key);
            if (n > 0)
                used += (size_t)n < changed_len - used ? (size_t)n : changed_len - used - 1;
        }
    }
}

void config_free(struct proxy_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < N_DIRECTIVES; i++) {
        const struct directive *d = &directives[i];
        char *field = (char *)cfg + d->offset;
        switch (d->type) {
        case D_URLS:
        case D_PATHS:
            free_strv(*(char ***)field, *(size_t *)((char *)cfg + d->offset2));
            break;
        case D_CIDRS:
            free(*(struct cidr **)field);
            break;
        case D_HOSTPORT:
        case D_STRING:
        case D_TOKEN:
        case D_WORD:
        case D_REDIS_URL:
        case D_ACCESS_LOG:
            free(*(char **)field);
            break;
        case D_INT:
        case D_INT64:
        case D_BOOL:
        case D_ENUM:
        case D_STYLES:
        case D_SHARE:
            break;
        }
    }
    free(cfg->config_path);
    free(cfg->origins);
    memset(cfg, 0, sizeof(*cfg));
}

const char *config_origin(const struct proxy_config *cfg, const char *section, const char *key, char *buf,
                          size_t buflen)
{
    const struct directive *d = find_directive(section, key);
    if (buflen == 0)
        return buf;
    if (d == NULL) {
        snprintf(buf, buflen, "[%s] %s", section, key);
        return buf;
    }
    struct config_origin o = cfg->origins != NULL ? cfg->origins[d - directives] : (struct config_origin){0};
    switch (o.kind) {
    case ORIGIN_FILE:
        snprintf(buf, buflen, "%s:%d: [%s] %s", cfg->config_path != NULL ? cfg->config_path : "?", o.line,
                 d->section, d->key);
        break;
    case ORIGIN_FLAG:
        snprintf(buf, buflen, "%s", o.flag);
        break;
    case ORIGIN_ENV:
        env_name(d, buf, buflen);
        break;
    case ORIGIN_DEFAULT:
        snprintf(buf, buflen, "[%s] %s (default)", d->section, d->key);
        break;
    }
    return buf;
}
