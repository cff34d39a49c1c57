/* Unit tests for proxy/netaddr.c: CIDR parsing and matching, address text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#include "proxy/netaddr.h"

static struct sockaddr_in sin4(const char *text)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons(1234);
    assert_int_equal(inet_pton(AF_INET, text, &sa.sin_addr), 1);
    return sa;
}

static struct sockaddr_in6 sin6(const char *text)
{
    struct sockaddr_in6 sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(1234);
    assert_int_equal(inet_pton(AF_INET6, text, &sa.sin6_addr), 1);
    return sa;
}

static bool match4(const struct cidr *r, size_t n, const char *text)
{
    struct sockaddr_in sa = sin4(text);
    return cidr_match_sockaddr(r, n, (const struct sockaddr *)&sa);
}

static bool match6(const struct cidr *r, size_t n, const char *text)
{
    struct sockaddr_in6 sa = sin6(text);
    return cidr_match_sockaddr(r, n, (const struct sockaddr *)&sa);
}

static void test_parse_good(void **state)
{
    struct cidr c;
    static const uint8_t ten[4] = {10, 0, 0, 0};

    assert_int_equal(cidr_parse("10.0.0.0/8", &c), 0);
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix_len, 8);
    assert_memory_equal(c.addr, ten, 4);

    /* a bare address is a full-length prefix */
    assert_int_equal(cidr_parse("192.0.2.7", &c), 0);
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix_len, 32);

    assert_int_equal(cidr_parse("::1", &c), 0);
    assert_int_equal(c.family, AF_INET6);
    assert_int_equal(c.prefix_len, 128);

    assert_int_equal(cidr_parse("2001:db8::/32", &c), 0);
    assert_int_equal(c.family, AF_INET6);
    assert_int_equal(c.prefix_len, 32);

    assert_int_equal(cidr_parse("0.0.0.0/0", &c), 0);
    assert_int_equal(c.prefix_len, 0);
    assert_int_equal(cidr_parse("::/0", &c), 0);
    assert_int_equal(c.prefix_len, 0);

    /* host bits beyond the prefix are dropped, as nginx does */
    assert_int_equal(cidr_parse("10.1.2.3/8", &c), 0);
    assert_memory_equal(c.addr, ten, 4);

    /* an IPv4-mapped range is stored as the IPv4 range it means */
    assert_int_equal(cidr_parse("::ffff:10.0.0.0/104", &c), 0);
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix_len, 8);
    assert_memory_equal(c.addr, ten, 4);
}

static void test_parse_bad(void **state)
{
    static const char *const bad[] = {
        "",          "/8",          "10.0.0.0/",     "10.0.0.0/33", "::1/129",
        "10.0.0/8",  "10.0.0.0/-1", "10.0.0.0/+8",   "10.0.0.0/8x", " 10.0.0.0/8",
        "10.0.0.0 ", "example.com", "10.0.0.0/0008", "1.2.3.4.5",   "[::1]",
        "fe80::1%eth0", "10.0.0.0/8/8",
    };
    struct cidr c;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cidr_parse(bad[i], &c) != -EINVAL)
            fail_msg("cidr_parse accepted \"%s\"", bad[i]);
    }
    assert_int_equal(cidr_parse(NULL, &c), -EINVAL);
}

static void test_match_v4(void **state)
{
    struct cidr r[2];
    assert_int_equal(cidr_parse("10.0.0.0/8", &r[0]), 0);
    assert_int_equal(cidr_parse("192.168.1.0/25", &r[1]), 0);

    assert_true(match4(r, 2, "10.0.0.1"));
    assert_true(match4(r, 2, "10.255.255.255"));
    assert_false(match4(r, 2, "11.0.0.1"));
    assert_true(match4(r, 2, "192.168.1.127"));
    assert_false(match4(r, 2, "192.168.1.128"));
    /* only the first n ranges count */
    assert_false(match4(r, 1, "192.168.1.1"));
    assert_false(match4(r, 0, "10.0.0.1"));
    assert_false(match4(NULL, 0, "10.0.0.1"));
    /* an IPv4 peer never matches an IPv6 range */
    assert_int_equal(cidr_parse("::/0", &r[0]), 0);
    assert_false(match4(r, 1, "10.0.0.1"));
}

static void test_match_v6(void **state)
{
    struct cidr r[2];
    assert_int_equal(cidr_parse("2001:db8::/32", &r[0]), 0);
    assert_int_equal(cidr_parse("::1", &r[1]), 0);

    assert_true(match6(r, 2, "2001:db8::1"));
    assert_true(match6(r, 2, "2001:db8:ffff::1"));
    assert_false(match6(r, 2, "2001:db9::1"));
    assert_true(match6(r, 2, "::1"));
    assert_false(match6(r, 2, "::2"));

    /* a prefix that is not a multiple of 8 */
    assert_int_equal(cidr_parse("fe80::/10", &r[0]), 0);
    assert_true(match6(r, 1, "fe80::1"));
    assert_true(match6(r, 1, "febf::1"));
    assert_false(match6(r, 1, "fec0::1"));
}

