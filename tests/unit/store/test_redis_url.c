/* Unit tests for store/redis/redis_url.c. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/redis/redis_url.h"

static struct redis_url parse_ok(const char *text)
{
    struct redis_url u;
    char err[128];
    int r = redis_url_parse(text, &u, err, sizeof(err));
    if (r != 0)
        fail_msg("\"%s\" was rejected: %s", text, err);
    return u;
}

static void test_tcp(void **state)
{
    struct redis_url u = parse_ok("redis://127.0.0.1:6379/0");
    assert_false(u.is_unix);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    assert_false(u.has_password);

    u = parse_ok("redis://cache.internal:7000/3");
    assert_string_equal(u.host, "cache.internal");
    assert_int_equal(u.port, 7000);
    assert_int_equal(u.db, 3);

    /* defaults: port 6379, db 0 */
    u = parse_ok("redis://localhost");
    assert_string_equal(u.host, "localhost");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 0);
    u = parse_ok("redis://localhost/");
    assert_int_equal(u.db, 0);
    u = parse_ok("REDIS://h:1/2");
    assert_int_equal(u.port, 1);
    assert_int_equal(u.db, 2);

    u = parse_ok("redis://[::1]:6380/1");
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 6380);
    assert_int_equal(u.db, 1);
}

static void test_password(void **state)
{
    struct redis_url u = parse_ok("redis://:s3cret@10.0.0.1:6379/2");
    assert_true(u.has_password);
    assert_string_equal(u.password, "s3cret");
    assert_string_equal(u.username, "");
    assert_string_equal(u.host, "10.0.0.1");
    assert_int_equal(u.db, 2);

    u = parse_ok("redis://proxy:pa%40ss%3Aword@h:1/0");   /* ACL user, escaped @ and : */
    assert_string_equal(u.username, "proxy");
    assert_string_equal(u.password, "pa@ss:word");
    assert_string_equal(u.host, "h");

    u = parse_ok("redis://onlypass@h");
    assert_true(u.has_password);
    assert_string_equal(u.password, "onlypass");

    u = parse_ok("redis://:a@b@h:2");   /* the last @ ends the user info */
    assert_string_equal(u.password, "a@b");
    assert_string_equal(u.host, "h");
}

static void test_tls(void **state)
{
    struct redis_url u = parse_ok("redis://127.0.0.1:6379/0");
    assert_false(u.tls);
    u = parse_ok("rediss://proxy:s3cret@cache.internal/2");
    assert_true(u.tls);
    assert_false(u.is_unix);
    assert_string_equal(u.host, "cache.internal");
    assert_int_equal(u.port, 6379);
    assert_int_equal(u.db, 2);
    assert_string_equal(u.username, "proxy");
    assert_string_equal(u.password, "s3cret");
    u = parse_ok("REDISS://[::1]:6380");
    assert_true(u.tls);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 6380);
}

static void test_unix(void **state)
{
    struct redis_url u = parse_ok("unix:///run/redis/redis.sock");
    assert_true(u.is_unix);
    assert_string_equal(u.path, "/run/redis/redis.sock");
    assert_int_equal(u.db, 0);
    assert_false(u.has_password);

    u = parse_ok("unix:///tmp/r.sock?db=4");
    assert_string_equal(u.path, "/tmp/r.sock");
    assert_int_equal(u.db, 4);

    u = parse_ok("unix://:pw@/tmp/r.sock");
    assert_true(u.has_password);
    assert_string_equal(u.password, "pw");
    assert_string_equal(u.path, "/tmp/r.sock");
}

static void test_rejects(void **state)
{
    const char *bad[] = {
        "", "localhost:6379", "http://h:1/0", "redis://", "redis://:6379", "redis://h:0", "redis://h:65536",
        "redis://h:-1", "redis://h:12ab", "redis://h:", "redis://h/x", "redis://h/-1", "redis://h/1/2",
        "redis://h?db=1", "redis://[::1", "redis://:@h", "redis://:p%zz@h", "redis://:p%0a@h", "redis://h h",
        "unix://", "unix://relative.sock", "unix:///", "unix:///s?x=1", "unix:///s?db=x",
        "unix://pw/tmp/s", "rediss://", "rediss:///tmp/s", "rediss://h:0", "redisss://h",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct redis_url u;
        char err[128] = "";
        if (redis_url_parse(bad[i], &u, err, sizeof(err)) != -EINVAL)
            fail_msg("\"%s\" was accepted", bad[i]);
        assert_true(err[0] != '\0');
    }
    char long_path[300] = "unix:///";
    memset(long_path + 8, 'a', 200);
    long_path[208] = '\0';
    struct redis_url u;
    assert_int_equal(redis_url_parse(long_path, &u, NULL, 0), -EINVAL);
    assert_int_equal(redis_url_parse(NULL, &u, NULL, 0), -EINVAL);
}

static void test_error_hides_password(void **state)
{
    struct redis_url u;
    char err[256];
    assert_int_equal(redis_url_parse("redis://:topsecret@h:99999/0", &u, err, sizeof(err)), -EINVAL);
    assert_null(strstr(err, "topsecret"));
    assert_false(u.has_password);
    assert_null(strstr(u.password, "topsecret"));
}

