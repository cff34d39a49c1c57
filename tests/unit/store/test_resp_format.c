/* resp_format against hiredis' own formatter, byte for byte, and resp_write_int against
 * snprintf. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "store/redis/resp_format.h"

static void assert_as_hiredis(int argc, const char **argv, const size_t *lens)
{
    char *want = NULL;
    int want_len = redisFormatCommandArgv(&want, argc, argv, lens);
    assert_true(want_len > 0);
    size_t total = 0;
    for (int i = 0; i < argc; i++)
        total += lens[i];
    size_t bound = resp_format_bound(argc, total);
    char *got = malloc(bound + 1);
    assert_non_null(got);
    memset(got, 'X', bound + 1); /* nothing is written past the bound */
    size_t got_len = resp_format(got, argc, argv, lens);
    assert_true(got_len < bound);
    assert_int_equal(got[bound], 'X');
    /* a NUL after the command, as hiredis' own sds has: redisAsyncFormattedCommand reads the
       byte after the first argument, past the end of a one-argument command */
    assert_int_equal(got[got_len], '\0');
    assert_int_equal(got_len, (size_t)want_len);
    assert_memory_equal(got, want, got_len);
    free(got);
    free(want);
}

static void test_a_check_call(void **state)
{
    (void)state;
    static const char rules[] = "\x01\0\0\0\0\0\x0a\r\n\0";
    const char *argv[] = {"EVALSHA", "0123456789abcdef0123456789abcdef01234567", "1", "tp:{u:alice}:3",
                          "1764480000123", rules};
    const size_t lens[] = {7, 40, 1, 14, 13, sizeof(rules) - 1};
    assert_as_hiredis(6, argv, lens);
}

static void test_empty_and_long_arguments(void **state)
{
    (void)state;
    static char big[100000];
    memset(big, 'z', sizeof(big));
    const char *argv[] = {"SET", "", big};
    const size_t lens[] = {3, 0, sizeof(big)};
    assert_as_hiredis(3, argv, lens);
    const char *one[] = {"ASKING"};
    const size_t one_len[] = {6};
    assert_as_hiredis(1, one, one_len);
}

static void test_many_arguments(void **state)
{
    (void)state;
    const char *argv[120];
    size_t lens[120];
    for (int i = 0; i < 120; i++) {
        argv[i] = "abcdefghij" + i % 10;
        lens[i] = (size_t)(10 - i % 10);
    }
    assert_as_hiredis(120, argv, lens);
}

static void test_write_int(void **state)
{
    (void)state;
    const int64_t values[] = {0, 7, -1, 10, 999, 1764480000123, INT64_MAX, INT64_MIN, -42};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        char want[32], got[RESP_INT_MAX + 1];
        int want_len = snprintf(want, sizeof(want), "%lld", (long long)values[i]);
        size_t got_len = resp_write_int(got, values[i]);
        assert_int_equal(got_len, (size_t)want_len);
        assert_memory_equal(got, want, got_len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_check_call),
        cmocka_unit_test(test_empty_and_long_arguments),
        cmocka_unit_test(test_many_arguments),
        cmocka_unit_test(test_write_int),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
