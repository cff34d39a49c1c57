/* Unit tests for proxy/ratelimit_headers.c: every style, exact header text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/ratelimit_headers.h"

struct captured {
    size_t n;
    char name[8][64];
    char value[8][8192];
};

static void capture(void *arg, const char *name, const char *value)
{
    struct captured *c = arg;
    assert_true(c->n < 8);
    snprintf(c->name[c->n], sizeof(c->name[0]), "%s", name);
    snprintf(c->value[c->n], sizeof(c->value[0]), "%s", value);
    c->n++;
}

static void render(struct captured *c, unsigned style,
                   const struct ratelimit_item *items, size_t n, int64_t now_ms)
{
    memset(c, 0, sizeof(*c));
    ratelimit_headers_render(style, items, n, now_ms, capture, c);
}

static void assert_header(const struct captured *c, size_t i, const char *name, const char *value)
{
    assert_true(i < c->n);
    assert_string_equal(c->name[i], name);
    assert_string_equal(c->value[i], value);
}

/* a 100/min rate limit with 42 left, the next slot frees in 16.2 s */
static const struct ratelimit_item rate = {"free", 100, 42, 16200, 60000, false, false};
/* a concurrency limit of 10 with 3 slots left */
static const struct ratelimit_item conc = {"free-conc", 10, 3, 0, 0, true, false};

static void test_style_parse(void **state)
{
    enum header_style s = HEADERS_OFF;
    assert_int_equal(header_style_parse("draft", &s), 0);
    assert_int_equal(s, HEADERS_DRAFT);
    assert_int_equal(header_style_parse("ietf", &s), 0);
    assert_int_equal(s, HEADERS_IETF);
    assert_int_equal(header_style_parse("x", &s), 0);
    assert_int_equal(s, HEADERS_X);
    assert_int_equal(header_style_parse("off", &s), 0);
    assert_int_equal(s, HEADERS_OFF);
    assert_int_equal(header_style_parse("X-RateLimit", &s), -EINVAL);
    assert_int_equal(header_style_parse("", &s), -EINVAL);
    assert_int_equal(header_style_parse(NULL, &s), -EINVAL);
}

static void test_styles_parse(void **state)
{
    unsigned styles = 99;
    char why[160];
    assert_int_equal(header_styles_parse("draft", &styles, why, sizeof(why)), 0);
    assert_int_equal(styles, HEADERS_DRAFT);
    assert_int_equal(header_styles_parse("draft, ietf", &styles, why, sizeof(why)), 0);
    assert_int_equal(styles, HEADERS_DRAFT | HEADERS_IETF);
    assert_int_equal(header_styles_parse(" X ,ietf,draft ", &styles, why, sizeof(why)), 0);
    assert_int_equal(styles, HEADERS_ALL);
    assert_int_equal(header_styles_parse("off", &styles, why, sizeof(why)), 0);
    assert_int_equal(styles, HEADERS_OFF);

    assert_int_equal(header_styles_parse("off, draft", &styles, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "alone"));
    assert_int_equal(header_styles_parse("x, off", &styles, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "alone"));
    assert_int_equal(header_styles_parse("draft,draft", &styles, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "twice"));
    assert_int_equal(header_styles_parse("off,off", &styles, why, sizeof(why)), -EINVAL);
    assert_int_equal(header_styles_parse("draft,,x", &styles, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "empty"));
    assert_int_equal(header_styles_parse("", &styles, why, sizeof(why)), -EINVAL);
    assert_int_equal(header_styles_parse("draft,", &styles, why, sizeof(why)), -EINVAL);
    assert_int_equal(header_styles_parse("draft, kong", &styles, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "\"kong\""));
    assert_int_equal(header_styles_parse("averyveryverylongstylename", &styles, why, sizeof(why)), -EINVAL);
    assert_int_equal(header_styles_parse(NULL, &styles, why, sizeof(why)), -EINVAL);
}

