/* Unit tests for tiers/request_target.c: every rule of the request target as it is matched
 * and forwarded (SPEC "One request model"), and the prefix comparison of path_case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "tiers/request_target.h"

struct parsed {
    int rc;
    struct request_target t;
    char *buf;
};

static struct parsed parse_m(const char *method, const char *raw)
{
    struct parsed p = { 0 };
    size_t len = strlen(raw);
    size_t size = request_target_buffer_size(len);
    p.buf = malloc(size); /* exactly the size asked for, so ASan sees any overrun */
    assert_non_null(p.buf);
    p.rc = request_target_parse(method, raw, len, p.buf, size, &p.t);
    return p;
}

/* raw is accepted; the upstream receives forward, and match is what is compared. */
static void check(const char *method, const char *raw, const char *forward, const char *match)
{
    struct parsed p = parse_m(method, raw);
    if (p.rc != 0)
        fail_msg("%s refused", raw);
    assert_string_equal(p.t.forward, forward);
    assert_int_equal(p.t.forward_len, strlen(forward));
    const char *q = strchr(forward, '?');
    assert_int_equal(p.t.path_len, q != NULL && !p.t.asterisk ? (size_t)(q - forward) : strlen(forward));
    assert_string_equal(p.t.match, match);
    assert_int_equal(p.t.match_len, strlen(match));
    free(p.buf);
}

static void refused(const char *method, const char *raw)
{
    struct parsed p = parse_m(method, raw);
    if (p.rc != -1)
        fail_msg("%s accepted as %s", raw, p.t.forward);
    assert_null(p.t.forward);
    free(p.buf);
}

static void test_origin_form_unchanged(void **state)
{
    (void)state;
    check("GET", "/", "/", "/");
    check("GET", "/a/b", "/a/b", "/a/b");
    check("GET", "/a/b/", "/a/b/", "/a/b/");
    check("GET", "/a?x=1&y", "/a?x=1&y", "/a");
    check("GET", "/?", "/?", "/");
    check("GET", "/x;p=1/z", "/x;p=1/z", "/x;p=1/z");
    check("GET", "/caf%C3%A9", "/caf%C3%A9", "/caf%C3%A9");
}

static void test_repeated_slashes_merge(void **state)
{
    (void)state;
    check("GET", "//admin", "/admin", "/admin");
    check("GET", "/a//b///c", "/a/b/c", "/a/b/c");
    check("GET", "/a//", "/a/", "/a/");
    check("GET", "///", "/", "/");
}

static void test_dot_segments_removed(void **state)
{
    (void)state;
    check("GET", "/public/../admin", "/admin", "/admin");
    check("GET", "/a/./b", "/a/b", "/a/b");
    check("GET", "/a/b/.", "/a/b/", "/a/b/");
    check("GET", "/a/b/..", "/a/", "/a/");
    check("GET", "/a/b/../", "/a/", "/a/");
    check("GET", "/..", "/", "/");
    check("GET", "/../../x", "/x", "/x");
    check("GET", "/a/../../b", "/b", "/b");
    check("GET", "/a//../b", "/b", "/b"); /* slashes merge first, as Envoy's merge_slashes */
    check("GET", "/...", "/...", "/...");
    check("GET", "/a..b/.c", "/a..b/.c", "/a..b/.c");
}

static void test_encoded_dots_are_dots(void **state)
{
    (void)state;
    check("GET", "/%2e%2E/%2e%2e/etc/passwd", "/etc/passwd", "/etc/passwd");
    check("GET", "/a/.%2E/b", "/b", "/b");
    check("GET", "/a/%2E./b", "/b", "/b");
    check("GET", "/a/%2e/b", "/a/b", "/a/b");
    /* not a dot segment: kept, with its encoding */
    check("GET", "/a%2Eb", "/a%2Eb", "/a.b");
    check("GET", "/%2e%2e%2e", "/%2e%2e%2e", "/...");
}

static void test_other_encodings_forwarded_as_sent(void **state)
{
    (void)state;
    /* unreserved ones are decoded only for matching */
    check("GET", "/%75pload", "/%75pload", "/upload");
    check("GET", "/%7e%7E/%41%5f%2D", "/%7e%7E/%41%5f%2D", "/~~/A_-");
    /* reserved and non-ASCII ones, never */
    check("GET", "/a%20b/%3F%23%25", "/a%20b/%3F%23%25", "/a%20b/%3F%23%25");
    check("GET", "/%C0%AF%c0%ae", "/%C0%AF%c0%ae", "/%C0%AF%c0%ae");
    /* invalid ones pass as text */
    check("GET", "/trailing%", "/trailing%", "/trailing%");
    check("GET", "/a%2", "/a%2", "/a%2");
    check("GET", "/odd%zz%/x", "/odd%zz%/x", "/odd%zz%/x");
    check("GET", "/%u002e/x", "/%u002e/x", "/%u002e/x");
}

static void test_query_untouched(void **state)
{
    (void)state;
    check("GET", "/a/../b?x=/../y//z", "/b?x=/../y//z", "/b");
    check("GET", "/q?v=%00%2F%5C\\", "/q?v=%00%2F%5C\\", "/q");
    check("GET", "/q??a", "/q??a", "/q");
    check("GET", "//?//", "/?//", "/");
}

