/* A later head screened in libmicrohttpd's pool: pools laid out as libmicrohttpd 0.9.75
 * leaves them when its URI log callback runs (the request line parsed in place, its spaces
 * and line end NULs; the field lines as received; zeros after). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/later_head.h"

#define POOL 36864

static char pool[POOL];

/* Lays out a pool: `line` is the parsed request line with its NULs, `rest` what was
 * received after it; returns the target libmicrohttpd would hand over (at `uri_at`). */
static const char *lay_out(const char *line, size_t line_len, size_t uri_at, const char *rest, size_t rest_len)
{
    memset(pool, 0, sizeof(pool));
    memcpy(pool, line, line_len);
    memcpy(pool + line_len, rest, rest_len);
    return pool + uri_at;
}

#define LINE "GET\0/v?a=1\0HTTP/1.1\0\0" /* "GET /v?a=1 HTTP/1.1\r\n" */
#define LINE_LEN (sizeof(LINE) - 1)

static struct later_head screen(const char *rest, size_t rest_len)
{
    const char *uri = lay_out(LINE, LINE_LEN, 4, rest, rest_len);
    struct later_head lh;
    later_head_screen(pool, POOL, uri, &lh);
    return lh;
}

static void test_a_whole_good_head(void **state)
{
    const char rest[] = "Host: a\r\nX-A: b\r\n\r\nGET /next HTTP/1.1\r\n";
    struct later_head lh = screen(rest, sizeof(rest) - 1);
    assert_int_equal(lh.outcome, LATER_HEAD_ACCEPTABLE);
    assert_ptr_equal(lh.fields, pool + LINE_LEN);
    assert_ptr_equal(lh.end, pool + LINE_LEN + strlen("Host: a\r\nX-A: b\r\n\r\n"));
    assert_int_equal(lh.method_len, 3);
    assert_memory_equal(lh.method, "GET", 3);
    assert_false(lh.end_may_be_one_less);
    assert_true(later_head_parsed_alike(&lh, pool, (size_t)(lh.end - pool)));
    assert_false(later_head_parsed_alike(&lh, pool, (size_t)(lh.end - pool) + 1));
}

static void test_a_nul_with_bytes_after_it_is_refused(void **state)
{
    const char rest[] = "X-A: before\0after\r\n\r\n";
    struct later_head lh = screen(rest, sizeof(rest) - 1);
    assert_int_equal(lh.outcome, LATER_HEAD_REFUSED);
    assert_int_equal(lh.screen.status, 400);
    assert_string_equal(lh.screen.error_code, "malformed_request");
}

static void test_what_the_first_head_gets_refused_for(void **state)
{
    const char fold[] = "X-A: a\r\n b\r\n\r\n";
    assert_int_equal(screen(fold, sizeof(fold) - 1).screen.status, 400);
    const char empty_name[] = ": v\r\n\r\n";
    assert_int_equal(screen(empty_name, sizeof(empty_name) - 1).screen.status, 400);
    const char host[] = "Host: a b\r\n\r\n";
    assert_int_equal(screen(host, sizeof(host) - 1).screen.status, 400);
    const char no_colon[] = "NoColon\r\n\r\n";
    struct later_head lh = screen(no_colon, sizeof(no_colon) - 1);
    assert_int_equal(lh.screen.status, 400);
}

static void test_a_head_still_arriving_waits(void **state)
{
    const char rest[] = "Host: a\r\nX-A: b";
    struct later_head lh = screen(rest, sizeof(rest) - 1);
    assert_int_equal(lh.outcome, LATER_HEAD_INCOMPLETE);
    assert_int_equal(lh.received, sizeof(rest) - 1);
    assert_int_equal(lh.max_fields, MAX_HEAD_BYTES - LINE_LEN);
    /* the rest comes: the field lines are screened whole, the end is in the pool's terms */
    const char whole[] = "Host: a\r\nX-A: b\r\n\r\n";
    struct head_screen hs = head_screen_fields(whole, sizeof(whole) - 1, lh.max_fields, lh.entry_bytes);
    later_head_complete(&lh, &hs);
    assert_int_equal(lh.outcome, LATER_HEAD_ACCEPTABLE);
    assert_ptr_equal(lh.end, lh.fields + sizeof(whole) - 1);
    /* a NUL that ended the read is not seen by the screen, but libmicrohttpd's head is
       longer by it: not parsed alike */
    assert_false(later_head_parsed_alike(&lh, pool, (size_t)(lh.end - pool) + 1));
}

