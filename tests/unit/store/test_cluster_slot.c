/* Unit tests for store/redis/cluster_slot.c. The expected slots are CLUSTER KEYSLOT answers of
 * redis-server 7.0.15 (written down from redis-cli on a cluster-enabled node). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/redis/cluster_slot.h"

static unsigned slot_of(const char *key)
{
    return cluster_key_slot(key, strlen(key));
}

static void test_crc16_is_xmodem(void **state)
{
    (void)state;
    assert_int_equal(cluster_crc16("123456789", 9), 0x31C3);   /* the CRC catalogue's check value */
    assert_int_equal(cluster_crc16("", 0), 0);
}

static void test_slots_of_whole_keys(void **state)
{
    (void)state;
    assert_int_equal(slot_of(""), 0);
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("123456789"), 12739);
    assert_int_equal(slot_of("user1000"), 3443);
    assert_int_equal(slot_of("u:42"), 8980);
}

static void test_hash_tag_rule(void **state)
{
    (void)state;
    /* the first {...} that is not empty decides */
    assert_int_equal(slot_of("{user1000}.following"), 3443);
    assert_int_equal(slot_of("{user1000}.followers"), 3443);
    assert_int_equal(slot_of("foo{bar}{zap}"), 5061);
    /* our keys: "<prefix>{<subject>}:<rule id>" all land on the subject's slot */
    assert_int_equal(slot_of("tp:{u:42}:7"), 8980);
    assert_int_equal(slot_of("tp:{ip:10.0.0.1}:3"), 8862);
    /* an empty tag, an unclosed '{', a '}' before the '{' : the tag rule as Redis has it */
    assert_int_equal(slot_of("foo{}{bar}"), 8363);
    assert_int_equal(slot_of("{}"), 15257);
    assert_int_equal(slot_of("{"), 4092);
    assert_int_equal(slot_of("a{b"), 13340);
    assert_int_equal(slot_of("foo{{bar}}zap"), 4015);
    assert_int_equal(slot_of("}{a}"), 15495);
}

static void test_binary_keys_use_their_length(void **state)
{
    (void)state;
    /* a NUL inside the key counts; the length, not strlen, bounds the tag search */
    const char k[] = {'a', '\0', 'b'};
    assert_int_not_equal(cluster_key_slot(k, 3), cluster_key_slot(k, 1));
    assert_int_equal(cluster_key_slot("{ab}cd", 3), cluster_key_slot("{ab", 3));
}

/* The slot of a limiter key as built, without building it: the same as cluster_key_slot of
 * the whole key, for every kind of prefix and subject, the awkward ones included. */
static void test_limiter_key_slot_is_the_built_keys(void **state)
{
    (void)state;
    assert_int_equal(cluster_limiter_key_slot("tp:", 3, "u:42", 4, 7), 8980);
    assert_int_equal(cluster_limiter_key_slot("tp:", 3, "ip:10.0.0.1", 11, 3), 8862);
    static const char *prefixes[] = {"", "tp:", "tierproxy:", "a}b:", "x{y}:", "{"};
    static const char *subjects[] = {"u:42", "}", "}u", "a}b", "{", "{}", "u:{x}", "u:a\0b"};
    static const int64_t rules[] = {0, 7, -3, 123456789012LL};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(*prefixes); i++)
        for (size_t j = 0; j < sizeof(subjects) / sizeof(*subjects); j++)
            for (size_t k = 0; k < sizeof(rules) / sizeof(*rules); k++) {
                char key[128];
                size_t sl = strlen(subjects[j]) + (j == 7 ? 2 : 0);   /* "u:a\0b": a NUL inside */
                size_t pl = strlen(prefixes[i]);
                memcpy(key, prefixes[i], pl);
                size_t kl = pl;
                key[kl++] = '{';
                memcpy(key + kl, subjects[j], sl);
                kl += sl;
                kl += (size_t)snprintf(key + kl, sizeof(key) - kl, "}:%lld", (long long)rules[k]);
                unsigned want = cluster_key_slot(key, kl);
                unsigned got = cluster_limiter_key_slot(prefixes[i], pl, subjects[j], sl, rules[k]);
                if (got != want)
                    fail_msg("prefix \"%s\" subject #%zu rule %lld: %u, the key's slot is %u", prefixes[i], j,
                             (long long)rules[k], got, want);
            }
    /* a subject starting with '}' leaves an empty tag: the whole key (rule id included) counts */
    assert_int_not_equal(cluster_limiter_key_slot("tp:", 3, "}u", 2, 1), cluster_limiter_key_slot("tp:", 3, "}u", 2, 2));
}