static void test_match_mapped(void **state)
{
    struct cidr r[2];
    /* A dual-stack socket reports IPv4 clients as ::ffff:a.b.c.d: they must match the
     * IPv4 ranges an operator writes. */
    assert_int_equal(cidr_parse("10.0.0.0/8", &r[0]), 0);
    assert_true(match6(r, 1, "::ffff:10.1.2.3"));
    assert_false(match6(r, 1, "::ffff:11.1.2.3"));
    /* not mapped: ::10.1.2.3 is a different (deprecated compatible) address */
    assert_false(match6(r, 1, "::10.1.2.3"));
    assert_false(match6(r, 1, "64:ff9b::10.1.2.3"));

    /* a range written in mapped form matches plain IPv4 peers too */
    assert_int_equal(cidr_parse("::ffff:192.0.2.0/120", &r[0]), 0);
    assert_true(match4(r, 1, "192.0.2.9"));
    assert_true(match6(r, 1, "::ffff:192.0.2.9"));
    assert_false(match4(r, 1, "192.0.3.9"));

    /* a mapped peer still lies in IPv6 ranges that cover it */
    assert_int_equal(cidr_parse("::ffff:0:0/96", &r[0]), 0); /* becomes 0.0.0.0/0 */
    assert_int_equal(r[0].family, AF_INET);
    assert_true(match4(r, 1, "8.8.8.8"));
    assert_int_equal(cidr_parse("::/0", &r[1]), 0);
    assert_true(match6(&r[1], 1, "::ffff:8.8.8.8"));
}

static void test_match_other_families(void **state)
{
    struct cidr r;
    struct sockaddr_un su;
    memset(&su, 0, sizeof(su));
    su.sun_family = AF_UNIX;
    assert_int_equal(cidr_parse("0.0.0.0/0", &r), 0);
    assert_false(cidr_match_sockaddr(&r, 1, (const struct sockaddr *)&su));
    assert_false(cidr_match_sockaddr(&r, 1, NULL));
}

static bool mt(const struct cidr *r, size_t n, const char *s)
{
    return cidr_match_text(r, n, s, strlen(s));
}

static void test_match_text(void **state)
{
    struct cidr r[2];
    assert_int_equal(cidr_parse("10.0.0.0/8", &r[0]), 0);
    assert_int_equal(cidr_parse("2001:db8::/32", &r[1]), 0);

    assert_true(mt(r, 2, "10.2.3.4"));
    assert_true(mt(r, 2, " 10.2.3.4 ")); /* X-Forwarded-For items carry spaces */
    assert_true(mt(r, 2, "2001:db8::5"));
    assert_true(mt(r, 2, "[2001:db8::5]"));
    assert_true(mt(r, 2, "[2001:db8::5]:443"));
    assert_true(mt(r, 2, "10.2.3.4:8080"));
    assert_true(mt(r, 2, "::ffff:10.2.3.4"));
    assert_false(mt(r, 2, "11.2.3.4"));
    assert_false(mt(r, 2, "unknown"));
    assert_false(mt(r, 2, ""));
    assert_false(mt(r, 2, "   "));
    assert_false(mt(r, 2, "[2001:db8::5"));
    assert_false(mt(r, 2, "10.2.3.4.5"));
    assert_false(cidr_match_text(r, 2, NULL, 0));

    /* len bounds the text: the rest of a header line is not read */
    const char *xff = "10.2.3.4, 8.8.8.8";
    assert_true(cidr_match_text(r, 2, xff, 8));
    assert_false(cidr_match_text(r, 2, xff + 10, 7));
    /* longer than any address */
    char long_text[200];
    memset(long_text, '1', sizeof(long_text));
    assert_false(cidr_match_text(r, 2, long_text, sizeof(long_text)));
}

static void test_sockaddr_to_text(void **state)
{
    char buf[64];
    struct sockaddr_in a4 = sin4("192.0.2.1");
    struct sockaddr_in6 a6 = sin6("2001:db8::1");
    struct sockaddr_in6 m6 = sin6("::ffff:192.0.2.1");
    struct sockaddr_un su;

    assert_string_equal(sockaddr_to_text((struct sockaddr *)&a4, buf, sizeof(buf)), "192.0.2.1");
    assert_string_equal(sockaddr_to_text((struct sockaddr *)&a6, buf, sizeof(buf)),
                        "2001:db8::1");
    /* one client, one address: mapped peers are shown as IPv4 */
    assert_string_equal(sockaddr_to_text((struct sockaddr *)&m6, buf, sizeof(buf)), "192.0.2.1");

    memset(&su, 0, sizeof(su));
    su.sun_family = AF_UNIX;
    assert_string_equal(sockaddr_to_text((struct sockaddr *)&su, buf, sizeof(buf)), "");
    assert_string_equal(sockaddr_to_text(NULL, buf, sizeof(buf)), "");
    /* too small a buffer gives "", never a cut address */
    assert_string_equal(sockaddr_to_text((struct sockaddr *)&a4, buf, 5), "");
    assert_string_equal(sockaddr_to_text((struct sockaddr *)&a4, NULL, 0), "");
}