static void test_a_line_ended_by_lf_alone(void **state)
{
    const char line[] = "GET\0/v\0HTTP/1.1\0"; /* "GET /v HTTP/1.1\n" */
    const char rest[] = "Host: a\n\n";
    const char *uri = lay_out(line, sizeof(line) - 1, 4, rest, sizeof(rest) - 1);
    struct later_head lh;
    later_head_screen(pool, POOL, uri, &lh);
    assert_int_equal(lh.outcome, LATER_HEAD_ACCEPTABLE);
    assert_ptr_equal(lh.fields, pool + sizeof(line) - 1);
    assert_ptr_equal(lh.end, lh.fields + sizeof(rest) - 1);
}

static void test_nothing_after_two_nuls_may_start_a_byte_early(void **state)
{
    /* "...HTTP/1.1\r\n" and nothing yet, or "...HTTP/1.1\n" and a NUL or nothing yet */
    struct later_head lh = screen("", 0);
    assert_int_equal(lh.outcome, LATER_HEAD_INCOMPLETE);
    assert_true(lh.end_may_be_one_less);
    struct head_screen hs = head_screen_fields("\r\n", 2, lh.max_fields, lh.entry_bytes);
    later_head_complete(&lh, &hs);
    assert_true(later_head_parsed_alike(&lh, pool, (size_t)(lh.end - pool)));
    assert_true(later_head_parsed_alike(&lh, pool, (size_t)(lh.end - pool) - 1));
    assert_false(later_head_parsed_alike(&lh, pool, (size_t)(lh.end - pool) - 2));
}

static void test_a_nul_in_the_request_line_is_refused(void **state)
{
    const char target[] = "GET\0/a\0b\0HTTP/1.1\0\0"; /* libmicrohttpd's target ends at the NUL */
    const char *uri = lay_out(target, sizeof(target) - 1, 4, "\r\n", 2);
    struct later_head lh;
    later_head_screen(pool, POOL, uri, &lh);
    assert_int_equal(lh.screen.status, 400);
    const char method[] = "G\0T\0/v\0HTTP/1.1\0\0";
    uri = lay_out(method, sizeof(method) - 1, 4, "\r\n", 2);
    later_head_screen(pool, POOL, uri, &lh);
    assert_int_equal(lh.screen.status, 400);
}

static void test_empty_lines_before_the_request_line(void **state)
{
    const char line[] = "\0\0\0\0GET\0 /v\0HTTP/1.0\0\0";
    const char *uri = lay_out(line, sizeof(line) - 1, 9, "\r\n", 2);
    struct later_head lh;
    later_head_screen(pool, POOL, uri, &lh);
    assert_int_equal(lh.outcome, LATER_HEAD_ACCEPTABLE);
    assert_ptr_equal(lh.method, pool + 4);
    assert_int_equal(lh.method_len, 3);
}

static void test_too_many_query_arguments(void **state)
{
    static char line[MAX_HEAD_BYTES];
    size_t n = 0;
    memcpy(line, "GET\0/?", 6);
    n = 6;
    for (size_t i = 0; i <= MAX_HEAD_ENTRY_BYTES / HEAD_ENTRY_BYTES; i++) {
        memcpy(line + n, "a&", 2);
        n += 2;
    }
    memcpy(line + n, "\0HTTP/1.1\0\0", 11);
    n += 11;
    const char *uri = lay_out(line, n, 4, "\r\n", 2);
    struct later_head lh;
    later_head_screen(pool, POOL, uri, &lh);
    assert_int_equal(lh.screen.status, 431);
    later_head_drop_query(&lh);
    assert_string_equal(uri, "/?"); /* libmicrohttpd finds no argument after its '?' */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_whole_good_head),
        cmocka_unit_test(test_a_nul_with_bytes_after_it_is_refused),
        cmocka_unit_test(test_what_the_first_head_gets_refused_for),
        cmocka_unit_test(test_a_head_still_arriving_waits),
        cmocka_unit_test(test_a_line_ended_by_lf_alone),
        cmocka_unit_test(test_nothing_after_two_nuls_may_start_a_byte_early),
        cmocka_unit_test(test_a_nul_in_the_request_line_is_refused),
        cmocka_unit_test(test_empty_lines_before_the_request_line),
        cmocka_unit_test(test_too_many_query_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
