/* IPv4/IPv6 addresses and CIDR ranges. No I/O, no allocation. */
#include "proxy/netaddr.h"

#include "store/decimal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* Longest text cidr_parse accepts: a full IPv6 address with an embedded IPv4 part,
 * "/", three digits. */
#define CIDR_TEXT_MAX (INET6_ADDRSTRLEN + 4)

static const uint8_t v4mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* Clears the bits of addr beyond prefix_len, so "10.1.2.3/8" is stored as 10.0.0.0/8. */
static void mask_host_bits(uint8_t *addr, unsigned addr_len, unsigned prefix_len)
{
    for (unsigned i = 0; i < addr_len; i++) {
        unsigned bit = i * 8;
        if (bit >= prefix_len)
            addr[i] = 0;
        else if (prefix_len - bit < 8)
            addr[i] &= (uint8_t)(0xff << (8 - (prefix_len - bit)));
    }
}

/* The address part of a CIDR (text up to len) into c's family and address; its longest
 * prefix in *pmax. */
static int parse_address(const char *text, size_t len, struct cidr *c, unsigned *pmax)
{
    char buf[CIDR_TEXT_MAX + 1];
    if (len == 0 || len > CIDR_TEXT_MAX)
        return -EINVAL;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        *pmax = 32;
    } else if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        *pmax = 128;
    } else {
        return -EINVAL;
    }
    return 0;
}

/* The prefix length after the '/': plain decimal only, no sign, no spaces, at most three
 * digits, at most max. */
static int parse_prefix_len(const char *p, unsigned max, unsigned *pv)
{
    unsigned v = 0;
    size_t ndigits = strlen(p);
    if (ndigits == 0 || ndigits > 3)
        return -EINVAL;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > max)
        return -EINVAL;
    *pv = v;
    return 0;
}

int cidr_parse(const char *text, struct cidr *out)
{
    struct cidr c;
    unsigned max_prefix = 0;
    if (text == NULL || out == NULL)
        return -EINVAL;
    memset(&c, 0, sizeof(c));
    const char *slash = strchr(text, '/');
    if (parse_address(text, slash ? (size_t)(slash - text) : strlen(text), &c, &max_prefix) != 0)
        return -EINVAL;
    c.prefix_len = max_prefix;
    if (slash && parse_prefix_len(slash + 1, max_prefix, &c.prefix_len) != 0)
        return -EINVAL;
    /* "::ffff:10.0.0.0/104" is the IPv4 range 10.0.0.0/8: store it that way so it
     * matches plain IPv4 peers as well as mapped ones. */
    if (c.family == AF_INET6 && c.prefix_len >= 96 &&
        memcmp(c.addr, v4mapped_prefix, sizeof(v4mapped_prefix)) == 0) {
        memmove(c.addr, c.addr + 12, 4);
        memset(c.addr + 4, 0, 12);
        c.family = AF_INET;
        c.prefix_len -= 96;
    }
    mask_host_bits(c.addr, sizeof(c.addr), c.prefix_len);
    *out = c;
    return 0;
}

/* True when the first prefix_len bits of a and b agree. */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned prefix_len)
{
    unsigned whole = prefix_len / 8, rest = prefix_len % 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t m = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & m) == (b[whole] & m);
}

/* family is AF_INET (addr holds 4 bytes) or AF_INET6 (16 bytes). A mapped IPv6 address
 * is tried against IPv4 ranges by its IPv4 part and against IPv6 ranges as it is. */
static bool match_addr(const struct cidr *ranges, size_t n, int family, const uint8_t *addr)
{
    const uint8_t *v4 = NULL;

    if (ranges == NULL)
        return false;
    if (family == AF_INET)
        v4 = addr;
    else if (memcmp(addr, v4mapped_prefix, sizeof(v4mapped_prefix)) == 0)
        v4 = addr + 12;

    for (size_t i = 0; i < n; i++) {
        const struct cidr *r = &ranges[i];
        if (r->family == AF_INET && v4 != NULL) {
            if (prefix_equal(r->addr, v4, r->prefix_len))
                return true;
        } else if (r->family == AF_INET6 && family == AF_INET6) {
            if (prefix_equal(r->addr, addr, r->prefix_len))
                return true;
        }
    }
    return false;
}

