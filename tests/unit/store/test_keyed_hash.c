/* Unit tests for store/keyed_hash.c: SipHash as its reference defines it (known answers,
 * and OpenSSL's SIPHASH MAC for every length up to 64 bytes, 2-4 and 1-3), and a key that is
 * drawn per process: two runs of this program place the same client addresses in
 * different buckets, of a hash table and of the denial cache alike. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "store/denial_cache.h"
#include "store/keyed_hash.h"
#include "store/limit.h"

#define BUCKETS 64
#define ADDRESSES 16

/* The reference's key: the bytes 00..0f. */
static struct hash_key reference_key(void)
{
    unsigned char bytes[16];
    for (int i = 0; i < 16; i++)
        bytes[i] = (unsigned char)i;
    struct hash_key key;
    memcpy(&key.k0, bytes, 8);
    memcpy(&key.k1, bytes + 8, 8);
    key.k0 = le64toh(key.k0);
    key.k1 = le64toh(key.k1);
    return key;
}

static void test_known_answers_of_siphash_2_4(void **state)
{
    (void)state;
    struct hash_key key = reference_key();
    unsigned char msg[16];
    for (int i = 0; i < 16; i++)
        msg[i] = (unsigned char)i;
    /* the reference's vectors.h (the first two) and the paper's appendix (15 bytes) */
    assert_true(siphash(&key, 2, 4, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(siphash(&key, 2, 4, msg, 1) == 0x74f839c593dc67fdULL);
    assert_true(siphash(&key, 2, 4, msg, 15) == 0xa129ca6149be45e5ULL);
}

/* OpenSSL's SIPHASH MAC of msg with c-d rounds, 8 bytes of output read little-endian. */
static uint64_t openssl_siphash(const unsigned char key[16], unsigned c, unsigned d, const unsigned char *msg,
                                size_t len)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
    assert_non_null(mac);
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    assert_non_null(ctx);
    size_t size = 8;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
        OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_C_ROUNDS, &c),
        OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_D_ROUNDS, &d),
        OSSL_PARAM_construct_end(),
    };
    assert_int_equal(EVP_MAC_init(ctx, key, 16, params), 1);
    assert_int_equal(EVP_MAC_update(ctx, msg, len), 1);
    unsigned char out[8];
    size_t outlen = 0;
    assert_int_equal(EVP_MAC_final(ctx, out, &outlen, sizeof(out)), 1);
    assert_int_equal(outlen, 8);
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    uint64_t h;
    memcpy(&h, out, 8);
    return le64toh(h);
}

static void test_agrees_with_openssl_for_every_length(void **state)
{
    (void)state;
    unsigned char key_bytes[16], msg[64];
    for (int i = 0; i < 16; i++)
        key_bytes[i] = (unsigned char)(0xa5 ^ (i * 29));
    for (int i = 0; i < 64; i++)
        msg[i] = (unsigned char)(i * 7 + 3);
    struct hash_key key;
    memcpy(&key.k0, key_bytes, 8);
    memcpy(&key.k1, key_bytes + 8, 8);
    key.k0 = le64toh(key.k0);
    key.k1 = le64toh(key.k1);
    for (size_t len = 0; len <= sizeof(msg); len++) {
        assert_true(siphash(&key, 2, 4, msg, len) == openssl_siphash(key_bytes, 2, 4, msg, len));
        assert_true(siphash(&key, 1, 3, msg, len) == openssl_siphash(key_bytes, 1, 3, msg, len));
    }
}

static void test_hash_keyed_is_siphash_1_3_under_the_process_key(void **state)
{
    (void)state;
    struct hash_key key = hash_process_key();
    assert_true(key.k0 != 0 || key.k1 != 0);
    const char *s = "203.0.113.7";
    assert_true(hash_keyed(s, strlen(s)) == siphash(&key, 1, 3, s, strlen(s)));
}

/* The bucket of each of ADDRESSES client addresses under key. */
static void placement(const struct hash_key *key, unsigned out[ADDRESSES])
{
    for (int i = 0; i < ADDRESSES; i++) {
        char addr[32];
        int n = snprintf(addr, sizeof(addr), "a:198.51.100.%d", i);
        out[i] = (unsigned)(siphash(key, 1, 3, addr, (size_t)n) % BUCKETS);
    }
}

static void test_two_seeds_place_the_same_keys_differently(void **state)
{
    (void)state;
    struct hash_key one = { 1, 2 }, two = { 3, 4 };
    unsigned a[ADDRESSES], b[ADDRESSES];
    placement(&one, a);
    placement(&two, b);
    assert_memory_not_equal(a, b, sizeof(a));
}

/* This program run with --placement: prints three lines: the process key; per address its
 * bucket in a table hashed with hash_keyed; per address its bucket of the denial cache. */
static int print_placement(void)
{
    struct hash_key key = hash_process_key();
    printf("%016llx%016llx\n", (unsigned long long)key.k0, (unsigned long long)key.k1);
    struct limit_rule rule = { .id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 10, .window_ms = 60000 };
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < ADDRESSES; i++) {
            char addr[32];
            int n = snprintf(addr, sizeof(addr), "a:198.51.100.%d", i);
            uint64_t h = pass == 0 ? hash_keyed(addr, (size_t)n) : denial_cache_key(addr, (size_t)n, &rule, 1);
            printf(" %u", (unsigned)(h % BUCKETS));
        }
        printf("\n");
    }
    return 0;
}

struct placement_lines {
    char key[64], table[512], denials[512];
};

static void run_child(struct placement_lines *out)
{
    char self[4096], command[4200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(command, sizeof(command), "'%s' --placement", self);
    FILE *f = popen(command, "r");
    assert_non_null(f);
    assert_non_null(fgets(out->key, sizeof(out->key), f));
    assert_non_null(fgets(out->table, sizeof(out->table), f));
    assert_non_null(fgets(out->denials, sizeof(out->denials), f));
    assert_int_equal(pclose(f), 0);
}

static void test_each_process_draws_its_own_key(void **state)
{
    (void)state;
    struct placement_lines first, second;
    run_child(&first);
    run_child(&second);
    assert_int_equal(strlen(first.key), 33);
    assert_string_not_equal(first.key, "00000000000000000000000000000000\n");
    assert_string_not_equal(first.key, second.key);
    /* the same client addresses land elsewhere in each process */
    assert_string_not_equal(first.table, second.table);
    assert_string_not_equal(first.denials, second.denials);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--placement") == 0)
        return print_placement();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers_of_siphash_2_4),
        cmocka_unit_test(test_agrees_with_openssl_for_every_length),
        cmocka_unit_test(test_hash_keyed_is_siphash_1_3_under_the_process_key),
        cmocka_unit_test(test_two_seeds_place_the_same_keys_differently),
        cmocka_unit_test(test_each_process_draws_its_own_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
