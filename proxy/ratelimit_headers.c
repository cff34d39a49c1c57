/* RateLimit response headers: draft (RateLimit-Limit/-Remaining/-Reset/-Policy),
 * ietf (draft-ietf-httpapi-ratelimit-headers-11 structured fields), x (X-RateLimit-*). */
#include "proxy/ratelimit_headers.h"

#include "store/decimal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Structured-field integers have at most 15 digits (RFC 8941 3.3.1). */
#define SF_INT_MAX INT64_C(999999999999999)

/* An ietf item's name as an sf-string: a plan name (64), a route method (16) and prefix
 * (1024), a window and an ordinal, every byte possibly escaped. One item
 * ("name";q=...;w=...) and the whole list. Items that do not fit the list are left out of
 * both headers. */
#define NAME_MAX_SF 2400
#define ITEM_MAX (NAME_MAX_SF + 80)
#define LIST_MAX 8192

static const struct {
    const char *name;
    enum header_style style;
} style_names[] = {
    {"draft", HEADERS_DRAFT},
    {"ietf", HEADERS_IETF},
    {"x", HEADERS_X},
    {"off", HEADERS_OFF},
};

int header_style_parse(const char *text, enum header_style *pstyle)
{
    if (text == NULL)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(style_names) / sizeof(style_names[0]); i++) {
        if (strcasecmp(text, style_names[i].name) == 0) {
            if (pstyle)
                *pstyle = style_names[i].style;
            return 0;
        }
    }
    return -EINVAL;
}

