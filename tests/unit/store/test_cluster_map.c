/* Unit tests for store/cluster/cluster_map.c. Replies are RESP text read by hiredis' own reader,
 * so the map sees the redisReply tree a node's answer becomes; the first is the
 * CLUSTER SLOTS answer of the e2e fixture's cluster (redis 7.0.15, 3 masters + 3 replicas). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "store/cluster/cluster_map.h"

static const char FIXTURE_SLOTS[] =
    "*3\r\n*4\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:29583\r\n$40\r\nb3207b57da59a0cb0959cf44bc7d786cb648b020\r\n*0\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:27352\r\n$40\r\n96bccbc5e74bdebe51cf2689adfdfcd3c3ece0b7\r\n*0\r\n"
    "*4\r\n:5461\r\n:10922\r\n*4\r\n$9\r\n127.0.0.1\r\n:10073\r\n$40\r\nf961d527971b8b8251e1a3d6e14bb0e320d0edfc\r\n*0\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:23097\r\n$40\r\nad8bcaa1f2c9c8131be46b606b1da42c97c26e15\r\n*0\r\n"
    "*4\r\n:10923\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:16725\r\n$40\r\nebca9107295355f3c18256a46082f4f96765bf75\r\n*0\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:22159\r\n$40\r\n8fc8e463d646edd08b27206d886939addd678df4\r\n*0\r\n";

/* The redisReply hiredis makes of resp's len bytes (one whole reply); freed with
 * freeReplyObject. */
static redisReply *reply_of_bytes(const char *resp, size_t len)
{
    redisReader *reader = redisReaderCreate();
    assert_non_null(reader);
    assert_int_equal(redisReaderFeed(reader, resp, len), REDIS_OK);
    void *reply = NULL;
    assert_int_equal(redisReaderGetReply(reader, &reply), REDIS_OK);
    assert_non_null(reply);
    redisReaderFree(reader);
    return reply;
}

static redisReply *reply_of(const char *resp)
{
    return reply_of_bytes(resp, strlen(resp));
}

static struct cluster_map *map_of(const char *resp, const char *answering_host, char *err, size_t errlen)
{
    redisReply *r = reply_of(resp);
    struct cluster_map *map = cluster_map_from_reply(r, answering_host, err, errlen);
    freeReplyObject(r);     /* the map keeps nothing of the reply */
    return map;
}

static void expect_master(const struct cluster_map *map, unsigned slot, const char *host, int port)
{
    int i = cluster_map_master_of_slot(map, slot);
    assert_true(i >= 0);
    const struct cluster_master *m = cluster_map_master(map, (size_t)i);
    assert_non_null(m);
    assert_string_equal(m->host, host);
    assert_int_equal(m->port, port);
}

static void test_the_fixture_cluster(void **state)
{
    (void)state;
    char err[160] = "";
    struct cluster_map *map = map_of(FIXTURE_SLOTS, "127.0.0.1", err, sizeof(err));
    assert_non_null(map);
    assert_int_equal(cluster_map_master_count(map), 3);   /* replicas are not masters */
    assert_int_equal(cluster_map_uncovered_slots(map), 0);
    expect_master(map, 0, "127.0.0.1", 29583);
    expect_master(map, 5460, "127.0.0.1", 29583);
    expect_master(map, 5461, "127.0.0.1", 10073);
    expect_master(map, 8980, "127.0.0.1", 10073);   /* "tp:{u:42}:7" */
    expect_master(map, 10922, "127.0.0.1", 10073);
    expect_master(map, 10923, "127.0.0.1", 16725);
    expect_master(map, 16383, "127.0.0.1", 16725);
    assert_int_equal(cluster_map_master_of_slot(map, 16384), -1);
    assert_int_equal(cluster_map_find_master(map, "127.0.0.1", 10073), 1);
    assert_int_equal(cluster_map_find_master(map, "127.0.0.1", 27352), -1);   /* a replica */
    assert_int_equal(cluster_map_find_master(map, "127.0.0.2", 10073), -1);
    assert_null(cluster_map_master(map, 3));
    cluster_map_destroy(map);
}

static void test_one_master_many_ranges_and_gaps(void **state)
{
    (void)state;
    /* after a reshard a master serves several ranges; during one some slots may be unserved */
    char err[160] = "";
    struct cluster_map *map = map_of("*3\r\n"
                                     "*3\r\n:0\r\n:99\r\n*2\r\n$2\r\nh1\r\n:7000\r\n"
                                     "*3\r\n:200\r\n:200\r\n*2\r\n$2\r\nh2\r\n:7001\r\n"
                                     "*3\r\n:300\r\n:16383\r\n*2\r\n$2\r\nh1\r\n:7000\r\n",
                                     "seed", err, sizeof(err));
    assert_non_null(map);
    assert_int_equal(cluster_map_master_count(map), 2);
    expect_master(map, 99, "h1", 7000);
    assert_int_equal(cluster_map_master_of_slot(map, 100), -1);
    assert_int_equal(cluster_map_master_of_slot(map, 199), -1);
    expect_master(map, 200, "h2", 7001);
    assert_int_equal(cluster_map_master_of_slot(map, 201), -1);
    expect_master(map, 300, "h1", 7000);
    assert_int_equal(cluster_map_uncovered_slots(map), 100 + 99);
    cluster_map_destroy(map);
}

