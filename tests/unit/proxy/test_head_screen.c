/* The first-head screen: which heads libmicrohttpd may have, which the proxy refuses with
 * which status, and that a good head is never refused while it is still arriving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/head_screen.h"

static struct head_screen screen_str(const char *s)
{
    return head_screen(s, strlen(s), MAX_HEAD_BYTES);
}

static void assert_refused(const char *head, unsigned status)
{
    struct head_screen hs = screen_str(head);
    assert_int_equal(hs.outcome, HEAD_REFUSED);
    assert_int_equal(hs.status, status);
    assert_non_null(hs.error_code);
}

static void assert_acceptable(const char *head)
{
    assert_int_equal(screen_str(head).outcome, HEAD_ACCEPTABLE);
}

static void test_plain_get_is_acceptable_with_its_request_line(void **state)
{
    const char *head = "GET /v1/items?q=%41 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n";
    struct head_screen hs = screen_str(head);
    assert_int_equal(hs.outcome, HEAD_ACCEPTABLE);
    assert_int_equal(hs.method_len, 3);
    assert_memory_equal(hs.method, "GET", 3);
    assert_int_equal(hs.target_len, strlen("/v1/items?q=%41"));
    assert_memory_equal(hs.target, "/v1/items?q=%41", hs.target_len);
}

static void test_every_prefix_of_a_good_head_waits(void **state)
{
    const char *head = "\r\nPOST /up HTTP/1.0\r\nContent-Length: 5\r\nX-A:  b\tc \r\nX-Empty:\r\n\r\nhello";
    size_t end = strlen(head) - strlen("hello");
    for (size_t n = 0; n < end; n++)
        assert_int_equal(head_screen(head, n, MAX_HEAD_BYTES).outcome, HEAD_INCOMPLETE);
    for (size_t n = end; n <= strlen(head); n++)
        assert_int_equal(head_screen(head, n, MAX_HEAD_BYTES).outcome, HEAD_ACCEPTABLE);
}

static void test_leading_empty_lines_and_bare_lf_are_taken(void **state)
{
    assert_acceptable("\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_acceptable("GET / HTTP/1.1\nHost: x\n\n");
    assert_acceptable("GET / HTTP/1.0\r\n\r\n");
    assert_acceptable("GET  /  HTTP/1.1\r\n\r\n"); /* libmicrohttpd takes extra spaces here */
    /* but not after the version, which it reads as part of it (400 in HTML) */
    assert_int_equal(screen_str("GET / HTTP/1.1 \r\n\r\n").fault, HEAD_FAULT_AFTER_VERSION);
    assert_refused("GET / HTTP/1.1  \r\nHost: x\r\n\r\n", 400);
}

static void test_head_over_the_limit(void **state)
{
    size_t max = 256;
    char buf[1024];
    /* A request line longer than the limit: 414; a field: 431. */
    memset(buf, 'a', sizeof(buf));
    memcpy(buf, "GET /", 5);
    struct head_screen hs = head_screen(buf, sizeof(buf), max);
    assert_int_equal(hs.outcome, HEAD_REFUSED);
    assert_int_equal(hs.status, 414);
    assert_null(hs.method);

    memcpy(buf, "GET / HTTP/1.1\r\nX-Big: ", 23);
    hs = head_screen(buf, sizeof(buf), max);
    assert_int_equal(hs.outcome, HEAD_REFUSED);
    assert_int_equal(hs.status, 431);
    assert_int_equal(hs.method_len, 3);

    /* Exactly max bytes with its blank line is fine; one more is not. */
    memset(buf, 'a', sizeof(buf));
    memcpy(buf, "GET / HTTP/1.1\r\nX-Big: ", 23);
    memcpy(buf + max - 4, "\r\n\r\n", 4);
    assert_int_equal(head_screen(buf, max, max).outcome, HEAD_ACCEPTABLE);
    memset(buf, 'a', sizeof(buf));
    memcpy(buf, "GET / HTTP/1.1\r\nX-Big: ", 23);
    memcpy(buf + max - 3, "\r\n\r\n", 4);
    assert_int_equal(head_screen(buf, max + 1, max).status, 431);
    /* Short of the limit and unfinished: wait. */
    assert_int_equal(head_screen(buf, max - 10, max).outcome, HEAD_INCOMPLETE);
}