/* IPv4 text is written without inet_ntop: it says what inet_ntop says, for every octet
 * value in every position, plain and v4-mapped. */
static void test_sockaddr_to_text_ipv4_as_inet_ntop(void **state)
{
    char buf[64], want[INET_ADDRSTRLEN];
    struct sockaddr_in a4 = sin4("0.0.0.0");
    struct sockaddr_in6 m6 = sin6("::ffff:0.0.0.0");
    uint32_t x = 2463534242u;                     /* xorshift: many mixed addresses */
    for (unsigned i = 0; i < 256 * 4 + 20000; i++) {
        uint8_t a[4];
        if (i < 256 * 4) {                        /* octet i % 256 in position i / 256 */
            memset(a, i % 3 == 0 ? 0 : 255, sizeof(a));
            a[i / 256] = (uint8_t)(i % 256);
        } else {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            memcpy(a, &x, sizeof(a));
        }
        memcpy(&a4.sin_addr, a, 4);
        memcpy(m6.sin6_addr.s6_addr + 12, a, 4);
        assert_non_null(inet_ntop(AF_INET, a, want, sizeof(want)));
        assert_string_equal(sockaddr_to_text((struct sockaddr *)&a4, buf, sizeof(buf)), want);
        assert_string_equal(sockaddr_to_text((struct sockaddr *)&m6, buf, sizeof(buf)), want);
    }
    /* the longest address fits the size inet_ntop asks for, exactly */
    a4 = sin4("255.255.255.255");
    assert_string_equal(sockaddr_to_text((struct sockaddr *)&a4, buf, INET_ADDRSTRLEN), "255.255.255.255");
}

static void test_xff_client_address(void **state)
{
    (void)state;
    struct cidr trusted[2];
    assert_int_equal(cidr_parse("10.0.0.0/8", &trusted[0]), 0);
    assert_int_equal(cidr_parse("::1", &trusted[1]), 0);
    char out[64];
#define XFF(list) xff_client_address((list), strlen(list), trusted, 2, out, sizeof(out))
    /* the right-most address that is not a trusted proxy */
    assert_true(XFF("198.51.100.1, 203.0.113.7"));
    assert_string_equal(out, "203.0.113.7");
    assert_true(XFF("198.51.100.1, 203.0.113.7, 10.1.2.3,::1"));
    assert_string_equal(out, "203.0.113.7");
    /* spaces, tabs and empty items */
    assert_true(XFF(" \t192.0.2.5\t ,, ,10.0.0.1,"));
    assert_string_equal(out, "192.0.2.5");
    /* garbage on the right is the client, as written (never believed as trusted) */
    assert_true(XFF("192.0.2.5, not-an-ip"));
    assert_string_equal(out, "not-an-ip");
    /* all trusted: the left-most */
    assert_true(XFF("10.0.0.9, 10.0.0.8"));
    assert_string_equal(out, "10.0.0.9");
    /* nothing: out untouched */
    strcpy(out, "peer");
    assert_false(XFF(""));
    assert_false(XFF(" , ,\t"));
    assert_string_equal(out, "peer");
    /* an item too long for out is passed over */
    char longer[200];
    memset(longer, 'a', 100);
    strcpy(longer + 100, ", 192.0.2.1, 10.0.0.1");
    memmove(longer + 13, longer, strlen(longer) + 1);
    memcpy(longer, "192.0.2.200, ", 13);
    assert_true(xff_client_address(longer, strlen(longer), trusted, 2, out, sizeof(out)));
    assert_string_equal(out, "192.0.2.1");
    assert_true(xff_client_address("192.0.2.200, aaaa", 17, trusted, 2, out, 5));
    assert_string_equal(out, "aaaa");
#undef XFF
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_match_v4),
        cmocka_unit_test(test_match_v6),
        cmocka_unit_test(test_match_mapped),
        cmocka_unit_test(test_match_other_families),
        cmocka_unit_test(test_match_text),
        cmocka_unit_test(test_sockaddr_to_text),
        cmocka_unit_test(test_sockaddr_to_text_ipv4_as_inet_ntop),
        cmocka_unit_test(test_xff_client_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
