/* Redis connection URL parsing. */
#include "store/redis/redis_url.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/crypto.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}


/* Copies [s, s+len) into out (NUL-terminated), decoding %XX. Returns 0, or -1 when it does
 * not fit, has a bad escape, or decodes to a NUL or a control character. */
static int copy_decoded(const char *s, size_t len, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= len)
                return -1;
            int hi = OPENSSL_hexchar2int((unsigned char)s[i + 1]), lo = OPENSSL_hexchar2int((unsigned char)s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c < 0x20 || c == 0x7f || o + 1 >= outlen)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

/* Parses a decimal in [lo, hi] spanning exactly [s, s+len). */
static int parse_int(const char *s, size_t len, long lo, long hi, int *pvalue)
{
    char buf[16];
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (buf[0] < '0' || buf[0] > '9')
        return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(buf, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *pvalue = (int)v;
    return 0;
}

/* user:password@ (or password@ or :password@); [s, s+len) excludes the '@'. */
static int parse_userinfo(const char *s, size_t len, struct redis_url *url, char *err, size_t errlen)
{
    const char *colon = memchr(s, ':', len);
    const char *pw = s;
    size_t pwlen = len;
    if (colon != NULL) {
        if (copy_decoded(s, (size_t)(colon - s), url->username, sizeof(url->username)) != 0)
            return fail(err, errlen, "bad user name in redis URL");
        pw = colon + 1;
        pwlen = len - (size_t)(colon - s) - 1;
    }
    if (copy_decoded(pw, pwlen, url->password, sizeof(url->password)) != 0)
        return fail(err, errlen, "bad password in redis URL");
    if (url->password[0] == '\0')
        return fail(err, errlen, "empty password in redis URL");
    url->has_password = true;
    return 0;
}

static int parse_tcp(const char *p, struct redis_url *url, char *err, size_t errlen)
{
    size_t alen = strcspn(p, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (p[i] == '@')
            at = p + i;
    if (at != NULL) {
        if (parse_userinfo(p, (size_t)(at - p), url, err, errlen) != 0)
            return -EINVAL;
        alen -= (size_t)(at + 1 - p);
        p = at + 1;
    }

    const char *host = p, *hend;
    const char *after;
    if (*p == '[') {
        hend = memchr(p, ']', alen);
        if (hend == NULL)
            return fail(err, errlen, "unterminated [address] in redis URL");
        host = p + 1;
        after = hend + 1;
    } else {
        hend = memchr(p, ':', alen);
        if (hend == NULL)
            hend = p + alen;
        after = hend;
    }
    size_t hlen = (size_t)(hend - host);
    if (hlen == 0 || hlen >= sizeof(url->host))
        return fail(err, errlen, "missing or too long host in redis URL");
    for (size_t i = 0; i < hlen; i++)
        if ((unsigned char)host[i] <= 0x20 || host[i] == '%' || host[i] == '@')
            return fail(err, errlen, "bad host in redis URL");
    memcpy(url->host, host, hlen);
    url->host[hlen] = '\0';

    const char *aend = p + alen;
    if (after < aend) {
        if (*after != ':' || parse_int(after + 1, (size_t)(aend - after - 1), 1, 65535, &url->port) != 0)
            return fail(err, errlen, "bad port in redis URL (1-65535)");
    }

    p = aend;
    if (*p == '/') {
        p++;
        size_t dlen = strlen(p);
        if (dlen > 0 && parse_int(p, dlen, 0, 1000000, &url->db) != 0)
            return fail(err, errlen, "bad database number in redis URL");
    } else if (*p != '\0') {
        return fail(err, errlen, "unexpected text after the host in redis URL");
    }
    return 0;
}

static int parse_unix(const char *p, struct redis_url *url, char *err, size_t errlen)
{
    url->is_unix = true;
    const char *slash = strchr(p, '/');
    if (slash == NULL)
        return fail(err, errlen, "unix socket URL needs an absolute path: unix:///path");
    if (slash != p) {
        if (slash[-1] != '@')
            return fail(err, errlen, "unix socket URL needs an absolute path: unix:///path");
        if (parse_userinfo(p, (size_t)(slash - 1 - p), url, err, errlen) != 0)
            return -EINVAL;
        p = slash;
    }
    size_t plen = strcspn(p, "?");
    if (plen < 2 || copy_decoded(p, plen, url->path, sizeof(url->path)) != 0)
        return fail(err, errlen, "bad or too long unix socket path");
    p += plen;
    if (*p == '?') {
        p++;
        if (strncmp(p, "db=", 3) != 0 || parse_int(p + 3, strlen(p + 3), 0, 1000000, &url->db) != 0)
            return fail(err, errlen, "unix socket URL takes only ?db=N");
    }
    return 0;
}

int redis_url_parse(const char *text, struct redis_url *url, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (text == NULL || url == NULL)
        return fail(err, errlen, "no redis URL");
    memset(url, 0, sizeof(*url));
    url->port = 6379;
    int r;
    if (strncasecmp(text, "redis://", 8) == 0)
        r = parse_tcp(text + 8, url, err, errlen);
    else if (strncasecmp(text, "rediss://", 9) == 0)
        url->tls = true, r = parse_tcp(text + 9, url, err, errlen);
    else if (strncasecmp(text, "unix://", 7) == 0)
        r = parse_unix(text + 7, url, err, errlen);
    else
        r = fail(err, errlen, "redis URL must start with redis://, rediss:// or unix://");
    if (r != 0) {
        memset(url->password, 0, sizeof(url->password));
        url->has_password = false;
    }
    return r;
}

int redis_seed_list_parse(const char *text, struct redis_url *seeds, size_t max_seeds, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (text == NULL || seeds == NULL || max_seeds == 0)
        return fail(err, errlen, "no seed URLs");
    if (max_seeds > REDIS_SEEDS_MAX)
        max_seeds = REDIS_SEEDS_MAX;
    size_t total = 1;
    for (const char *c = text; *c; c++)
        total += *c == ',';
    if (total > max_seeds)
        return fail(err, errlen, "%zu seed URLs, at most %zu", total, max_seeds);
    char one[1024], why[256];
    size_t n = 0;
    int r = 0;
    for (const char *p = text;; n++) {
        size_t len = strcspn(p, ",");
        if (len == 0) {
            r = fail(err, errlen, "seed %zu of %zu is empty", n + 1, total);
            break;
        }
        if (len >= sizeof(one)) {
            r = fail(err, errlen, "seed %zu of %zu is longer than %zu bytes", n + 1, total, sizeof(one) - 1);
            break;
        }
        memcpy(one, p, len);
        one[len] = '\0';
        r = redis_url_parse(one, &seeds[n], why, sizeof(why));
        if (r == 0 && seeds[n].is_unix)
            r = fail(why, sizeof(why), "a cluster node is reached over TCP: redis://host:port, not unix://");
        else if (r == 0 && seeds[n].db != 0)
            r = fail(why, sizeof(why), "Redis Cluster serves database 0 only, not %d", seeds[n].db);
        else if (r == 0 && n > 0 && seeds[n].tls != seeds[0].tls)
            r = fail(why, sizeof(why), "%s:// after %s:// in seed 1: the seeds are all rediss:// or all redis://",
                     seeds[n].tls ? "rediss" : "redis", seeds[0].tls ? "rediss" : "redis");
        if (r != 0) {
            fail(err, errlen, "seed %zu of %zu: %s", n + 1, total, why);
            n++;     /* so seeds[n-1]'s password is wiped below too */
            break;
        }
        if (p[len] == '\0') {
            n++;
            break;
        }
        p += len + 1;
    }
    explicit_bzero(one, sizeof(one));
    if (r != 0) {
        for (size_t i = 0; i < n; i++)
            explicit_bzero(&seeds[i], sizeof(seeds[i]));
        return -EINVAL;
    }
    return (int)n;
}
