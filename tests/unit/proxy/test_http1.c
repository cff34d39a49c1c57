/* The HTTP/1.1 pieces both sides read: field characters, Content-Length, field lines,
 * hop-by-hop names and the upstream's status line, as head_screen, forward.c and
 * websocket.c all apply them. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/http1.h"

static void test_field_characters(void **state)
{
    (void)state;
    assert_false(http1_value_ok("a\x1b", 2));
    assert_false(http1_value_ok("a\0b", 3));
    assert_false(http1_value_ok("a\r", 2));
    assert_true(http1_value_ok("a\tb c\x80\xff", 7));
    assert_true(http1_value_ok("", 0));
    assert_false(http1_name_ok("X A", 3));
    assert_false(http1_name_ok("X:A", 3));
    assert_false(http1_name_ok("", 0));
    assert_true(http1_name_ok("X-A_b!#", 7));
}

/* Every byte value at every position of values up to 24 long, as the byte rule says:
 * the eight-at-a-time scan must miss nothing and refuse nothing more. */
static void test_value_scan_matches_the_byte_rule(void **state)
{
    (void)state;
    char v[24];
    for (size_t len = 1; len <= sizeof(v); len++)
        for (size_t at = 0; at < len; at++)
            for (int c = 0; c < 256; c++) {
                memset(v, 'a', sizeof(v));
                v[at] = (char)c;
                bool byte_ok = (c >= 0x20 && c != 0x7f) || c == '\t';
                assert_int_equal(http1_value_ok(v, len), byte_ok);
                assert_int_equal(http1_value_span(v, len), byte_ok ? len : at);
            }
}

static void test_value_span_stops_at_the_first_bad_byte(void **state)
{
    assert_int_equal(http1_value_span("abc", 3), 3);
    assert_int_equal(http1_value_span("abcdefghij\r\n", 12), 10);
    assert_int_equal(http1_value_span("ab\tcdefgh\0ij", 12), 9);
    assert_int_equal(http1_value_span("\x7f", 1), 0);
    assert_int_equal(http1_value_span("", 0), 0);
}

static bool host_ok(const char *s)
{
    return http1_host_ok(s, strlen(s));
}

/* RFC 3986 3.2.2, 3.2.3: host [":" port], no userinfo; an http URI's host is never empty. */
static void test_host_values(void **state)
{
    const char *good[] = { "a", "api.example.com", "a:8080", "a:", "a:0", "a:65535", "127.0.0.1:80",
                           "[::1]", "[::1]:8443", "[2001:db8::7]", "[v1.fe80::a+en1]", "a%41b",
                           "a-b_c~d", "a,b;c=d", "xn--bcher-kva.example" };
    const char *bad[] = { "", ":80", "a b", "evil@a", "user:pw@a", "a:99999", "a:65536", "a:8x", "a:-1",
                          "a:1:2", "[::1", "[::1]x", "[::1]:x", "[zz::1]", "[]", "[v1]", "[v.x]", "a/b",
                          "a?b", "a#b", "a%zz", "a%4", "a\\b", "a\"b", "a\tb" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!host_ok(good[i]))
            fail_msg("refused: \"%s\"", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (host_ok(bad[i]))
            fail_msg("taken: \"%s\"", bad[i]);
}

static void test_content_length_values(void **state)
{
    (void)state;
    int64_t n = -1;
    assert_int_equal(http1_content_length("0", 1, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(http1_content_length(" 42\t", 4, &n), 0);
    assert_int_equal(n, 42);
    assert_int_equal(http1_content_length("9223372036854775807", 19, &n), 0);
    assert_int_equal(n, INT64_MAX);
    assert_int_equal(http1_content_length("9223372036854775808", 19, &n), -ERANGE);
    assert_int_equal(http1_content_length("99999999999999999999x", 21, &n), -EINVAL);
    static const char *const malformed[] = { "", " ", "-1", "+1", "1 2", "1,1", "0x10", "1.0", "1e3", "\xd9\xa1" };
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++)
        assert_int_equal(http1_content_length(malformed[i], strlen(malformed[i]), &n), -EINVAL);
}

static void test_field_lines(void **state)
{
    (void)state;
    struct http1_field f;
    const char *line = "Content-Type:  text/plain \t";
    assert_int_equal(http1_field_line(line, strlen(line), &f), 0);
    assert_int_equal(f.name_len, 12);
    assert_memory_equal(f.name, "Content-Type", 12);
    assert_int_equal(f.value_len, 10);
    assert_memory_equal(f.value, "text/plain", 10);
    assert_int_equal(http1_field_line("X-Empty:", 8, &f), 0);
    assert_int_equal(f.value_len, 0);
    static const char *const malformed[] = { "no colon", ": no name", "X A: space in name", "X :before colon",
                                             "X-A: bad\x01value", "X-A: nul\0" };
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++)
        assert_int_equal(http1_field_line(malformed[i], strlen(malformed[i]) + (i == 5), &f), -EINVAL);
}

static void test_hop_by_hop_names(void **state)
{
    (void)state;
    static const char *const hop[] = { "Connection", "keep-alive", "PROXY-CONNECTION", "Proxy-Authenticate",
                                       "proxy-authorization", "TE", "Trailer", "Transfer-Encoding", "Upgrade" };
    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        assert_true(http1_is_hop_by_hop(hop[i], strlen(hop[i])));
    static const char *const end_to_end[] = { "Trailers", "Content-Length", "Host", "T", "Upgrade-Insecure-Requests" };
    for (size_t i = 0; i < sizeof(end_to_end) / sizeof(end_to_end[0]); i++)
        assert_false(http1_is_hop_by_hop(end_to_end[i], strlen(end_to_end[i])));
}

static void test_upstream_status_lines(void **state)
{
    (void)state;
    static const struct { const char *line; long status; } cases[] = {
        {"HTTP/1.1 200 OK", 200}, {"HTTP/1.0 404", 404}, {"HTTP/1.1 101 Switching Protocols", 101},
        {"HTTP/1.1 200 ", 200}, {"HTTP/2 200 OK", 0}, {"HTTP/1.1 20 OK", 0}, {"HTTP/1.1 2000", 0},
        {"HTTP/1.1 099 Low", 0}, {"HTTP/1.1 600 High", 0}, {"HTTP/1.1 200 O\x01K", 0}, {"HTTP/1.2 200 OK", 0},
        {"http/1.1 200 OK", 0}, {"", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(http1_status_line(cases[i].line, strlen(cases[i].line)), cases[i].status);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field_characters),
        cmocka_unit_test(test_value_scan_matches_the_byte_rule),
        cmocka_unit_test(test_value_span_stops_at_the_first_bad_byte),
        cmocka_unit_test(test_host_values),
        cmocka_unit_test(test_content_length_values),
        cmocka_unit_test(test_field_lines),
        cmocka_unit_test(test_hop_by_hop_names),
        cmocka_unit_test(test_upstream_status_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