bool cidr_match_sockaddr(const struct cidr *ranges, size_t n, const struct sockaddr *sa)
{
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;
        uint8_t a[4];
        memcpy(a, &sin->sin_addr, 4);
        return match_addr(ranges, n, AF_INET, a);
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)sa;
        uint8_t a[16];
        memcpy(a, &sin6->sin6_addr, 16);
        return match_addr(ranges, n, AF_INET6, a);
    }
    return false;
}

bool cidr_match_text(const struct cidr *ranges, size_t n, const char *text, size_t len)
{
    char buf[INET6_ADDRSTRLEN + 1];
    uint8_t a[16];

    if (text == NULL)
        return false;
    /* X-Forwarded-For items come with optional whitespace around them. */
    while (len > 0 && (*text == ' ' || *text == '\t')) {
        text++;
        len--;
    }
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\t'))
        len--;
    /* "[2001:db8::1]" or "[2001:db8::1]:443" */
    if (len > 0 && text[0] == '[') {
        const char *close = memchr(text, ']', len);
        if (close == NULL)
            return false;
        text++;
        len = (size_t)(close - text);
    }
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';

    if (inet_pton(AF_INET, buf, a) == 1)
        return match_addr(ranges, n, AF_INET, a);
    if (inet_pton(AF_INET6, buf, a) == 1)
        return match_addr(ranges, n, AF_INET6, a);
    /* "192.0.2.1:8080" */
    char *colon = strchr(buf, ':');
    if (colon != NULL && strchr(colon + 1, ':') == NULL) {
        *colon = '\0';
        if (inet_pton(AF_INET, buf, a) == 1)
            return match_addr(ranges, n, AF_INET, a);
    }
    return false;
}

/* a.b.c.d of a (network order) into buf (at least INET_ADDRSTRLEN bytes), without
 * inet_ntop's sprintf: this runs twice per forwarded request (the client address and
 * X-Forwarded-For). */
static void ipv4_to_text(const uint8_t a[4], char *buf)
{
    char *p = buf;
    for (int i = 0; i < 4; i++) {
        p += decimal_write(p, a[i]);
        *p++ = '.';
    }
    p[-1] = '\0';
}

const char *sockaddr_to_text(const struct sockaddr *sa, char *buf, size_t buflen)
{
    if (buf == NULL || buflen == 0)
        return "";
    buf[0] = '\0';
    if (sa == NULL)
        return buf;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;
        if (buflen >= INET_ADDRSTRLEN)
            ipv4_to_text((const uint8_t *)&sin->sin_addr.s_addr, buf);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)sa;
        const uint8_t *a = sin6->sin6_addr.s6_addr;
        /* A dual-stack socket reports IPv4 clients as ::ffff:a.b.c.d; show them as
         * a.b.c.d so one client has one address in logs and per-IP limits. */
        if (memcmp(a, v4mapped_prefix, sizeof(v4mapped_prefix)) == 0) {
            if (buflen >= INET_ADDRSTRLEN)
                ipv4_to_text(a + 12, buf);
        } else if (inet_ntop(AF_INET6, &sin6->sin6_addr, buf, (socklen_t)buflen) == NULL) {
            buf[0] = '\0';
        }
    }
    return buf;
}

int sockaddr_from_ip_port(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(port);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
        return 0;
    }
    return -EINVAL;
}

int sockaddr_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, char *err, size_t errlen)
{
    if (sockaddr_from_ip_port(host, port, ss) == 0)
        return 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *found = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &found);
    if (rc != 0) {
        snprintf(err, errlen, "%s", rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -EINVAL;
    }
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = found; ai != NULL; ai = ai->ai_next)
        if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
            (pick == NULL || (pick->ai_family == AF_INET6 && ai->ai_family == AF_INET)))
            pick = ai;
    if (pick == NULL) {
        freeaddrinfo(found);
        snprintf(err, errlen, "no IPv4 or IPv6 address");
        return -EINVAL;
    }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    if (pick->ai_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
    freeaddrinfo(found);
    return 0;
}

bool xff_client_address(const char *list, size_t len, const struct cidr *trusted, size_t n, char *out,
                        size_t outlen)
{
    bool found = false;
    const char *end = list + len;
    while (end > list) {
        const char *start = end;
        while (start > list && start[-1] != ',')
            start--;
        const char *a = start, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a && (size_t)(b - a) < outlen) {
            memcpy(out, a, (size_t)(b - a));
            out[b - a] = '\0';
            found = true;
            if (!cidr_match_text(trusted, n, a, (size_t)(b - a)))
                return true;
        }
        end = start > list ? start - 1 : list;
    }
    return found;
}