static void test_malformed_request_lines(void **state)
{
    assert_refused("GARBAGE\r\n\r\n", 400);
    assert_refused(" GET / HTTP/1.1\r\n\r\n", 400);
    assert_refused("GET / FOO/1.1\r\n\r\n", 400);
    assert_refused("GET /\r\n\r\n", 400);             /* HTTP/0.9 */
    assert_refused("GET / HTTP/1.10\r\n\r\n", 400);
    assert_refused("GET /a\x01 HTTP/1.1\r\n\r\n", 400);
    assert_refused("G(T / HTTP/1.1\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\rX\r\n\r\n", 400); /* a bare CR */
}

static void test_refused_before_the_line_ends(void **state)
{
    /* A TLS ClientHello or a stray byte is refused at once, not after a timeout. */
    const char hello[] = "\x16\x03\x01\x00\xa5\x01\x00";
    struct head_screen hs = head_screen(hello, sizeof(hello) - 1, MAX_HEAD_BYTES);
    assert_int_equal(hs.outcome, HEAD_REFUSED);
    assert_int_equal(hs.status, 400);
    assert_refused("GET /x\x7f", 400);
}

static void test_versions_past_1_x_are_505_and_1_x_is_taken(void **state)
{
    assert_refused("GET / HTTP/2.0\r\n\r\n", 505);
    assert_refused("GET / HTTP/0.9\r\nHost: x\r\n\r\n", 505);
    assert_int_equal(screen_str("GET / HTTP/3.0\r\n\r\n").fault, HEAD_FAULT_VERSION);
    /* SPEC: HTTP/1.2 and other 1.x minor versions are HTTP/1.1 (RFC 9110 2.5) */
    assert_acceptable("GET / HTTP/1.2\r\nHost: x\r\n\r\n");
    assert_acceptable("GET / HTTP/1.9\r\n\r\n");
    assert_refused("GET / HTTP/1.10\r\n\r\n", 400);
}

static void test_malformed_field_lines(void **state)
{
    assert_refused("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nX-A : b\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nX A: b\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\n: b\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nX-A: a\r\n X-Tier-User: admin\r\n\r\n", 400); /* obs-fold */
    assert_refused("GET / HTTP/1.1\r\nX-A: a\rX-Tier-User: admin\r\n\r\n", 400); /* bare CR */
    assert_refused("GET / HTTP/1.1\r\nX-A: b\r\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\n\rX\r\n", 400);
}

static void test_nul_anywhere_in_the_head_is_refused(void **state)
{
    const char head[] = "GET / HTTP/1.1\r\nAuthorization: Bearer key\0junk\r\n\r\n";
    struct head_screen hs = head_screen(head, sizeof(head) - 1, MAX_HEAD_BYTES);
    assert_int_equal(hs.outcome, HEAD_REFUSED);
    assert_int_equal(hs.status, 400);
    const char target[] = "GET /a\0b HTTP/1.1\r\n\r\n";
    assert_int_equal(head_screen(target, sizeof(target) - 1, MAX_HEAD_BYTES).status, 400);
}