static void why_printf(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_printf(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    if (why == NULL || whylen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

int header_styles_parse(const char *text, unsigned *pstyles, char *why, size_t whylen)
{
    unsigned styles = 0;
    bool off = false;
    size_t count = 0;
    const char *p = text;

    if (text == NULL)
        return -EINVAL;
    for (;;) {
        char word[16];
        size_t len;
        enum header_style style;

        while (*p == ' ' || *p == '\t')
            p++;
        len = strcspn(p, ",");
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0) {
            why_printf(why, whylen, "expected a comma-separated list of draft, ietf, x, or off alone; "
                                   "found an empty item");
            return -EINVAL;
        }
        if (len >= sizeof(word)) {
            why_printf(why, whylen, "expected draft, ietf, x or off, got \"%.15s...\"", p);
            return -EINVAL;
        }
        memcpy(word, p, len);
        word[len] = '\0';
        if (header_style_parse(word, &style) != 0) {
            why_printf(why, whylen, "expected draft, ietf, x or off, got \"%s\"", word);
            return -EINVAL;
        }
        if (style == HEADERS_OFF ? off : (styles & style) != 0) {
            why_printf(why, whylen, "style \"%s\" given twice", word);
            return -EINVAL;
        }
        if (style == HEADERS_OFF)
            off = true;
        styles |= style;
        count++;
        p += strcspn(p, ",");
        if (*p == '\0')
            break;
        p++;
    }
    if (off && count > 1) {
        why_printf(why, whylen, "\"off\" must stand alone, not combined with other styles");
        return -EINVAL;
    }
    if (pstyles)
        *pstyles = styles;
    return 0;
}

/* ceil(ms / 1000) for ms >= 0; 0 for negative ms. No overflow. */
static int64_t ms_to_s_ceil(int64_t ms)
{
    if (ms <= 0)
        return 0;
    return ms / 1000 + (ms % 1000 != 0);
}

int64_t ratelimit_retry_after_s(int64_t reset_ms)
{
    int64_t s = ms_to_s_ceil(reset_ms);
    return s < 1 ? 1 : s;
}

static int64_t clamp_nonneg(int64_t v, int64_t max)
{
    if (v < 0)
        return 0;
    return v > max ? max : v;
}

/* The one rule (see ratelimit_closest in the header): refusing first; rate before
 * concurrency; fewest remaining; longest reset. Ties keep the earlier item. */
static bool closer_to_running_out(const struct ratelimit_item *a, const struct ratelimit_item *b)
{
    if (a->rejected != b->rejected)
        return a->rejected;
    if (a->concurrency != b->concurrency)
        return !a->concurrency;
    if (a->remaining != b->remaining)
        return a->remaining < b->remaining;
    return a->reset_ms > b->reset_ms;
}

size_t ratelimit_closest(const struct ratelimit_item *items, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (closer_to_running_out(&items[i], &items[best]))
            best = i;
    return best;
}

/* Adds RateLimit-Limit, -Remaining and -Reset, and writes the draft's RateLimit-Policy
 * item into policy, which holds at least DRAFT_POLICY_MAX bytes (the caller adds it, joined
 * with the ietf items when both styles are on). Returns the item's length. Every number is
 * >= 0 here (clamped), so none is cut. */
#define DRAFT_POLICY_MAX (2 * DECIMAL_MAX + 3) /* "<limit>;w=<seconds>" */
_Static_assert(LIST_MAX >= DRAFT_POLICY_MAX, "the policy list holds the draft item");
static size_t render_draft(const struct ratelimit_item *it, char *policy, header_add_fn *add, void *arg)
{
    char limit[DECIMAL_MAX], remaining[DECIMAL_MAX], reset[DECIMAL_MAX];
    int64_t l = clamp_nonneg(it->limit, INT64_MAX);

    decimal_write(limit, (uint64_t)l);
    decimal_write(remaining, (uint64_t)clamp_nonneg(it->remaining, l));
    decimal_write(reset, (uint64_t)ms_to_s_ceil(it->reset_ms));
    size_t n = decimal_write(policy, (uint64_t)l);
    if (!it->concurrency && it->window_ms > 0) {
        memcpy(policy + n, ";w=", 3);
        n += 3 + decimal_write(policy + n + 3, (uint64_t)ms_to_s_ceil(it->window_ms));
    }
    add(arg, "RateLimit-Limit", limit);
    add(arg, "RateLimit-Remaining", remaining);
    add(arg, "RateLimit-Reset", reset);
    return n;
}

static void render_x(const struct ratelimit_item *it, int64_t now_unix_ms, header_add_fn *add,
                     void *arg)
{
    char limit[DECIMAL_MAX], remaining[DECIMAL_MAX], reset[DECIMAL_MAX];
    int64_t l = clamp_nonneg(it->limit, INT64_MAX);
    int64_t now = now_unix_ms < 0 ? 0 : now_unix_ms;
    int64_t delta = it->reset_ms < 0 ? 0 : it->reset_ms;
    int64_t at = delta > INT64_MAX - now ? INT64_MAX : now + delta;

    decimal_write(limit, (uint64_t)l);
    decimal_write(remaining, (uint64_t)clamp_nonneg(it->remaining, l));
    decimal_write(reset, (uint64_t)ms_to_s_ceil(at));
    add(arg, "X-RateLimit-Limit", limit);
    add(arg, "X-RateLimit-Remaining", remaining);
    add(arg, "X-RateLimit-Reset", reset);
}

/* The byte an item's name carries for c: an sf-string holds printable ASCII only. */
static unsigned char sf_char(unsigned char c)
{
    return c < 0x20 || c > 0x7e ? '?' : c;
}

char *ratelimit_policy_name(const char *name)
{
    char *copy = strdup(name != NULL ? name : "");
    if (copy != NULL)
        for (unsigned char *p = (unsigned char *)copy; *p; p++)
            *p = sf_char(*p);
    return copy;
}

/* Writes name as an sf-string ("...", with " and \ escaped). Characters an sf-string
 * cannot hold (controls, non-ASCII) become '?'. Returns its length without the NUL, or 0
 * when it does not fit. */
static size_t sf_string(char *buf, size_t size, const char *name)
{
    size_t o = 0;
    if (name == NULL)
        name = "";
    if (size < 3)
        return 0;
    buf[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        unsigned char c = sf_char(*p);
        if (c == '"' || c == '\\') {
            if (o + 2 >= size)
                return 0;
            buf[o++] = '\\';
        }
        if (o + 1 >= size)
            return 0;
        buf[o++] = (char)c;
    }
    if (o + 2 > size)
        return 0;
    buf[o++] = '"';
    buf[o] = '\0';
    return o;
}

/* An item's parameters after its name: at most ";qu=" and its string, or two integers. */
#define CONCURRENT_UNIT ";qu=\"concurrent-requests\""
_Static_assert(ITEM_MAX >= NAME_MAX_SF + 2 * (3 + DECIMAL_MAX), "an item holds its name and two integers");
_Static_assert(ITEM_MAX >= NAME_MAX_SF + 3 + DECIMAL_MAX + sizeof(CONCURRENT_UNIT), "and a concurrency unit");

/* Writes key (";q=" and the like) and v (>= 0) at item + len; returns the new length.
 * Written by hand: snprintf cost about 1.5k instructions an item on every response. */
static size_t item_param(char *item, size_t len, const char key[4], int64_t v)
{
    memcpy(item + len, key, 3);
    return len + 3 + decimal_write(item + len + 3, (uint64_t)v);
}

/* Appends ", item" (or "item" to an empty list). Returns 0, or -1 when it does not fit. */
static int list_append(char *list, size_t size, size_t *plen, const char *item)
{
    size_t add = strlen(item) + (*plen ? 2 : 0);
    if (*plen + add + 1 > size)
        return -1;
    if (*plen) {
        memcpy(list + *plen, ", ", 2);
        *plen += 2;
    }
    memcpy(list + *plen, item, strlen(item) + 1);
    *plen += strlen(item);
    return 0;
}

/* Appends the ietf items to policy (which may already hold the draft item) and adds
 * RateLimit. */
static void render_ietf(const struct ratelimit_item *items, size_t n, char *policy,
                        size_t *ppolicy_len, header_add_fn *add, void *arg)
{
    char state[LIST_MAX];
    size_t policy_len = *ppolicy_len, state_len = 0;

    state[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const struct ratelimit_item *it = &items[i];
        char pitem[ITEM_MAX], sitem[ITEM_MAX];
        int64_t q = clamp_nonneg(it->limit, SF_INT_MAX);
        int64_t r = clamp_nonneg(it->remaining, q);
        int64_t t = clamp_nonneg(ms_to_s_ceil(it->reset_ms), SF_INT_MAX);

        size_t name_len = sf_string(pitem, NAME_MAX_SF, it->name);
        if (name_len == 0)
            continue;
        memcpy(sitem, pitem, name_len);
        size_t p = item_param(pitem, name_len, ";q=", q);
        if (it->concurrency)
            memcpy(pitem + p, CONCURRENT_UNIT, sizeof(CONCURRENT_UNIT));
        else if (it->window_ms > 0)
            item_param(pitem, p, ";w=", clamp_nonneg(ms_to_s_ceil(it->window_ms), SF_INT_MAX));
        item_param(sitem, item_param(sitem, name_len, ";r=", r), ";t=", t);
        /* Both headers carry the same items: add to both or to neither. */
        if (policy_len + strlen(pitem) + 3 > LIST_MAX || state_len + strlen(sitem) + 3 > sizeof(state))
            break;
        if (list_append(policy, LIST_MAX, &policy_len, pitem) ||
            list_append(state, sizeof(state), &state_len, sitem))
            break;
    }
    *ppolicy_len = policy_len;
    if (state_len > 0)
        add(arg, "RateLimit", state);
}

void ratelimit_headers_render(unsigned styles, const struct ratelimit_item *items, size_t n,
                              int64_t now_unix_ms, header_add_fn *add, void *arg)
{
    char policy[LIST_MAX];
    size_t policy_len = 0;

    if (items == NULL || n == 0 || add == NULL)
        return;
    policy[0] = '\0';
    const struct ratelimit_item *closest = &items[ratelimit_closest(items, n)];
    if (styles & HEADERS_DRAFT)
        policy_len = render_draft(closest, policy, add, arg);
    if (styles & HEADERS_IETF)
        render_ietf(items, n, policy, &policy_len, add, arg);
    if (policy_len > 0)
        add(arg, "RateLimit-Policy", policy);
    if (styles & HEADERS_X)
        render_x(closest, now_unix_ms, add, arg);
}