static int parse(const char *text, struct cluster_redirect *out)
{
    return cluster_redirect_parse(text, strlen(text), out);
}

static void test_moved_and_ask(void **state)
{
    (void)state;
    struct cluster_redirect r;
    assert_int_equal(parse("MOVED 3999 127.0.0.1:6381", &r), 0);
    assert_int_equal(r.kind, CLUSTER_REDIRECT_MOVED);
    assert_int_equal(r.slot, 3999);
    assert_string_equal(r.host, "127.0.0.1");
    assert_int_equal(r.port, 6381);

    assert_int_equal(parse("ASK 16383 redis-2.internal:7002", &r), 0);
    assert_int_equal(r.kind, CLUSTER_REDIRECT_ASK);
    assert_int_equal(r.slot, 16383);
    assert_string_equal(r.host, "redis-2.internal");
    assert_int_equal(r.port, 7002);

    /* IPv6 without brackets: the port follows the last ':' */
    assert_int_equal(parse("MOVED 0 ::1:7000", &r), 0);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 7000);

    /* an unknown endpoint (Redis 7): the host of the connection that answered */
    assert_int_equal(parse("MOVED 12 :7001", &r), 0);
    assert_string_equal(r.host, "");
    assert_int_equal(r.port, 7001);

    /* the text is bounded by len, not by a NUL */
    assert_int_equal(cluster_redirect_parse("MOVED 5 10.0.0.1:7000 trailing", 21, &r), 0);
    assert_string_equal(r.host, "10.0.0.1");
    assert_int_equal(r.port, 7000);
}

static void test_other_errors_are_not_redirects(void **state)
{
    (void)state;
    struct cluster_redirect r = {.port = -7};
    assert_int_equal(parse("NOSCRIPT No matching script. Please use EVAL.", &r), 1);
    assert_int_equal(parse("ERR unknown command", &r), 1);
    assert_int_equal(parse("CLUSTERDOWN The cluster is down", &r), 1);
    assert_int_equal(parse("TRYAGAIN Multiple keys request during rehashing of slot", &r), 1);
    assert_int_equal(parse("MOVEDX 1 h:1", &r), 1);
    assert_int_equal(parse("", &r), 1);
    assert_int_equal(r.port, -7);   /* untouched */
}

static void test_malformed_redirects(void **state)
{
    (void)state;
    struct cluster_redirect r;
    assert_int_equal(parse("MOVED", &r), 1);                    /* no space: not one of ours */
    assert_int_equal(parse("MOVED 3999", &r), -EINVAL);
    assert_int_equal(parse("MOVED 16384 127.0.0.1:6381", &r), -EINVAL);
    assert_int_equal(parse("MOVED -1 127.0.0.1:6381", &r), -EINVAL);
    assert_int_equal(parse("MOVED 1x 127.0.0.1:6381", &r), -EINVAL);
    assert_int_equal(parse("MOVED 99999999999999999999 127.0.0.1:6381", &r), -EINVAL);
    assert_int_equal(parse("MOVED 1 127.0.0.1", &r), -EINVAL);
    assert_int_equal(parse("MOVED 1 127.0.0.1:", &r), -EINVAL);
    assert_int_equal(parse("MOVED 1 127.0.0.1:0", &r), -EINVAL);
    assert_int_equal(parse("MOVED 1 127.0.0.1:65536", &r), -EINVAL);
    assert_int_equal(parse("MOVED 1 127.0.0.1:63a", &r), -EINVAL);
    assert_int_equal(parse("ASK  127.0.0.1:6381", &r), -EINVAL);
    assert_int_equal(parse("ASK 1 a b:7000", &r), -EINVAL);
    char long_host[400] = "MOVED 1 ";
    memset(long_host + 8, 'h', 300);
    memcpy(long_host + 308, ":7000", 6);
    assert_int_equal(parse(long_host, &r), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_is_xmodem),
        cmocka_unit_test(test_slots_of_whole_keys),
        cmocka_unit_test(test_hash_tag_rule),
        cmocka_unit_test(test_binary_keys_use_their_length),
        cmocka_unit_test(test_limiter_key_slot_is_the_built_keys),
        cmocka_unit_test(test_moved_and_ask),
        cmocka_unit_test(test_other_errors_are_not_redirects),
        cmocka_unit_test(test_malformed_redirects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