static void test_bad_paths_refused(void **state)
{
    (void)state;
    refused("GET", "/a%00b");
    refused("GET", "/public%00/../admin");
    refused("GET", "/a%2Fb");
    refused("GET", "/a%2fb");
    refused("GET", "/a%5Cb");
    refused("GET", "/a%5cb");
    refused("GET", "/a\\b");
    refused("GET", "/a/b%2F..%2F");
    refused("GET", "/a#frag");
    refused("GET", "/a?q#frag");
    refused("GET", "/a b");
    refused("GET", "/a\tb");
    refused("GET", "/a\x7f");
    refused("GET", "/a\x01");
    refused("GET", "http://h/a%2F");
    /* anywhere, the query too */
    refused("GET", "/a?q b");
    refused("GET", "/a?q\x01");
}

static void test_absolute_form(void **state)
{
    (void)state;
    struct parsed p = parse_m("GET", "http://api.example/expensive?q=1");
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.t.forward, "/expensive?q=1");
    assert_string_equal(p.t.match, "/expensive");
    assert_int_equal(p.t.authority_len, strlen("api.example"));
    assert_memory_equal(p.t.authority, "api.example", p.t.authority_len);
    free(p.buf);

    p = parse_m("GET", "HTTPS://[::1]:8443");
    assert_int_equal(p.rc, 0);
    assert_string_equal(p.t.forward, "/");
    assert_int_equal(p.t.authority_len, strlen("[::1]:8443"));
    assert_memory_equal(p.t.authority, "[::1]:8443", p.t.authority_len);
    free(p.buf);

    check("GET", "http://h?x=1", "/?x=1", "/");
    check("GET", "http://h/a/../b//c", "/b/c", "/b/c");
    check("GET", "http://h:80/", "/", "/");

    /* origin-form has no authority */
    p = parse_m("GET", "/x");
    assert_null(p.t.authority);
    assert_int_equal(p.t.authority_len, 0);
    free(p.buf);
}

static void test_other_forms_refused(void **state)
{
    (void)state;
    refused("GET", "ftp://h/x");
    refused("GET", "http:///x");
    refused("GET", "http://");
    refused("GET", "http://u:p@h/x");
    refused("GET", "http://h\r\nX: y/x");
    refused("GET", "http://h x/");
    refused("GET", "http://h\"/");
    refused("CONNECT", "api.example:443");
    refused("GET", "x/y");
    refused("GET", "");
    refused("GET", "http:/h/x");
}

static void test_asterisk_form(void **state)
{
    (void)state;
    struct parsed p = parse_m("OPTIONS", "*");
    assert_int_equal(p.rc, 0);
    assert_true(p.t.asterisk);
    assert_string_equal(p.t.forward, "*");
    assert_string_equal(p.t.match, "*");
    free(p.buf);
    refused("GET", "*");
    refused(NULL, "*");
    refused("OPTIONS", "**");
    refused("OPTIONS", "*?x");
}

static void test_small_buffer_refused(void **state)
{
    (void)state;
    struct request_target t;
    char buf[8];
    assert_int_equal(request_target_parse("GET", "/abc", 4, buf, request_target_buffer_size(4) - 1, &t), -1);
    assert_int_equal(request_target_parse("GET", NULL, 0, buf, sizeof(buf), &t), -1);
}

static void test_not_nul_terminated(void **state)
{
    (void)state;
    /* the raw target is taken by length: the bytes after it do not count */
    const char raw[] = "/a/../b?x#";
    struct request_target t;
    char buf[64];
    assert_int_equal(request_target_parse("GET", raw, strlen(raw) - 1, buf, sizeof(buf), &t), 0);
    assert_string_equal(t.forward, "/b?x");
}

static void test_prefix(void **state)
{
    (void)state;
    assert_true(request_target_has_prefix("/upload/x", 9, "/upload", 7, false));
    assert_true(request_target_has_prefix("/uploadx", 8, "/upload", 7, false)); /* a byte prefix, as today */
    assert_false(request_target_has_prefix("/UPLOAD", 7, "/upload", 7, false));
    assert_true(request_target_has_prefix("/UPLOAD", 7, "/upload", 7, true));
    assert_true(request_target_has_prefix("/upload", 7, "/UpLoad", 7, true));
    assert_false(request_target_has_prefix("/up", 3, "/upload", 7, true));
    assert_false(request_target_has_prefix("/\xc3\xa9", 3, "/\xc3\x89", 3, true)); /* ASCII only */
    assert_true(request_target_has_prefix("/x", 2, "", 0, false));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_origin_form_unchanged),
        cmocka_unit_test(test_repeated_slashes_merge),
        cmocka_unit_test(test_dot_segments_removed),
        cmocka_unit_test(test_encoded_dots_are_dots),
        cmocka_unit_test(test_other_encodings_forwarded_as_sent),
        cmocka_unit_test(test_query_untouched),
        cmocka_unit_test(test_bad_paths_refused),
        cmocka_unit_test(test_absolute_form),
        cmocka_unit_test(test_other_forms_refused),
        cmocka_unit_test(test_asterisk_form),
        cmocka_unit_test(test_small_buffer_refused),
        cmocka_unit_test(test_not_nul_terminated),
        cmocka_unit_test(test_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