/* ---- the seed list of a Redis Cluster */

static int seeds_of(const char *text, struct redis_url *seeds, size_t max, char *err, size_t errlen)
{
    return redis_seed_list_parse(text, seeds, max, err, errlen);
}

static void test_seed_list(void **state)
{
    (void)state;
    struct redis_url seeds[REDIS_SEEDS_MAX];
    char err[256] = "";
    int n = seeds_of("redis://127.0.0.1:7000/0,redis://:pw%2Cwith%2Ccomma@node-b:7001,redis://[::1]:7002",
                     seeds, REDIS_SEEDS_MAX, err, sizeof(err));
    if (n != 3)
        fail_msg("got %d: %s", n, err);
    assert_string_equal(seeds[0].host, "127.0.0.1");
    assert_int_equal(seeds[0].port, 7000);
    assert_string_equal(seeds[1].host, "node-b");
    assert_int_equal(seeds[1].port, 7001);
    assert_true(seeds[1].has_password);
    assert_string_equal(seeds[1].password, "pw,with,comma");
    assert_string_equal(seeds[2].host, "::1");
    assert_int_equal(seeds[2].port, 7002);

    n = seeds_of("rediss://a:7000,rediss://:pw@b:7001", seeds, REDIS_SEEDS_MAX, err, sizeof(err));
    assert_int_equal(n, 2);
    assert_true(seeds[0].tls && seeds[1].tls);

    /* one seed is a list too; the default port applies */
    assert_int_equal(seeds_of("redis://solo", seeds, REDIS_SEEDS_MAX, err, sizeof(err)), 1);
    assert_int_equal(seeds[0].port, 6379);
}

static void expect_seeds_rejected(const char *text, size_t max, const char *says)
{
    struct redis_url seeds[REDIS_SEEDS_MAX];
    memset(seeds, 0, sizeof(seeds));     /* the password check below reads every entry */
    char err[256] = "";
    int n = seeds_of(text, seeds, max, err, sizeof(err));
    if (n != -EINVAL)
        fail_msg("\"%s\" gave %d, not -EINVAL", text, n);
    if (strstr(err, says) == NULL)
        fail_msg("\"%s\": reason \"%s\" does not say \"%s\"", text, err, says);
    assert_null(strstr(err, "s3cret"));
    /* no password is left behind in the seeds parsed before the bad one */
    for (size_t i = 0; i < max && i < REDIS_SEEDS_MAX; i++)
        assert_null(strstr(seeds[i].password, "s3cret"));
}

static void test_seed_list_rejects(void **state)
{
    (void)state;
    expect_seeds_rejected("", 8, "seed 1 of 1 is empty");
    expect_seeds_rejected("redis://:s3cret@h:7000,", 8, "seed 2 of 2 is empty");
    expect_seeds_rejected("redis://:s3cret@h:7000,,redis://h:7001", 8, "seed 2 of 3 is empty");
    expect_seeds_rejected(",redis://h:7000", 8, "seed 1 of 2 is empty");
    expect_seeds_rejected("redis://:s3cret@h:7000,unix:///tmp/r.sock", 8, "seed 2 of 2: a cluster node is reached over TCP");
    expect_seeds_rejected("redis://:s3cret@h:7000,redis://h:7001/2", 8, "seed 2 of 2: Redis Cluster serves database 0 only");
    expect_seeds_rejected("redis://:s3cret@h:7000/1", 8, "seed 1 of 1: Redis Cluster serves database 0 only");
    expect_seeds_rejected("redis://:s3cret@h:7000,redis://h:99999", 8, "seed 2 of 2: bad port");
    expect_seeds_rejected("redis://:s3cret@h:7000,http://h:7001", 8, "seed 2 of 2: redis URL must start");
    expect_seeds_rejected("redis://h:1,redis://h:2,redis://h:3", 2, "3 seed URLs, at most 2");
    /* the nodes the cluster names are reached as the seeds are: one scheme for all */
    expect_seeds_rejected("rediss://:s3cret@h:7000,redis://h:7001", 8,
                          "seed 2 of 2: redis:// after rediss:// in seed 1");
    expect_seeds_rejected("redis://h:7000,rediss://:s3cret@h:7001", 8, "seed 2 of 2: rediss:// after redis://");
    /* a cap, whatever the caller's array: REDIS_SEEDS_MAX */
    char many[REDIS_SEEDS_MAX * 16 + 64] = "";
    size_t off = 0;
    for (int i = 0; i <= REDIS_SEEDS_MAX; i++)
        off += (size_t)snprintf(many + off, sizeof(many) - off, "%sredis://h:%d", i ? "," : "", 7000 + i);
    expect_seeds_rejected(many, 1000, "65 seed URLs, at most 64");
    char long_seed[1200] = "redis://";
    memset(long_seed + 8, 'h', 1100);
    expect_seeds_rejected(long_seed, 8, "seed 1 of 1 is longer than");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_password),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_unix),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_error_hides_password),
        cmocka_unit_test(test_seed_list),
        cmocka_unit_test(test_seed_list_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