static void test_closest_rule(void **state)
{
    struct ratelimit_item items[] = {
        {"minute", 100, 99, 600, 60000, false, false},
        {"conc", 10, 9, 0, 0, true, false},
        {"hour", 1000, 99, 36000, 3600000, false, false},
    };
    /* rate before concurrency, though the concurrency limit has fewer left (the demo's
       plan: 100/min and 10 at once shows 100/99) */
    assert_int_equal(ratelimit_closest(items, 2), 0);
    /* equal remaining: the longest reset */
    assert_int_equal(ratelimit_closest(items, 3), 2);
    /* fewest remaining */
    items[0].remaining = 5;
    assert_int_equal(ratelimit_closest(items, 3), 0);
    /* none left is just "fewest" */
    items[2].remaining = 0;
    assert_int_equal(ratelimit_closest(items, 3), 2);
    /* a refusing limit comes first, even a concurrency limit */
    items[1].rejected = true;
    items[1].remaining = 0;
    assert_int_equal(ratelimit_closest(items, 3), 1);
    /* among refusing ones, a rate limit, then the longest wait */
    items[0].rejected = true;
    items[0].remaining = 0;
    assert_int_equal(ratelimit_closest(items, 3), 0);
    items[2].rejected = true;
    assert_int_equal(ratelimit_closest(items, 3), 2);
    /* one item */
    assert_int_equal(ratelimit_closest(items + 1, 1), 0);
}

static void test_styles_together(void **state)
{
    struct captured c;
    const struct ratelimit_item items[] = {rate, conc};
    /* draft and ietf share RateLimit-Policy: one field, the draft item first */
    render(&c, HEADERS_DRAFT | HEADERS_IETF, items, 2, 0);
    assert_int_equal(c.n, 5);
    assert_header(&c, 0, "RateLimit-Limit", "100");
    assert_header(&c, 1, "RateLimit-Remaining", "42");
    assert_header(&c, 2, "RateLimit-Reset", "17");
    assert_header(&c, 3, "RateLimit", "\"free\";r=42;t=17, \"free-conc\";r=3;t=0");
    assert_header(&c, 4, "RateLimit-Policy",
                  "100;w=60, \"free\";q=100;w=60, \"free-conc\";q=10;qu=\"concurrent-requests\"");
    /* all three */
    render(&c, HEADERS_ALL, items, 2, INT64_C(1700000000000));
    assert_int_equal(c.n, 8);
    assert_header(&c, 5, "X-RateLimit-Limit", "100");
    /* x and ietf: the policy holds the ietf items only */
    render(&c, HEADERS_X | HEADERS_IETF, &rate, 1, INT64_C(1700000000000));
    assert_int_equal(c.n, 5);
    assert_header(&c, 1, "RateLimit-Policy", "\"free\";q=100;w=60");
}

static void test_draft(void **state)
{
    struct captured c;
    render(&c, HEADERS_DRAFT, &rate, 1, 0);
    assert_int_equal(c.n, 4);
    assert_header(&c, 0, "RateLimit-Limit", "100");
    assert_header(&c, 1, "RateLimit-Remaining", "42");
    assert_header(&c, 2, "RateLimit-Reset", "17"); /* ceil(16.2) */
    assert_header(&c, 3, "RateLimit-Policy", "100;w=60");
}

static void test_draft_closest_item(void **state)
{
    struct captured c;
    /* least remaining wins */
    struct ratelimit_item items[] = {
        {"free", 100, 42, 16200, 60000, false, false},
        {"free-hour", 3000, 7, 1000, 3600000, false, false},
        {"free-conc", 10, 9, 0, 0, true, false},
    };
    render(&c, HEADERS_DRAFT, items, 3, 0);
    assert_int_equal(c.n, 4);
    assert_header(&c, 0, "RateLimit-Limit", "3000");
    assert_header(&c, 1, "RateLimit-Remaining", "7");
    assert_header(&c, 2, "RateLimit-Reset", "1");
    assert_header(&c, 3, "RateLimit-Policy", "3000;w=3600");

    /* a tie on remaining goes to the longest reset */
    items[0].remaining = 0;
    items[0].reset_ms = 5000;
    items[1].remaining = 0;
    items[1].reset_ms = 90000;
    render(&c, HEADERS_DRAFT, items, 3, 0);
    assert_header(&c, 0, "RateLimit-Limit", "3000");
    assert_header(&c, 1, "RateLimit-Remaining", "0");
    assert_header(&c, 2, "RateLimit-Reset", "90");

    /* a concurrency limit has no window */
    render(&c, HEADERS_DRAFT, &conc, 1, 0);
    assert_int_equal(c.n, 4);
    assert_header(&c, 0, "RateLimit-Limit", "10");
    assert_header(&c, 1, "RateLimit-Remaining", "3");
    assert_header(&c, 2, "RateLimit-Reset", "0");
    assert_header(&c, 3, "RateLimit-Policy", "10");
}

