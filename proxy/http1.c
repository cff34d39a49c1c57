/* The HTTP/1.1 syntax pieces of http1.h. Pure: no state, no allocation, no I/O; every
 * function reads only the len bytes it is given (none needs a NUL) and answers by its
 * return or into the caller's struct, whose pointers point into the caller's bytes. What
 * does not parse is refused, never repaired: a Content-Length past INT64_MAX is -ERANGE,
 * not clamped, and a malformed status line is 0. */
#include "proxy/http1.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "proxy/http_token.h"

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

bool http1_name_ok(const char *name, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!http_token_char((unsigned char)name[i]))
            return false;
    return true;
}

static bool value_byte_ok(unsigned char c)
{
    return (c >= 0x20 && c != 0x7f) || c == '\t';
}

/* VCHAR, obs-text, SP and HTAB. Eight bytes at a time: a word with no byte below 0x20 and
 * none equal to 0x7f is fine as it is (every value of every request and response passes
 * here); one that has is looked at byte by byte (a tab is below 0x20 and allowed). */
size_t http1_value_span(const char *value, size_t len)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t x;
        memcpy(&x, value + i, 8);
        uint64_t del = x ^ (0x7f * ones);
        if (((x - 0x20 * ones) & ~x & highs) == 0 && ((del - ones) & ~del & highs) == 0)
            continue;
        for (size_t j = i; j < i + 8; j++)
            if (!value_byte_ok((unsigned char)value[j]))
                return j;
    }
    for (; i < len; i++)
        if (!value_byte_ok((unsigned char)value[i]))
            return i;
    return len;
}

bool http1_value_ok(const char *value, size_t len)
{
    return http1_value_span(value, len) == len;
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* RFC 3986 2.3 and 2.2: unreserved and sub-delims. A table: every request's Host passes. */
static bool host_char(unsigned char c)
{
    /* bit c%64 of word c/64: ALPHA DIGIT - . _ ~ ! $ & ' ( ) * + , ; = */
    static const unsigned long long allowed[4] = {
        0x2bff7fd200000000ULL, /* '!' '$' '&'-'.' '0'-'9' ';' '=' */
        0x47fffffe87fffffeULL, /* 'A'-'Z' '_' 'a'-'z' '~' */
        0, 0,
    };
    return (allowed[c >> 6] >> (c & 63)) & 1;
}

/* reg-name (RFC 3986 3.2.2): unreserved, pct-encoded and sub-delims; its length, or -1. */
static ptrdiff_t reg_name_len(const char *p, const char *end)
{
    const char *start = p;
    while (p < end) {
        if (*p == '%') {
            if (end - p < 3 || !is_hex(p[1]) || !is_hex(p[2]))
                return -1;
            p += 3;
        } else if (host_char((unsigned char)*p))
            p++;
        else
            break;
    }
    return p - start;
}

/* IPvFuture (RFC 3986 3.2.2): "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ). */
static bool ipv_future_ok(const char *p, const char *end)
{
    if (p == end || (*p != 'v' && *p != 'V'))
        return false;
    const char *hex = ++p;
    while (p < end && is_hex(*p))
        p++;
    if (p == hex || p == end || *p++ != '.' || p == end)
        return false;
    for (; p < end; p++)
        if (!host_char((unsigned char)*p) && *p != ':')
            return false;
    return true;
}

/* The inside of an IP-literal's brackets: an IPv6 address or an IPvFuture. */
static bool ip_literal_ok(const char *p, const char *end)
{
    char text[INET6_ADDRSTRLEN];
    struct in6_addr addr;
    size_t n = (size_t)(end - p);
    if (n > 0 && (*p == 'v' || *p == 'V'))
        return ipv_future_ok(p, end);
    if (n == 0 || n >= sizeof(text))
        return false;
    memcpy(text, p, n);
    text[n] = '\0';
    return inet_pton(AF_INET6, text, &addr) == 1;
}

/* A port: digits, at most 65535; empty is allowed (RFC 3986 3.2.3). */
static bool port_ok(const char *p, const char *end)
{
    unsigned long port = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        port = port * 10 + (unsigned long)(*p - '0');
        if (port > 65535)
            return false;
    }
    return true;
}

bool http1_host_ok(const char *value, size_t len)
{
    const char *p = value, *end = value + len;
    if (p < end && *p == '[') {
        const char *close = memchr(p, ']', len);
        if (close == NULL || !ip_literal_ok(p + 1, close))
            return false;
        p = close + 1;
    } else {
        ptrdiff_t n = reg_name_len(p, end);
        if (n <= 0)
            return false; /* an http URI has a host (RFC 9110 4.2.1) */
        p += n;
    }
    if (p == end)
        return true;
    return *p == ':' && port_ok(p + 1, end);
}

int http1_content_length(const char *value, size_t len, int64_t *length)
{
    while (len > 0 && is_space(*value)) {
        value++;
        len--;
    }
    while (len > 0 && is_space(value[len - 1]))
        len--;
    if (len == 0)
        return -EINVAL;
    int64_t n = 0;
    bool too_big = false;
    for (size_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return -EINVAL;
        int d = value[i] - '0';
        if (n > (INT64_MAX - d) / 10)
            too_big = true; /* read on: a later non-digit still makes it malformed */
        else
            n = n * 10 + d;
    }
    if (too_big)
        return -ERANGE;
    *length = n;
    return 0;
}

int http1_field_line(const char *line, size_t len, struct http1_field *out)
{
    const char *colon = memchr(line, ':', len);
    if (colon == NULL || !http1_name_ok(line, (size_t)(colon - line)))
        return -EINVAL;
    const char *value = colon + 1, *end = line + len;
    if (!http1_value_ok(value, (size_t)(end - value)))
        return -EINVAL;
    while (value < end && is_space(*value))
        value++;
    while (end > value && is_space(end[-1]))
        end--;
    *out = (struct http1_field){
        .name = line, .name_len = (size_t)(colon - line), .value = value, .value_len = (size_t)(end - value),
    };
    return 0;
}

bool http1_is_hop_by_hop(const char *name, size_t len)
{
    switch (len) { /* by length first: most names are none of these */
    case 2:
        return http1_name_is(name, len, "te");
    case 7:
        return http1_name_is(name, len, "trailer") || http1_name_is(name, len, "upgrade");
    case 10:
        return http1_name_is(name, len, "connection") || http1_name_is(name, len, "keep-alive");
    case 16:
        return http1_name_is(name, len, "proxy-connection");
    case 17:
        return http1_name_is(name, len, "transfer-encoding");
    case 18:
        return http1_name_is(name, len, "proxy-authenticate");
    case 19:
        return http1_name_is(name, len, "proxy-authorization");
    default:
        return false;
    }
}

long http1_status_line(const char *line, size_t len)
{
    if (len < 12 || memcmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ')
        return 0;
    long status = 0;
    for (int i = 9; i < 12; i++) {
        if (line[i] < '0' || line[i] > '9')
            return 0;
        status = status * 10 + (line[i] - '0');
    }
    if (len > 12 && line[12] != ' ')
        return 0;
    if (!http1_value_ok(line + 12, len - 12))
        return 0;
    return status >= 100 && status <= 599 ? status : 0;
}
