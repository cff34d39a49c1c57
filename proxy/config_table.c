/* The table of tierproxy's configuration directives and the parsing of their values. See
 * config_table.h. */
#include "proxy/config_table.h"

#include "proxy/http_token.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <arpa/inet.h>

#define MAX_TIMEOUT_MS INT64_C(86400000) /* one day */

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
static const struct word ws_refusal_words[] = {{"close", 1}, {"status", 0}, {NULL, 0}};
static const struct word store_words[] = {
    {"memory", STORE_MEMORY}, {"redis", STORE_REDIS}, {NULL, 0}};
static const struct word follow_words[] = {{"none", 0}, {"redis", 1}, {NULL, 0}};
static const struct word redis_mode_words[] = {
    {"single", REDIS_MODE_SINGLE}, {"cluster", REDIS_MODE_CLUSTER}, {NULL, 0}};
static const struct word level_words[] = {
    {"debug", 0}, {"info", 1}, {"warn", 2}, {"error", 3}, {NULL, 0}};

#define OFF(field) offsetof(struct proxy_config, field)
#define HOSTPORT_EXPECT "HOST:PORT (IPv6 as [::1]:8080)"

const struct directive config_directives[] = {
    {"proxy", "listen", D_HOSTPORT, OFF(listen_host), OFF(listen_port), 0, 0, NULL, F_RESTART,
     "127.0.0.1:8080", "--listen", HOSTPORT_EXPECT},
    {"proxy", "upstream", D_URLS, OFF(upstreams), OFF(n_upstreams), 0, 0, NULL, 0,
     "http://127.0.0.1:3000", "--upstream", "comma-separated http:// or https:// URLs"},
    {"proxy", "upstream_ca_file", D_STRING, OFF(upstream_ca_file), 0, 0, 0, NULL,
     F_EMPTY_NULL | F_READABLE, "", NULL, "a PEM file of CA certificates, or empty for the system's"},
    {"proxy", "upstream_tls_verify", D_BOOL, OFF(upstream_tls_verify), 0, 0, 0, bool_words, 0, "yes",
     NULL, "yes or no"},
    {"proxy", "workers", D_INT, OFF(workers), 0, 0, CONFIG_MAX_WORKERS, NULL, F_RESTART, "0", NULL, NULL},
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
    {"auth", "key_query", D_TOKEN, OFF(key_query), 0, 0, 0, NULL, F_EMPTY_NULL, "", NULL,
     "a query parameter name, or empty for off"},
    {"auth", "ws_refusal", D_BOOL, OFF(ws_refusal_close), 0, 0, 0, ws_refusal_words, 0, "status", NULL,
     "status or close"},
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
    {"limits", "headers", D_STYLES, OFF(headers), 0, 0, 0, NULL, 0, "ietf", NULL,
     "a comma-separated list of draft, ietf, x; or off"},
    {"log", "access", D_ACCESS_LOG, OFF(access_log), 0, 0, 0, NULL, F_RESTART, "stdout", NULL,
     "stdout, off or a file path"},
    {"log", "level", D_WORD, OFF(log_level), 0, 0, 0, level_words, 0, "info", NULL,
     "debug, info, warn or error"},
};
const size_t config_n_directives = sizeof(config_directives) / sizeof(config_directives[0]);

const char *const config_sections[] = {"proxy", "admin", "auth", "plans", "limits", "log"};
const size_t config_n_sections = sizeof(config_sections) / sizeof(config_sections[0]);

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

/* A token for an error message: at most buflen - 8 characters, non-printable bytes as '?'. */
const char *config_quote(const char *s, char *buf, size_t buflen)
{
    size_t o = 0, i;
    for (i = 0; s[i] && o + 8 < buflen; i++)
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
    char q[CONFIG_QUOTE_MAX + 8];
    errf(why, whylen, "expected %s, got \"%s\"", expect, config_quote(got, q, sizeof(q)));
}

char *config_trim(char *s)
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
        items[i] = config_trim(p);
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
    char q[CONFIG_QUOTE_MAX + 8];
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
         config_quote_masked(u, q, sizeof(q)));
    return -EINVAL;
}

static int set_list(const struct directive *d, void *field, size_t *pcount, const char *v,
                    char *why, size_t whylen)
{
    char q[CONFIG_QUOTE_MAX + 8];
    char **items = NULL, **strs = NULL, *copy;
    struct cidr *cidrs = NULL;
    size_t n = 0;
    int r;

    copy = strdup(v); /* split_commas cuts it up; v stays whole for messages */
    if (copy == NULL)
        return -ENOMEM;
    r = split_commas(copy, &items, &n);
    if (r == -EINVAL) {
        errf(why, whylen, "empty item in \"%s\"",
             d->type == D_URLS ? config_quote_masked(v, q, sizeof(q)) : config_quote(v, q, sizeof(q)));
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
                     config_quote(items[i], q, sizeof(q)));
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
                 config_quote(items[i], q, sizeof(q)));
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

static bool redis_scheme_ok(const char *v)
{
    static const char *const schemes[] = {"redis://", "rediss://", "unix://"};
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t n = strlen(schemes[i]);
        if (strncasecmp(v, schemes[i], n) == 0 && v[n] != '\0')
            return true;
    }
    return false;
}