static void test_draft_rounding(void **state)
{
    struct captured c;
    struct ratelimit_item it = {"p", 5, 0, 1000, 1500, false, false};
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_header(&c, 2, "RateLimit-Reset", "1");     /* exactly 1 s stays 1 */
    assert_header(&c, 3, "RateLimit-Policy", "5;w=2"); /* 1.5 s rounds up */
    it.reset_ms = 1;
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_header(&c, 2, "RateLimit-Reset", "1");
    /* values from a confused limiter are clamped, never negative */
    it.reset_ms = -5;
    it.remaining = -3;
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_header(&c, 1, "RateLimit-Remaining", "0");
    assert_header(&c, 2, "RateLimit-Reset", "0");
}

static void test_draft_extremes(void **state)
{
    struct captured c;
    /* the widest numbers there are, and zeros: every digit written, none cut */
    struct ratelimit_item it = {"p", INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, false, false};
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_int_equal(c.n, 4);
    assert_header(&c, 0, "RateLimit-Limit", "9223372036854775807");
    assert_header(&c, 1, "RateLimit-Remaining", "9223372036854775807");
    assert_header(&c, 2, "RateLimit-Reset", "9223372036854776");
    assert_header(&c, 3, "RateLimit-Policy", "9223372036854775807;w=9223372036854776");
    it = (struct ratelimit_item){"p", 0, 0, 0, 10, false, true};
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_header(&c, 0, "RateLimit-Limit", "0");
    assert_header(&c, 1, "RateLimit-Remaining", "0");
    assert_header(&c, 2, "RateLimit-Reset", "0");
    assert_header(&c, 3, "RateLimit-Policy", "0;w=1");
    it = (struct ratelimit_item){"p", 1000000, 999999, 999, 1000, false, false};
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_header(&c, 0, "RateLimit-Limit", "1000000");
    assert_header(&c, 1, "RateLimit-Remaining", "999999");
    assert_header(&c, 2, "RateLimit-Reset", "1");
    assert_header(&c, 3, "RateLimit-Policy", "1000000;w=1");
}

static void test_ietf(void **state)
{
    struct captured c;
    render(&c, HEADERS_IETF, &rate, 1, 0);
    assert_int_equal(c.n, 2);
    assert_header(&c, 0, "RateLimit", "\"free\";r=42;t=17");
    assert_header(&c, 1, "RateLimit-Policy", "\"free\";q=100;w=60");
}

static void test_ietf_every_item(void **state)
{
    struct captured c;
    const struct ratelimit_item items[] = {rate, conc};
    render(&c, HEADERS_IETF, items, 2, 0);
    assert_int_equal(c.n, 2);
    assert_header(&c, 1, "RateLimit-Policy",
                  "\"free\";q=100;w=60, \"free-conc\";q=10;qu=\"concurrent-requests\"");
    assert_header(&c, 0, "RateLimit", "\"free\";r=42;t=17, \"free-conc\";r=3;t=0");
}

