/* Fuzzes ratelimit_headers_render in every style (and an out-of-range one) with items
 * built from the input, and ratelimit_retry_after_s / header_style_parse.
 *
 * Invariants: only the style's header names, in order; values are visible ASCII (no CR,
 * LF, NUL or other controls); draft and x values are decimal numbers with remaining <=
 * limit, and remaining 0 when any item is exhausted; ietf RateLimit-Policy and RateLimit
 * are sf-lists of the same sf-string names, with q, w, r, t as sf-integers and r <= q.
 *
 * Input: style byte, item count byte, 8 bytes of clock, then per item a flag byte, four
 * tagged numbers (limit, remaining, reset_ms, window_ms) and a length-prefixed name. */
#include <ctype.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/ratelimit_headers.h"

#include "tests/fuzz/fuzz_check.h"

#define MAX_ITEMS 48
#define MAX_HEADERS 8
#define SF_INT_MAX INT64_C(999999999999999)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct reader {
    const uint8_t *p;
    size_t left;
};

static uint8_t rd_u8(struct reader *r)
{
    if (r->left == 0)
        return 0;
    r->left--;
    return *r->p++;
}

static uint64_t rd_bytes(struct reader *r, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | rd_u8(r);
    return v;
}

/* A number: raw 64-bit, small, 32-bit, or one of the edges. */
static int64_t rd_num(struct reader *r)
{
    static const int64_t edges[] = {
        0, 1, -1, 999, 1000, 1001, INT64_MAX, INT64_MIN, INT64_MAX - 1, SF_INT_MAX,
        SF_INT_MAX + 1, INT64_C(9223372036854775000), 60000, 86400000, INT32_MAX, -1000,
    };
    uint8_t tag = rd_u8(r);
    switch (tag & 3) {
    case 0:
        return (int64_t)rd_bytes(r, 8);
    case 1:
        return (int16_t)rd_bytes(r, 2);
    case 2:
        return (int32_t)rd_bytes(r, 4);
    default:
        return edges[(tag >> 2) % (sizeof(edges) / sizeof(edges[0]))];
    }
}

struct captured {
    size_t n;
    char name[MAX_HEADERS][64];
    char *value[MAX_HEADERS];
};

static void capture(void *arg, const char *name, const char *value)
{
    struct captured *c = arg;
    CHECK(name != NULL && value != NULL);
    CHECK(c->n < MAX_HEADERS);
    CHECK(strlen(name) < sizeof(c->name[0]));
    strcpy(c->name[c->n], name);
    c->value[c->n] = strdup(value);
    CHECK(c->value[c->n] != NULL);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        CHECK(*p >= 0x20 && *p <= 0x7e); /* no CR, LF, NUL or other controls */
    c->n++;
}

static bool is_decimal(const char *s, int64_t *pv)
{
    if (!isdigit((unsigned char)*s) || strlen(s) > 19)
        return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    char *end;
    *pv = (int64_t)strtoll(s, &end, 10);
    return *end == '\0';
}

static int64_t clamp_nonneg(int64_t v)
{
    return v < 0 ? 0 : v;
}

/* ---- a strict RFC 8941 list parser for what the ietf style writes */

struct sf_item {
    char name[256];
    int64_t q, w, r, t;
    bool has_q, has_w, has_r, has_t, has_qu;
};

