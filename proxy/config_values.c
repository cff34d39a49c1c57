/* The values of tierproxy's configuration directives: one setter per type of value, each
 * checking the text it is given and setting the field the directive's row names in struct
 * proxy_config (config_table.c holds the rows). A setter leaves the field as it was when it
 * refuses the text, and says why, quoting the refused value (a URL's password masked). */
#include "proxy/config_values.h"

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

#define FIELD(cfg, offset) ((void *)((char *)(cfg) + (offset)))

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

void config_strv_free(char **v, size_t n)
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

/* ---------------------------------------------------------------- quoting */

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

/* url with the password of each URL in it (several in a cluster's seed list) as "***":
 * after the "://" that starts a URL (or the start of url) and up to the last '@' before
 * the next "://", what follows the user name's ':' (all of it when there is no ':'). A
 * malloc'd string, or NULL. */
char *config_masked_copy(const char *url)
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
    char *masked = config_masked_copy(url);
    config_quote(masked != NULL ? masked : "...", buf, buflen);
    free(masked);
    return buf;
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

/* ---------------------------------------------------------------- setters */

int config_set_hostport(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    char *host = NULL;
    uint16_t port = 0;
    if (*v != '\0' || !(d->flags & F_EMPTY_NULL)) {
        int r = parse_hostport(v, &host, &port);
        if (r == -EINVAL)
            why_got(why, whylen, d->expect, v);
        if (r)
            return r;
    }
    char **field = FIELD(cfg, d->offset);
    free(*field);
    *field = host;
    *(uint16_t *)FIELD(cfg, d->offset2) = port;
    return 0;
}

/* The comma-separated items of v, in *pcopy (free() it, and the array *pitems). */
static int list_items(const struct directive *d, const char *v, char **pcopy, char ***pitems, size_t *pn, char *why,
                      size_t whylen)
{
    char q[CONFIG_QUOTE_MAX + 8];
    *pcopy = strdup(v); /* split_commas cuts it up; v stays whole for messages */
    if (*pcopy == NULL)
        return -ENOMEM;
    int r = split_commas(*pcopy, pitems, pn);
    if (r == -EINVAL)
        errf(why, whylen, "empty item in \"%s\"",
             d->type == D_URLS ? config_quote_masked(v, q, sizeof(q)) : config_quote(v, q, sizeof(q)));
    return r;
}

static int check_path_prefix(char *item, char *why, size_t whylen)
{
    char q[CONFIG_QUOTE_MAX + 8];
    if (item[0] == '/' && !has_space_or_ctl(item))
        return 0;
    errf(why, whylen, "expected a path prefix starting with /, got \"%s\"", config_quote(item, q, sizeof(q)));
    return -EINVAL;
}

/* A list of strings, each passing check (which may rewrite it in place). */
static int set_strings(const struct directive *d, struct proxy_config *cfg, const char *v,
                       int (*check)(char *item, char *why, size_t whylen), char *why, size_t whylen)
{
    char *copy = NULL, **items = NULL, **strs = NULL;
    size_t n = 0;
    int r = list_items(d, v, &copy, &items, &n, why, whylen);
    if (r == 0 && n == 0 && d->type == D_URLS) {
        why_got(why, whylen, d->expect, "");
        r = -EINVAL;
    }
    if (r == 0 && n > 0 && (strs = calloc(n, sizeof(*strs))) == NULL)
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++)
        if ((r = check(items[i], why, whylen)) == 0 && (strs[i] = strdup(items[i])) == NULL)
            r = -ENOMEM;
    if (r == 0) {
        char ***field = FIELD(cfg, d->offset);
        size_t *count = FIELD(cfg, d->offset2);
        config_strv_free(*field, *count);
        *field = strs;
        *count = n;
        strs = NULL;
    }
    free(items);
    free(copy);
    config_strv_free(strs, n);
    return r;
}

int config_set_urls(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    return set_strings(d, cfg, v, check_upstream, why, whylen);
}

int config_set_paths(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    return set_strings(d, cfg, v, check_path_prefix, why, whylen);
}

int config_set_cidrs(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    char q[CONFIG_QUOTE_MAX + 8];
    char *copy = NULL, **items = NULL;
    struct cidr *cidrs = NULL;
    size_t n = 0;
    int r = list_items(d, v, &copy, &items, &n, why, whylen);
    if (r == 0 && n > 0 && (cidrs = calloc(n, sizeof(*cidrs))) == NULL)
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++)
        if (cidr_parse(items[i], &cidrs[i])) {
            errf(why, whylen, "expected a CIDR such as 10.0.0.0/8 or ::1/128, got \"%s\"",
                 config_quote(items[i], q, sizeof(q)));
            r = -EINVAL;
        }
    if (r == 0) {
        struct cidr **field = FIELD(cfg, d->offset);
        free(*field);
        *field = cidrs;
        *(size_t *)FIELD(cfg, d->offset2) = n;
        cidrs = NULL;
    }
    free(items);
    free(copy);
    free(cidrs);
    return r;
}