/* Sets d's field from the text v. Returns 0, -EINVAL with the reason in why, or -ENOMEM. */
int config_directive_set(const struct directive *d, struct proxy_config *cfg, const char *raw, char *why,
                         size_t whylen)
{
    char *field = (char *)cfg + d->offset;
    char *copy, *v, q[CONFIG_QUOTE_MAX + 8];
    int64_t n;
    int w, r = -EINVAL;

    copy = strdup(raw);
    if (copy == NULL)
        return -ENOMEM;
    v = config_trim(copy);

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
                 (long long)d->min, (long long)d->max, config_quote(v, q, sizeof(q)));
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
            char path[CONFIG_QUOTE_PATH_MAX + 8];
            errf(why, whylen, "cannot read \"%s\": %s", config_quote(v, path, sizeof(path)), strerror(errno));
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
        if (*v == '\0' && (d->flags & F_EMPTY_NULL))
            r = replace_string(field, NULL);
        else if (!token_ok(v))
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
        if (redis_scheme_ok(v) && !has_space_or_ctl(v)) {
            r = replace_string(field, v);
        } else {
            char masked[CONFIG_QUOTE_MAX + 8];
            errf(why, whylen, "expected %s, got \"%s\"", d->expect, config_quote_masked(v, masked, sizeof(masked)));
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

const struct directive *config_find_directive(const char *section, const char *key)
{
    for (size_t i = 0; i < config_n_directives; i++)
        if (strcmp(config_directives[i].section, section) == 0 && strcmp(config_directives[i].key, key) == 0)
            return &config_directives[i];
    return NULL;
}

bool config_known_section(const char *s)
{
    for (size_t i = 0; i < config_n_sections; i++)
        if (strcmp(config_sections[i], s) == 0)
            return true;
    return false;
}

/* Edit distance, for "did you mean". Only short names are compared. */

void config_env_name(const struct directive *d, char *buf, size_t buflen)
{
    size_t o = (size_t)snprintf(buf, buflen, "TIERPROXY_%s_%s", d->section, d->key);
    for (size_t i = 0; i < o && i < buflen; i++)
        buf[i] = (char)toupper((unsigned char)buf[i]);
}

/* url with the password of each URL in it (several in a cluster's seed list) as "***":
 * after the "://" that starts a URL (or the start of url) and up to the last '@' before
 * the next "://", what follows the user name's ':' (all of it when there is no ':'). A
 * malloc'd string, or NULL. */
static char *masked_copy(const char *url)
{
    size_t len = strlen(url), n_at = 0;
    for (const char *c = url; *c != '\0'; c++)
        n_at += *c == '@';
    char *out = malloc(len + 3 * n_at + 1), *o = out;
    if (out == NULL)
        return NULL;
    const char *copied = url, *sep = strstr(url, "://");
    const char *start = sep != NULL ? sep + 3 : url;
    for (;;) {
        const char *next = strstr(start, "://"), *end = next != NULL ? next : url + len, *at = NULL;
        for (const char *c = start; c < end; c++)
            if (*c == '@')
                at = c;
        if (at != NULL) {
            const char *colon = memchr(start, ':', (size_t)(at - start));
            const char *keep = colon != NULL ? colon + 1 : start;
            memcpy(o, copied, (size_t)(keep - copied));
            o += keep - copied;
            memcpy(o, "***", 3);
            o += 3;
            copied = at;
        }
        if (next == NULL)
            break;
        start = next + 3;
    }
    memcpy(o, copied, (size_t)(url + len - copied) + 1);
    return out;
}

const char *config_quote_masked(const char *url, char *buf, size_t buflen)
{
    char *masked = masked_copy(url);
    config_quote(masked != NULL ? masked : "...", buf, buflen);
    free(masked);
    return buf;
}

void config_report(struct config_report *r, const char *where, const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (r->count++ == 0 && r->first != NULL && r->first_len > 0)
        snprintf(r->first, r->first_len, "%s%s%s", where, where[0] != '\0' ? ": " : "", why);
    if (r->fn != NULL)
        r->fn(r->ctx, where, why);
}

void config_table_free(struct proxy_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
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
    for (size_t i = 0; cfg->origins != NULL && i < config_n_directives; i++)
        free(cfg->origins[i].value);
    free(cfg->config_path);
    free(cfg->origins);
    memset(cfg, 0, sizeof(*cfg));
}

int config_set_origin(struct proxy_config *cfg, const struct directive *d, enum origin_kind kind, int line,
                      const char *flag, const char *value)
{
    char *text = NULL;
    if (value != NULL) {
        text = d->type == D_REDIS_URL || d->type == D_URLS ? masked_copy(value) : strdup(value);
        if (text == NULL)
            return -ENOMEM;
        char *trimmed = config_trim(text);
        memmove(text, trimmed, strlen(trimmed) + 1);
    }
    struct config_origin *o = &cfg->origins[d - config_directives];
    free(o->value);
    *o = (struct config_origin){kind, line, flag, text};
    return 0;
}

