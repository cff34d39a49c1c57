/* Unit tests for proxy/transfer_coding.c: chunked last or 400, other codings before it 501,
 * and only the spelling libmicrohttpd decodes passes as chunked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/transfer_coding.h"

/* The verdict on the fields given (NULL-terminated), in an HTTP/1.1 request unless
 * http_1_0. */
static enum transfer_coding_verdict verdict_of(bool http_1_0, const char *first, ...)
{
    struct transfer_coding tc = { 0 };
    va_list ap;
    va_start(ap, first);
    for (const char *v = first; v != NULL; v = va_arg(ap, const char *))
        transfer_coding_add(&tc, v, strlen(v));
    va_end(ap);
    return transfer_coding_verdict(&tc, http_1_0);
}

#define V11(...) verdict_of(false, __VA_ARGS__, (const char *)NULL)

static void test_none_and_chunked(void **state)
{
    (void)state;
    struct transfer_coding none = { 0 };
    assert_int_equal(transfer_coding_verdict(&none, false), TRANSFER_CODING_NONE);
    assert_int_equal(transfer_coding_verdict(&none, true), TRANSFER_CODING_NONE);
    assert_int_equal(V11("chunked"), TRANSFER_CODING_CHUNKED);
    assert_int_equal(V11("Chunked"), TRANSFER_CODING_CHUNKED);
    assert_int_equal(V11("CHUNKED"), TRANSFER_CODING_CHUNKED);
}

static void test_chunked_not_last_is_bad_framing(void **state)
{
    (void)state;
    const char *bad[] = { "chunked, gzip", "gzip", "identity", "chunked, chunked", "", ",", " , ,",
                          "chunked;x=1", "chunked x", "chun ked", "@", "gzip,", };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(V11(bad[i]), TRANSFER_CODING_BAD_FRAMING);
    }
    assert_int_equal(V11("chunked", "chunked"), TRANSFER_CODING_BAD_FRAMING);
    assert_int_equal(V11("chunked", "gzip"), TRANSFER_CODING_BAD_FRAMING);
}

static void test_other_codings_before_chunked_are_unsupported(void **state)
{
    (void)state;
    assert_int_equal(V11("gzip, chunked"), TRANSFER_CODING_UNSUPPORTED);
    assert_int_equal(V11("gzip;level=1 , deflate,chunked"), TRANSFER_CODING_UNSUPPORTED);
    assert_int_equal(V11("gzip", "chunked"), TRANSFER_CODING_UNSUPPORTED);
}

static void test_chunked_spelled_so_libmicrohttpd_would_not_decode_it(void **state)
{
    (void)state;
    /* RFC 9110 reads these as chunked; libmicrohttpd would read the body to the close */
    assert_int_equal(V11(", chunked"), TRANSFER_CODING_BAD_FRAMING);
    assert_int_equal(V11("chunked,"), TRANSFER_CODING_BAD_FRAMING);
    assert_int_equal(V11("chunked "), TRANSFER_CODING_BAD_FRAMING);
    assert_int_equal(V11("", "chunked"), TRANSFER_CODING_BAD_FRAMING);
}

static void test_any_coding_in_http_1_0_is_bad_framing(void **state)
{
    (void)state;
    assert_int_equal(verdict_of(true, "chunked", (const char *)NULL), TRANSFER_CODING_BAD_FRAMING);
    assert_int_equal(verdict_of(true, "gzip, chunked", (const char *)NULL), TRANSFER_CODING_BAD_FRAMING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_and_chunked),
        cmocka_unit_test(test_chunked_not_last_is_bad_framing),
        cmocka_unit_test(test_other_codings_before_chunked_are_unsupported),
        cmocka_unit_test(test_chunked_spelled_so_libmicrohttpd_would_not_decode_it),
        cmocka_unit_test(test_any_coding_in_http_1_0_is_bad_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