static int whole_number(const struct directive *d, const char *v, int64_t *pn, char *why, size_t whylen)
{
    char q[CONFIG_QUOTE_MAX + 8];
    if (parse_int64(v, d->min, d->max, pn) == 0)
        return 0;
    errf(why, whylen, "expected a whole number from %lld to %lld, got \"%s\"", (long long)d->min, (long long)d->max,
         config_quote(v, q, sizeof(q)));
    return -EINVAL;
}

/* n into d's field, as wide as d's type keeps it (n is within its bounds or words). */
static void put_number(const struct directive *d, struct proxy_config *cfg, int64_t n)
{
    void *field = FIELD(cfg, d->offset);
    if (d->type == D_INT64)
        *(int64_t *)field = n;
    else if (d->type == D_BOOL)
        *(bool *)field = n != 0;
    else
        *(int *)field = (int)n;   /* D_INT, D_ENUM */
}

int config_set_string(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    void *field = FIELD(cfg, d->offset);
    if (has_ctl(v) || (*v == '\0' && !(d->flags & (F_EMPTY_NULL | F_EMPTY_OK)))) {
        why_got(why, whylen, d->expect, v);
        return -EINVAL;
    }
    if (*v == '\0' && (d->flags & F_EMPTY_NULL))
        return replace_string(field, NULL);
    if ((d->flags & F_READABLE) && access(v, R_OK) != 0) {
        char path[CONFIG_QUOTE_PATH_MAX + 8];
        errf(why, whylen, "cannot read \"%s\": %s", config_quote(v, path, sizeof(path)), strerror(errno));
        return -EINVAL;
    }
    return replace_string(field, v);
}

int config_set_token(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    if (*v == '\0' && (d->flags & F_EMPTY_NULL))
        return replace_string(FIELD(cfg, d->offset), NULL);
    if (token_ok(v))
        return replace_string(FIELD(cfg, d->offset), v);
    why_got(why, whylen, d->expect, v);
    return -EINVAL;
}

/* v as one of d's words: its value. */
static int one_of_words(const struct directive *d, const char *v, int *pw, char *why, size_t whylen)
{
    if (lookup_word(d->words, v, pw) == 0)
        return 0;
    why_got(why, whylen, d->expect, v);
    return -EINVAL;
}

/* A number within d's bounds, or one of d's words. */
int config_set_number(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    int64_t n = 0;
    int w = 0;
    int r = d->words != NULL ? one_of_words(d, v, &w, why, whylen) : whole_number(d, v, &n, why, whylen);
    if (r == 0)
        put_number(d, cfg, d->words != NULL ? w : n);
    return r;
}

/* Kept as the table's spelling of the word, whatever the case it was written in. */
int config_set_word(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    int w;
    int r = one_of_words(d, v, &w, why, whylen);
    for (const struct word *x = d->words; r == 0 && x->name; x++)
        if (x->value == w)
            return replace_string(FIELD(cfg, d->offset), x->name);
    return r;
}

int config_set_redis_url(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    if (redis_scheme_ok(v) && !has_space_or_ctl(v))
        return replace_string(FIELD(cfg, d->offset), v);
    char masked[CONFIG_QUOTE_MAX + 8];
    errf(why, whylen, "expected %s, got \"%s\"", d->expect, config_quote_masked(v, masked, sizeof(masked)));
    return -EINVAL;
}

/* "stdout" (or "-") is stored as "-", "off" as NULL, anything else as a path. */
int config_set_access_log(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    void *field = FIELD(cfg, d->offset);
    if (strcasecmp(v, "stdout") == 0 || strcmp(v, "-") == 0)
        return replace_string(field, "-");
    if (strcasecmp(v, "off") == 0)
        return replace_string(field, NULL);
    if (*v != '\0' && !has_ctl(v))
        return replace_string(field, v);
    why_got(why, whylen, d->expect, v);
    return -EINVAL;
}

int config_set_styles(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    unsigned styles;
    if (header_styles_parse(v, &styles, why, whylen) != 0)
        return -EINVAL;
    *(unsigned *)FIELD(cfg, d->offset) = styles;
    return 0;
}

/* strtod takes "nan", "inf" and hex; a share is plain decimal digits, 0 < x <= 1. */
int config_set_share(const struct directive *d, struct proxy_config *cfg, char *v, char *why, size_t whylen)
{
    bool plain = *v != '\0';
    for (const char *c = v; *c != '\0'; c++)
        plain = plain && (isdigit((unsigned char)*c) || *c == '.');
    char *end = NULL;
    errno = 0;
    double x = plain ? strtod(v, &end) : 0.0;
    if (!plain || errno != 0 || end == v || *end != '\0' || !(x > 0.0 && x <= 1.0)) {
        why_got(why, whylen, d->expect, v);
        return -EINVAL;
    }
    *(double *)FIELD(cfg, d->offset) = x;
    return 0;
}

int config_directive_set(const struct directive *d, struct proxy_config *cfg, const char *raw, char *why,
                         size_t whylen)
{
    char *copy = strdup(raw);
    if (copy == NULL)
        return -ENOMEM;
    int r = d->set(d, cfg, config_trim(copy), why, whylen);
    free(copy);
    if (r == -ENOMEM)
        errf(why, whylen, "out of memory");
    return r;
}