static void test_unknown_endpoint_is_the_answering_host(void **state)
{
    (void)state;
    char err[160] = "";
    struct cluster_map *map = map_of("*2\r\n"
                                     "*3\r\n:0\r\n:8191\r\n*2\r\n$0\r\n\r\n:7000\r\n"
                                     "*3\r\n:8192\r\n:16383\r\n*2\r\n$1\r\n?\r\n:7001\r\n",
                                     "10.1.2.3", err, sizeof(err));
    assert_non_null(map);
    expect_master(map, 0, "10.1.2.3", 7000);
    expect_master(map, 16383, "10.1.2.3", 7001);
    cluster_map_destroy(map);
}

static void test_an_empty_cluster(void **state)
{
    (void)state;
    char err[160] = "";
    struct cluster_map *map = map_of("*0\r\n", "seed", err, sizeof(err));
    assert_non_null(map);
    assert_int_equal(cluster_map_master_count(map), 0);
    assert_int_equal(cluster_map_uncovered_slots(map), 16384);
    cluster_map_destroy(map);
}

static void expect_rejected(const char *resp, const char *reason_part)
{
    char err[160] = "";
    struct cluster_map *map = map_of(resp, "seed", err, sizeof(err));
    if (map != NULL)
        fail_msg("accepted: %s", resp);
    if (strstr(err, reason_part) == NULL)
        fail_msg("reason \"%s\" does not say \"%s\"", err, reason_part);
}

static void test_bad_replies(void **state)
{
    (void)state;
    expect_rejected("-ERR This instance has cluster support disabled\r\n", "array");
    expect_rejected("$2\r\nok\r\n", "array");
    expect_rejected("*1\r\n:5\r\n", "entry 0");
    expect_rejected("*1\r\n*2\r\n:0\r\n:5\r\n", "entry 0");
    expect_rejected("*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:7000\r\n", "slot range");
    expect_rejected("*1\r\n*3\r\n:-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n", "slot range");
    expect_rejected("*1\r\n*3\r\n:9\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n", "slot range");
    expect_rejected("*1\r\n*3\r\n$1\r\n0\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n", "slot range");
    expect_rejected("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:0\r\n", "master host and port");
    expect_rejected("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:65536\r\n", "master host and port");
    expect_rejected("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n:1\r\n:7000\r\n", "master host and port");
    expect_rejected("*1\r\n*3\r\n:0\r\n:5\r\n*1\r\n$1\r\nh\r\n", "master host and port");
    expect_rejected("*1\r\n*3\r\n:0\r\n:5\r\n$1\r\nh\r\n", "master host and port");
    expect_rejected("*2\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:7000\r\n"
                    "*3\r\n:5\r\n:9\r\n*2\r\n$1\r\ni\r\n:7000\r\n", "slot 5 twice");

    /* a host with a NUL in it */
    static const char nul_host[] = "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$3\r\na\0b\r\n:7000\r\n";
    redisReply *r = reply_of_bytes(nul_host, sizeof(nul_host) - 1);
    char err[160] = "";
    assert_null(cluster_map_from_reply(r, "seed", err, sizeof(err)));
    assert_non_null(strstr(err, "not text"));
    freeReplyObject(r);
    assert_null(cluster_map_from_reply(NULL, "seed", err, sizeof(err)));
}

static void test_host_too_long(void **state)
{
    (void)state;
    char resp[600];
    char host[CLUSTER_HOST_MAX + 1];
    memset(host, 'h', sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    snprintf(resp, sizeof(resp), "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$%zu\r\n%s\r\n:7000\r\n", strlen(host), host);
    expect_rejected(resp, "too long");
    host[CLUSTER_HOST_MAX - 1] = '\0';     /* the longest that fits */
    snprintf(resp, sizeof(resp), "*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$%zu\r\n%s\r\n:7000\r\n", strlen(host), host);
    char err[160] = "";
    struct cluster_map *map = map_of(resp, "seed", err, sizeof(err));
    assert_non_null(map);
    expect_master(map, 5, host, 7000);
    cluster_map_destroy(map);
}

static void test_master_cap(void **state)
{
    (void)state;
    /* one master per slot range of one slot, one more than the cap */
    size_t n = CLUSTER_MAP_MAX_MASTERS + 1, cap = 64 + n * 64;
    char *resp = test_malloc(cap);
    size_t off = (size_t)snprintf(resp, cap, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(resp + off, cap - off, "*3\r\n:%zu\r\n:%zu\r\n*2\r\n$1\r\nh\r\n:%zu\r\n", i, i, 1000 + i);
    expect_rejected(resp, "more than 1024 masters");
    test_free(resp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_fixture_cluster),
        cmocka_unit_test(test_one_master_many_ranges_and_gaps),
        cmocka_unit_test(test_unknown_endpoint_is_the_answering_host),
        cmocka_unit_test(test_an_empty_cluster),
        cmocka_unit_test(test_bad_replies),
        cmocka_unit_test(test_host_too_long),
        cmocka_unit_test(test_master_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