static void test_ietf_names_are_sf_strings(void **state)
{
    struct captured c;
    struct ratelimit_item it = {"a\"b\\c", 5, 1, 2000, 10000, false, false};
    render(&c, HEADERS_IETF, &it, 1, 0);
    assert_header(&c, 1, "RateLimit-Policy", "\"a\\\"b\\\\c\";q=5;w=10");
    assert_header(&c, 0, "RateLimit", "\"a\\\"b\\\\c\";r=1;t=2");
    /* bytes an sf-string cannot hold */
    it.name = "x\ny\xc3\xa9";
    render(&c, HEADERS_IETF, &it, 1, 0);
    assert_header(&c, 0, "RateLimit", "\"x?y??\";r=1;t=2");
    it.name = NULL;
    render(&c, HEADERS_IETF, &it, 1, 0);
    assert_header(&c, 0, "RateLimit", "\"\";r=1;t=2");
}

static void test_ietf_item_without_window_or_with_a_name_too_long(void **state)
{
    struct captured c;
    char long_name[3000];
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    const struct ratelimit_item items[] = {
        {"daily", 7, 0, 999, 0, false, false},
        {long_name, 5, 1, 2000, 10000, false, false},
        {"conc", 2, 2, 0, 60000, true, false},
    };
    render(&c, HEADERS_IETF, items, 3, 0);
    assert_int_equal(c.n, 2);
    /* no window: no w parameter; a concurrency item never has one; a name an sf-string
     * cannot hold whole leaves its item out of both headers */
    assert_header(&c, 1, "RateLimit-Policy", "\"daily\";q=7, \"conc\";q=2;qu=\"concurrent-requests\"");
    assert_header(&c, 0, "RateLimit", "\"daily\";r=0;t=1, \"conc\";r=2;t=0");
}

static void test_ietf_many_items_stay_bounded(void **state)
{
    /* far more items than a header should carry: the value is cut at a whole item, and
     * both headers list the same items */
    struct ratelimit_item items[400];
    char name[400][32];
    struct captured c;
    for (size_t i = 0; i < 400; i++) {
        snprintf(name[i], sizeof(name[i]), "plan-limit-%zu", i);
        items[i] = (struct ratelimit_item){name[i], 100, 50, 1000, 60000, false, false};
    }
    render(&c, HEADERS_IETF, items, 400, 0);
    assert_int_equal(c.n, 2);
    size_t np = 1, nr = 1;
    for (const char *p = c.value[1]; *p; p++)
        np += *p == ',';
    for (const char *p = c.value[0]; *p; p++)
        nr += *p == ',';
    assert_true(np > 10 && np < 400);
    assert_int_equal(np, nr);
    assert_true(strlen(c.value[1]) < 8192);
    /* the last item is whole */
    size_t len = strlen(c.value[1]);
    assert_string_equal(c.value[1] + len - 5, ";w=60");
}

static void test_x(void **state)
{
    struct captured c;
    /* now = 1700000000.500 s, reset in 16.2 s -> 1700000016.7 -> 1700000017 */
    render(&c, HEADERS_X, &rate, 1, INT64_C(1700000000500));
    assert_int_equal(c.n, 3);
    assert_header(&c, 0, "X-RateLimit-Limit", "100");
    assert_header(&c, 1, "X-RateLimit-Remaining", "42");
    assert_header(&c, 2, "X-RateLimit-Reset", "1700000017");

    /* exactly on a second */
    struct ratelimit_item it = rate;
    it.reset_ms = 500;
    render(&c, HEADERS_X, &it, 1, INT64_C(1700000000500));
    assert_header(&c, 2, "X-RateLimit-Reset", "1700000001");

    /* a windowed quota describes the caller better than a count of open requests, even
       with fewer slots left... */
    const struct ratelimit_item items[] = {rate, conc};
    render(&c, HEADERS_X, items, 2, INT64_C(1700000000000));
    assert_header(&c, 0, "X-RateLimit-Limit", "100");
    assert_header(&c, 1, "X-RateLimit-Remaining", "42");

    /* ...or with none left (the request used the last slot)... */
    struct ratelimit_item full = conc;
    full.remaining = 0;
    const struct ratelimit_item last[] = {rate, full};
    render(&c, HEADERS_X, last, 2, INT64_C(1700000000000));
    assert_header(&c, 0, "X-RateLimit-Limit", "100");

    /* ...unless the concurrency limit is the one that refused (the 429's reason) */
    full.rejected = true;
    full.reset_ms = 1000;
    const struct ratelimit_item refused[] = {rate, full};
    render(&c, HEADERS_X, refused, 2, INT64_C(1700000000000));
    assert_header(&c, 0, "X-RateLimit-Limit", "10");
    assert_header(&c, 1, "X-RateLimit-Remaining", "0");
    assert_header(&c, 2, "X-RateLimit-Reset", "1700000001");
}

