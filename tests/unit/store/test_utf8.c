/* UTF-8 validity as RFC 3629 states it, and the repair that keeps a string's length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store/catalog/utf8.h"

static bool valid(const char *s)
{
    return utf8_valid(s, strlen(s));
}

static void test_valid_and_invalid_sequences(void **state)
{
    (void)state;
    assert_true(valid(""));
    assert_true(valid("laptop"));
    assert_true(valid("caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\x91"));       /* é ✓ 🔑 */
    assert_true(valid("\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf"));      /* the ends of 2 and 3 bytes */
    assert_true(valid("\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf"));      /* around the surrogates; U+10FFFF */
    assert_false(valid("\xff"));
    assert_false(valid("caf\xe9"));                                      /* Latin-1 */
    assert_false(valid("\x80"));                                         /* a continuation alone */
    assert_false(valid("\xc3"));                                         /* cut short */
    assert_false(valid("\xe2\x9c"));
    assert_false(valid("\xc0\xaf"));                                     /* overlong '/' */
    assert_false(valid("\xc1\xbf"));
    assert_false(valid("\xe0\x9f\xbf"));                                 /* overlong 3 bytes */
    assert_false(valid("\xf0\x8f\xbf\xbf"));                             /* overlong 4 bytes */
    assert_false(valid("\xed\xa0\x80"));                                 /* U+D800 */
    assert_false(valid("\xed\xbf\xbf"));                                 /* U+DFFF */
    assert_false(valid("\xf4\x90\x80\x80"));                             /* U+110000 */
    assert_false(valid("\xf5\x80\x80\x80"));
    assert_false(valid("\xe2\x28\xa1"));                                 /* a bad second byte */
    /* the length given is what counts: a sequence cut by it is invalid */
    assert_false(utf8_valid("\xc3\xa9", 1));
    assert_true(utf8_valid("\xc3\xa9xyz", 2));
}

static void test_repair_replaces_each_bad_byte_and_keeps_the_rest(void **state)
{
    (void)state;
    char s[] = "lap\xfftop \xc3\xa9\xe9 \xed\xa0\x80 \xe2\x9c\x93";
    size_t n = strlen(s);
    assert_int_equal(utf8_repair(s, n), 5);
    assert_string_equal(s, "lap?top \xc3\xa9? ??? \xe2\x9c\x93");
    assert_int_equal(strlen(s), n);
    assert_true(valid(s));
    char ok[] = "caf\xc3\xa9";
    assert_int_equal(utf8_repair(ok, strlen(ok)), 0);
    assert_string_equal(ok, "caf\xc3\xa9");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_and_invalid_sequences),
        cmocka_unit_test(test_repair_replaces_each_bad_byte_and_keeps_the_rest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
