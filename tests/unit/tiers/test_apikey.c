/* API keys: the text form, randomness, and the SHA-256 the catalog stores. */
#include "helpers.h"

#include <ctype.h>

static void test_generate_format(void **state)
{
    (void)state;
    char a[APIKEY_TEXT_LEN + 1], b[APIKEY_TEXT_LEN + 1];
    assert_int_equal(apikey_generate(a), 0);
    assert_int_equal(apikey_generate(b), 0);
    /* "tp_" + 48 lower-case hex digits = 192 random bits. */
    assert_int_equal(strlen(a), 51);
    assert_memory_equal(a, "tp_", 3);
    for (size_t i = 3; i < strlen(a); i++)
        assert_true(isdigit((unsigned char)a[i]) || (a[i] >= 'a' && a[i] <= 'f'));
    /* Two keys never collide (2^-192). */
    assert_string_not_equal(a, b);
}

static void test_generate_is_random(void **state)
{
    (void)state;
    /* Every hex position takes many values over a few hundred keys: no stuck digits. */
    int seen[48][16] = {{0}};
    for (int k = 0; k < 400; k++) {
        char key[APIKEY_TEXT_LEN + 1];
        assert_int_equal(apikey_generate(key), 0);
        for (int i = 0; i < 48; i++) {
            char c = key[3 + i];
            seen[i][c <= '9' ? c - '0' : c - 'a' + 10]++;
        }
    }
    for (int i = 0; i < 48; i++) {
        int distinct = 0;
        for (int d = 0; d < 16; d++)
            distinct += seen[i][d] > 0;
        assert_true(distinct >= 12);
    }
}

static void test_hash_known_vector(void **state)
{
    (void)state;
    uint8_t h[APIKEY_HASH_LEN];
    char hex[APIKEY_HASH_HEX_LEN + 1];
    /* FIPS 180-2 example: SHA-256("abc"). */
    assert_int_equal(apikey_hash("abc", 3, h), 0);
    assert_string_equal(apikey_hash_to_hex(h, hex),
                        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(apikey_hash("", 0, h), 0);
    assert_string_equal(apikey_hash_to_hex(h, hex),
                        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_hash_distinguishes_length(void **state)
{
    (void)state;
    /* The length is part of the input: a key and its prefix hash differently. */
    uint8_t a[APIKEY_HASH_LEN], b[APIKEY_HASH_LEN];
    assert_int_equal(apikey_hash("tp_abc", 6, a), 0);
    assert_int_equal(apikey_hash("tp_abc", 5, b), 0);
    assert_memory_not_equal(a, b, APIKEY_HASH_LEN);
}

static void test_hex_round_trip(void **state)
{
    (void)state;
    uint8_t h[APIKEY_HASH_LEN], back[APIKEY_HASH_LEN];
    char hex[APIKEY_HASH_HEX_LEN + 1];
    assert_int_equal(apikey_hash("tp_x", 4, h), 0);
    assert_int_equal(apikey_hash_from_hex(apikey_hash_to_hex(h, hex), back), 0);
    assert_memory_equal(h, back, APIKEY_HASH_LEN);
    /* Upper case is accepted; wrong length or non-hex is not. */
    for (char *p = hex; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    assert_int_equal(apikey_hash_from_hex(hex, back), 0);
    assert_memory_equal(h, back, APIKEY_HASH_LEN);
    hex[10] = 'g';
    assert_int_not_equal(apikey_hash_from_hex(hex, back), 0);
    assert_int_not_equal(apikey_hash_from_hex("abcd", back), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_format),
        cmocka_unit_test(test_generate_is_random),
        cmocka_unit_test(test_hash_known_vector),
        cmocka_unit_test(test_hash_distinguishes_length),
        cmocka_unit_test(test_hex_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