static void test_content_length_values(void **state)
{
    assert_acceptable("POST / HTTP/1.1\r\nContent-Length:  12 \r\n\r\n");
    assert_acceptable("POST / HTTP/1.1\r\ncontent-length: 3\r\nContent-Length: 3\r\n\r\n");
    assert_acceptable("POST / HTTP/1.1\r\nContent-Length: 9223372036854775807\r\n\r\n");
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\n", 413);
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413);
    assert_refused("POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400);
    assert_refused("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
    assert_refused("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", 400);
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", 400);
    assert_refused("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400);
    assert_refused("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\n", 400);
    assert_refused("POST / HTTP/1.1\nContent-Length: x\n\n", 400);
}

/* SPEC "One request model": every head, first or later, meets these. */
static void test_lower_case_methods_are_refused(void **state)
{
    assert_refused("post /upload HTTP/1.1\r\nHost: x\r\n\r\n", 400);
    assert_refused("Get / HTTP/1.1\r\n\r\n", 400);
    assert_acceptable("M-SEARCH * HTTP/1.1\r\n\r\n");
    assert_false(head_screen_method_ok("post", 4));
    assert_false(head_screen_method_ok("", 0));
    assert_true(head_screen_method_ok("PROPFIND", 8));
}

static void test_targets_with_controls_or_spaces_are_refused(void **state)
{
    assert_refused("GET /a\tb HTTP/1.1\r\n\r\n", 400);
    assert_false(head_screen_target_ok("/a\tb", 4));
    assert_false(head_screen_target_ok("/a b", 4));
    assert_false(head_screen_target_ok("/a\x7f", 3));
    assert_false(head_screen_target_ok("", 0));
    assert_true(head_screen_target_ok("/a?b=%20\x80", 9));
}

static void test_control_characters_in_values_are_refused(void **state)
{
    assert_refused("GET / HTTP/1.1\r\nX-A: a\x01b\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nX-A: a\x7f\r\n\r\n", 400);
    assert_acceptable("GET / HTTP/1.1\r\nX-A: a\tb \x80\xff\r\n\r\n");
}

static void test_a_second_host_is_refused(void **state)
{
    assert_refused("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400);
    assert_acceptable("GET / HTTP/1.1\r\nHost: a\r\nX-Host: b\r\n\r\n");
    assert_true(head_screen_single_field("HOST", 4));
    assert_false(head_screen_single_field("Hostx", 5));
}

static void test_only_the_first_head_is_looked_at(void **state)
{
    /* A body, or a second pipelined request, after the head is not the screen's concern. */
    assert_acceptable("POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\0\0\r\x16");
    assert_acceptable("GET / HTTP/1.1\r\n\r\nGARBAGE\r\n\r\n");
}

static void test_faults_say_what_libmicrohttpd_would_have_done(void **state)
{
    assert_int_equal(screen_str("GET / HTTP/1.1\r\nNoColon\r\n\r\n").fault, HEAD_FAULT_NO_COLON);
    assert_int_equal(screen_str("GET / HTTP/1.1\r\nX-A\x01: b\r\n\r\n").fault, HEAD_FAULT_SYNTAX);
    assert_int_equal(screen_str("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").fault, HEAD_FAULT_LENGTH);
    assert_int_equal(screen_str("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n").fault, HEAD_FAULT_SYNTAX);
    const char nul_name[] = "GET / HTTP/1.1\r\nX-\0A: b\r\n\r\n";
    assert_int_equal(head_screen(nul_name, sizeof(nul_name) - 1, MAX_HEAD_BYTES).fault, HEAD_FAULT_SYNTAX);
}

static void test_host_must_be_an_authority(void **state)
{
    assert_acceptable("GET / HTTP/1.1\r\nHost:  api.example.com:8443 \r\n\r\n");
    assert_acceptable("GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n");
    assert_refused("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nHost: evil@a\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\r\nHost:\r\n\r\n", 400);
    assert_refused("GET / HTTP/1.1\nhost: a:65536\n\n", 400);
}

/* libmicrohttpd keeps an entry of 64 bytes in its pool for each field, query argument and
 * cookie: past MAX_HEAD_ENTRY_BYTES of them it has no room (SPEC: a problem 431). */
static void test_entries_over_libmicrohttpds_pool_are_431(void **state)
{
    size_t most = MAX_HEAD_ENTRY_BYTES / HEAD_ENTRY_BYTES;
    char head[MAX_HEAD_BYTES];
    size_t n = (size_t)snprintf(head, sizeof(head), "GET / HTTP/1.1\r\n");
    for (size_t i = 0; i < most; i++)
        n += (size_t)snprintf(head + n, sizeof(head) - n, "X:1\r\n");
    memcpy(head + n, "\r\n", 2);
    assert_int_equal(head_screen(head, n + 2, MAX_HEAD_BYTES).outcome, HEAD_ACCEPTABLE);
    memcpy(head + n, "X:1\r\n\r\n", 7);
    struct head_screen hs = head_screen(head, n + 7, MAX_HEAD_BYTES);
    assert_int_equal(hs.status, 431);
    assert_int_equal(hs.fault, HEAD_FAULT_ENTRIES);
    /* refused once the head has ended: a head that is also too long is refused for that */
    assert_int_equal(head_screen(head, n + 5, MAX_HEAD_BYTES).outcome, HEAD_INCOMPLETE);
    hs = head_screen(head, n + 5, n);
    assert_int_equal(hs.status, 431);
    assert_int_equal(hs.fault, HEAD_FAULT_SIZE);

    n = (size_t)snprintf(head, sizeof(head), "GET /?");
    for (size_t i = 0; i < most; i++)
        n += (size_t)snprintf(head + n, sizeof(head) - n, "a&");
    n += (size_t)snprintf(head + n, sizeof(head) - n, " HTTP/1.1\r\n\r\n");
    assert_int_equal(head_screen(head, n, MAX_HEAD_BYTES).fault, HEAD_FAULT_ENTRIES);

    n = (size_t)snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nCookie: ");
    for (size_t i = 0; i < most; i++)
        n += (size_t)snprintf(head + n, sizeof(head) - n, "a=1; ");
    n += (size_t)snprintf(head + n, sizeof(head) - n, "\r\n\r\n");
    assert_int_equal(head_screen(head, n, MAX_HEAD_BYTES).fault, HEAD_FAULT_ENTRIES);

    assert_int_equal(head_screen_query_entry_bytes("/a", 2), 0);
    assert_int_equal(head_screen_query_entry_bytes("/a?", 3), 0);
    assert_int_equal(head_screen_query_entry_bytes("/a?b=1&c", 8), 2 * HEAD_ENTRY_BYTES);
}

static void test_field_lines_alone(void **state)
{
    const char fields[] = "Host: x\r\nX-A: b\r\n\r\nGET /next";
    struct head_screen hs = head_screen_fields(fields, sizeof(fields) - 1, MAX_HEAD_BYTES, 0);
    assert_int_equal(hs.outcome, HEAD_ACCEPTABLE);
    assert_int_equal(hs.head_len, strlen("Host: x\r\nX-A: b\r\n\r\n"));
    assert_null(hs.method);
    assert_int_equal(head_screen_fields("\n", 1, 10, 0).head_len, 1);
    assert_int_equal(head_screen_fields("X-A: b\r\n", 8, 64, 0).outcome, HEAD_INCOMPLETE);
    assert_int_equal(head_screen_fields("X-A: b\r\n", 8, 8, 0).status, 431);
    assert_int_equal(head_screen_fields(" X: b\r\n\r\n", 10, 64, 0).status, 400);
    assert_int_equal(head_screen_fields("\r\n", 2, 64, MAX_HEAD_ENTRY_BYTES + 1).fault, HEAD_FAULT_ENTRIES);
    assert_int_equal(head_screen_cookie_entry_bytes("a=1; b=2", 8), 2 * HEAD_ENTRY_BYTES + 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_get_is_acceptable_with_its_request_line),
        cmocka_unit_test(test_every_prefix_of_a_good_head_waits),
        cmocka_unit_test(test_leading_empty_lines_and_bare_lf_are_taken),
        cmocka_unit_test(test_head_over_the_limit),
        cmocka_unit_test(test_malformed_request_lines),
        cmocka_unit_test(test_refused_before_the_line_ends),
        cmocka_unit_test(test_versions_past_1_x_are_505_and_1_x_is_taken),
        cmocka_unit_test(test_malformed_field_lines),
        cmocka_unit_test(test_nul_anywhere_in_the_head_is_refused),
        cmocka_unit_test(test_content_length_values),
        cmocka_unit_test(test_only_the_first_head_is_looked_at),
        cmocka_unit_test(test_faults_say_what_libmicrohttpd_would_have_done),
        cmocka_unit_test(test_host_must_be_an_authority),
        cmocka_unit_test(test_entries_over_libmicrohttpds_pool_are_431),
        cmocka_unit_test(test_field_lines_alone),
        cmocka_unit_test(test_lower_case_methods_are_refused),
        cmocka_unit_test(test_targets_with_controls_or_spaces_are_refused),
        cmocka_unit_test(test_control_characters_in_values_are_refused),
        cmocka_unit_test(test_a_second_host_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