static const char *sf_parse_string(const char *p, char *out, size_t outlen)
{
    size_t o = 0;
    if (*p++ != '"')
        return NULL;
    for (;;) {
        unsigned char c = (unsigned char)*p++;
        if (c == '"')
            break;
        if (c == '\\') {
            c = (unsigned char)*p++;
            if (c != '"' && c != '\\')
                return NULL;
        } else if (c < 0x20 || c > 0x7e) {
            return NULL; /* also the end of the text */
        }
        if (o + 1 >= outlen)
            return NULL;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return p;
}

static const char *sf_parse_int(const char *p, int64_t *pv)
{
    int64_t v = 0;
    int digits = 0;
    bool neg = *p == '-';
    if (neg)
        p++;
    while (isdigit((unsigned char)*p)) {
        if (++digits > 15)
            return NULL;
        v = v * 10 + (*p++ - '0');
    }
    if (digits == 0)
        return NULL;
    *pv = neg ? -v : v;
    return p;
}

/* Parses "item, item, ..." into items. Returns the count, or -1 when malformed. */
static int sf_parse_list(const char *p, struct sf_item *items, int max)
{
    int n = 0;
    for (;;) {
        struct sf_item *it;
        if (n == max)
            return -1;
        it = &items[n++];
        memset(it, 0, sizeof(*it));
        if ((p = sf_parse_string(p, it->name, sizeof(it->name))) == NULL)
            return -1;
        while (*p == ';') {
            char key[8];
            size_t k = 0;
            p++;
            if (!islower((unsigned char)*p))
                return -1;
            while (islower((unsigned char)*p) && k + 1 < sizeof(key))
                key[k++] = *p++;
            key[k] = '\0';
            if (*p++ != '=')
                return -1;
            if (strcmp(key, "qu") == 0) {
                char unit[64];
                if ((p = sf_parse_string(p, unit, sizeof(unit))) == NULL ||
                    strcmp(unit, "concurrent-requests") != 0 || it->has_qu)
                    return -1;
                it->has_qu = true;
                continue;
            }
            int64_t v;
            if ((p = sf_parse_int(p, &v)) == NULL || v < 0)
                return -1;
            if (strcmp(key, "q") == 0 && !it->has_q)
                it->q = v, it->has_q = true;
            else if (strcmp(key, "w") == 0 && !it->has_w)
                it->w = v, it->has_w = true;
            else if (strcmp(key, "r") == 0 && !it->has_r)
                it->r = v, it->has_r = true;
            else if (strcmp(key, "t") == 0 && !it->has_t)
                it->t = v, it->has_t = true;
            else
                return -1;
        }
        if (*p == '\0')
            return n;
        if (p[0] != ',' || p[1] != ' ')
            return -1;
        p += 2;
    }
}

/* ---- per style */

static void check_draft(const struct captured *c, const struct ratelimit_item *items, size_t n)
{
    static const char *const names[] = {"RateLimit-Limit", "RateLimit-Remaining",
                                        "RateLimit-Reset", "RateLimit-Policy"};
    int64_t limit, remaining, reset, pl;
    CHECK(c->n == 0 || c->n == 4);
    if (c->n == 0)
        return;
    for (size_t i = 0; i < 4; i++)
        CHECK(strcmp(c->name[i], names[i]) == 0);
    CHECK(is_decimal(c->value[0], &limit));
    CHECK(is_decimal(c->value[1], &remaining));
    CHECK(is_decimal(c->value[2], &reset));
    CHECK(remaining <= limit);
    /* Policy: "L" or "L;w=W" with the same L */
    char *semi = strchr(c->value[3], ';');
    if (semi) {
        int64_t w;
        CHECK(strncmp(semi, ";w=", 3) == 0 && is_decimal(semi + 3, &w) && w >= 1);
        *semi = '\0';
    }
    CHECK(is_decimal(c->value[3], &pl) && pl == limit);
    bool found = false, exhausted = false;
    for (size_t i = 0; i < n; i++) {
        found |= clamp_nonneg(items[i].limit) == limit;
        exhausted |= items[i].remaining <= 0;
    }
    CHECK(found);
    if (exhausted)
        CHECK(remaining == 0);
}

static void check_x(const struct captured *c, const struct ratelimit_item *items, size_t n,
                    int64_t now_ms)
{
    static const char *const names[] = {"X-RateLimit-Limit", "X-RateLimit-Remaining",
                                        "X-RateLimit-Reset"};
    int64_t limit, remaining, reset;
    CHECK(c->n == 0 || c->n == 3);
    if (c->n == 0)
        return;
    for (size_t i = 0; i < 3; i++)
        CHECK(strcmp(c->name[i], names[i]) == 0);
    CHECK(is_decimal(c->value[0], &limit));
    CHECK(is_decimal(c->value[1], &remaining));
    CHECK(is_decimal(c->value[2], &reset));
    CHECK(remaining <= limit);
    /* a Unix time no earlier than now */
    CHECK((__int128)reset * 1000 >= (__int128)clamp_nonneg(now_ms) - 999);
    bool exhausted = false;
    for (size_t i = 0; i < n; i++)
        exhausted |= items[i].remaining <= 0;
    if (exhausted)
        CHECK(remaining == 0);
}

static void check_ietf(const struct captured *c, const struct ratelimit_item *items, size_t n)
{
    static struct sf_item policy[MAX_ITEMS + 1], state[MAX_ITEMS + 1];
    CHECK(c->n == 0 || c->n == 2);
    if (c->n == 0)
        return;
    CHECK(strcmp(c->name[0], "RateLimit-Policy") == 0);
    CHECK(strcmp(c->name[1], "RateLimit") == 0);
    int np = sf_parse_list(c->value[0], policy, MAX_ITEMS + 1);
    int ns = sf_parse_list(c->value[1], state, MAX_ITEMS + 1);
    CHECK(np >= 1 && np == ns && (size_t)np <= n);
    for (int i = 0; i < np; i++) {
        CHECK(strcmp(policy[i].name, state[i].name) == 0);
        CHECK(policy[i].has_q && !policy[i].has_r && !policy[i].has_t);
        CHECK(!(policy[i].has_w && policy[i].has_qu));
        CHECK(state[i].has_r && state[i].has_t && !state[i].has_q && !state[i].has_w && !state[i].has_qu);
        CHECK(state[i].r <= policy[i].q);
        if (policy[i].has_w)
            CHECK(policy[i].w >= 1);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ratelimit_item items[MAX_ITEMS];
    char *pool, *names;
    struct reader r = {data, size};
    struct captured c;
    size_t n;

    if (size > 8192)
        return 0;
    uint8_t style_byte = rd_u8(&r);
    enum header_style style = (enum header_style)(style_byte % 5); /* 4: not a style */
    n = rd_u8(&r) % (MAX_ITEMS + 1);
    int64_t now_ms = rd_num(&r);
    /* Every name NUL-terminated in one buffer; at most the input plus a NUL per item. */
    pool = names = malloc(size + MAX_ITEMS);
    CHECK(pool != NULL);
    for (size_t i = 0; i < n; i++) {
        uint8_t flags = rd_u8(&r);
        items[i].concurrency = flags & 1;
        items[i].limit = rd_num(&r);
        items[i].remaining = rd_num(&r);
        items[i].reset_ms = rd_num(&r);
        items[i].window_ms = rd_num(&r);
        size_t len = rd_u8(&r);
        if (len > r.left)
            len = r.left;
        memcpy(names, r.p, len);
        names[len] = '\0';
        r.p += len;
        r.left -= len;
        items[i].name = (flags & 2) ? NULL : names;
        names += len + 1;
    }

    memset(&c, 0, sizeof(c));
    ratelimit_headers_render(style, items, n, now_ms, capture, &c);
    if (n == 0 || style == HEADERS_OFF || (unsigned)style > HEADERS_OFF)
        CHECK(c.n == 0);
    else if (style == HEADERS_DRAFT)
        check_draft(&c, items, n);
    else if (style == HEADERS_X)
        check_x(&c, items, n, now_ms);
    else
        check_ietf(&c, items, n);
    for (size_t i = 0; i < c.n; i++)
        free(c.value[i]);
    free(pool);

    /* Retry-After: whole seconds, at least 1, never short of reset_ms. */
    int64_t reset_ms = rd_num(&r);
    int64_t s = ratelimit_retry_after_s(reset_ms);
    CHECK(s >= 1);
    if (reset_ms > 0)
        CHECK((__int128)s * 1000 >= reset_ms && (__int128)(s - 1) * 1000 < reset_ms);
    else
        CHECK(s == 1);

    /* header_style_parse on the rest, as text */
    char text[16];
    size_t tl = r.left < sizeof(text) - 1 ? r.left : sizeof(text) - 1;
    memcpy(text, r.p, tl);
    text[tl] = '\0';
    enum header_style parsed;
    if (header_style_parse(text, &parsed) == 0)
        CHECK((unsigned)parsed <= HEADERS_OFF);
    return 0;
}