static void test_off_and_empty(void **state)
{
    struct captured c;
    render(&c, HEADERS_OFF, &rate, 1, 0);
    assert_int_equal(c.n, 0);
    render(&c, HEADERS_DRAFT, &rate, 0, 0);
    assert_int_equal(c.n, 0);
    render(&c, HEADERS_IETF, NULL, 0, 0);
    assert_int_equal(c.n, 0);
    /* bits that name no style add nothing */
    render(&c, 1u << 7, &rate, 1, 0);
    assert_int_equal(c.n, 0);
}

static void test_huge_values(void **state)
{
    struct captured c;
    struct ratelimit_item it = {"big", INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, false, false};
    render(&c, HEADERS_DRAFT, &it, 1, 0);
    assert_header(&c, 0, "RateLimit-Limit", "9223372036854775807");
    assert_header(&c, 2, "RateLimit-Reset", "9223372036854776");
    render(&c, HEADERS_X, &it, 1, INT64_C(1700000000000));
    assert_header(&c, 2, "X-RateLimit-Reset", "9223372036854776");
    /* structured-field integers have at most 15 digits */
    render(&c, HEADERS_IETF, &it, 1, 0);
    assert_header(&c, 1, "RateLimit-Policy", "\"big\";q=999999999999999;w=999999999999999");
    assert_header(&c, 0, "RateLimit", "\"big\";r=999999999999999;t=999999999999999");
}

static void test_retry_after(void **state)
{
    assert_int_equal(ratelimit_retry_after_s(0), 1);
    assert_int_equal(ratelimit_retry_after_s(-100), 1);
    assert_int_equal(ratelimit_retry_after_s(1), 1);
    assert_int_equal(ratelimit_retry_after_s(999), 1);
    assert_int_equal(ratelimit_retry_after_s(1000), 1);
    assert_int_equal(ratelimit_retry_after_s(1001), 2);
    assert_int_equal(ratelimit_retry_after_s(16200), 17);
    assert_int_equal(ratelimit_retry_after_s(60000), 60);
    assert_int_equal(ratelimit_retry_after_s(INT64_MAX), INT64_MAX / 1000 + 1);
}

/* A 429's violated-policies names a limit as its ietf item does: the same '?' for what an
 * sf-string cannot hold, without the quotes and escapes. */
static void test_policy_name_is_the_items_name(void **state)
{
    (void)state;
    char *plain = ratelimit_policy_name("pro-POST /upload-10s");
    assert_string_equal(plain, "pro-POST /upload-10s");
    free(plain);
    char *odd = ratelimit_policy_name("caf\xc3\xa9 \"q\"\\-1min");
    assert_string_equal(odd, "caf?? \"q\"\\-1min");
    free(odd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_name_is_the_items_name),
        cmocka_unit_test(test_style_parse),
        cmocka_unit_test(test_styles_parse),
        cmocka_unit_test(test_closest_rule),
        cmocka_unit_test(test_styles_together),
        cmocka_unit_test(test_draft),
        cmocka_unit_test(test_draft_closest_item),
        cmocka_unit_test(test_draft_rounding),
        cmocka_unit_test(test_draft_extremes),
        cmocka_unit_test(test_ietf),
        cmocka_unit_test(test_ietf_every_item),
        cmocka_unit_test(test_ietf_names_are_sf_strings),
        cmocka_unit_test(test_ietf_item_without_window_or_with_a_name_too_long),
        cmocka_unit_test(test_ietf_many_items_stay_bounded),
        cmocka_unit_test(test_x),
        cmocka_unit_test(test_off_and_empty),
        cmocka_unit_test(test_huge_values),
        cmocka_unit_test(test_retry_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
