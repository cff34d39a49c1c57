/* What an upstream's 101 must carry (RFC 6455 4.1) before it is relayed to the client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/ws_101.h"

/* RFC 6455 1.3's example */
#define KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static void field(struct ws_101 *seen, const struct ws_101_expect *e, const char *name, const char *value)
{
    ws_101_field(seen, e, name, strlen(name), value, strlen(value));
}

static void test_the_accept_of_the_rfc_example(void **state)
{
    struct ws_101_expect e;
    ws_101_expect_key(&e, KEY, strlen(KEY));
    assert_true(e.has_key);
    assert_string_equal(e.accept, ACCEPT);
    struct gate_header h[] = {
        { .name = "Upgrade", .name_len = 7, .value = "websocket", .value_len = 9 },
        { .name = "sec-websocket-key", .name_len = 17, .value = KEY " ", .value_len = strlen(KEY) + 1 },
    };
    ws_101_expect_from(&e, h, 2);
    assert_string_equal(e.accept, ACCEPT);
    ws_101_expect_from(&e, h, 1);
    assert_false(e.has_key);
}

static void test_a_101_needs_upgrade_websocket_and_the_accept(void **state)
{
    struct ws_101_expect e;
    ws_101_expect_key(&e, KEY, strlen(KEY));
    struct ws_101 good = { 0 }, none = { 0 }, h2c = { 0 }, wrong = { 0 }, twice = { 0 }, no_accept = { 0 };
    field(&good, &e, "upgrade", "WebSocket");
    field(&good, &e, "Sec-WebSocket-Accept", ACCEPT);
    assert_true(ws_101_valid(&good));
    field(&none, &e, "Sec-WebSocket-Accept", ACCEPT);
    assert_false(ws_101_valid(&none));
    field(&h2c, &e, "Upgrade", "h2c");
    field(&h2c, &e, "Sec-WebSocket-Accept", ACCEPT);
    assert_false(ws_101_valid(&h2c));
    field(&wrong, &e, "Upgrade", "websocket");
    field(&wrong, &e, "Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOp=");
    assert_false(ws_101_valid(&wrong));
    field(&twice, &e, "Upgrade", "websocket");
    field(&twice, &e, "Sec-WebSocket-Accept", ACCEPT);
    field(&twice, &e, "Sec-WebSocket-Accept", ACCEPT);
    assert_false(ws_101_valid(&twice));
    field(&no_accept, &e, "Upgrade", "websocket");
    assert_false(ws_101_valid(&no_accept));
    /* no key from the client: no accept can be right */
    struct ws_101_expect keyless;
    ws_101_expect_key(&keyless, NULL, 0);
    struct ws_101 any = { 0 };
    field(&any, &keyless, "Upgrade", "websocket");
    field(&any, &keyless, "Sec-WebSocket-Accept", ACCEPT);
    assert_false(ws_101_valid(&any));
}

static void test_permessage_deflate_is_noticed(void **state)
{
    struct ws_101_expect e;
    ws_101_expect_key(&e, KEY, strlen(KEY));
    struct ws_101 seen = { 0 };
    field(&seen, &e, "Sec-WebSocket-Extensions", "x-foo, permessage-deflate; client_max_window_bits");
    assert_true(seen.per_message_deflate);
    struct ws_101 other = { 0 };
    field(&other, &e, "Sec-WebSocket-Extensions", "permessage-deflatex");
    assert_false(other.per_message_deflate);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_accept_of_the_rfc_example),
        cmocka_unit_test(test_a_101_needs_upgrade_websocket_and_the_accept),
        cmocka_unit_test(test_permessage_deflate_is_noticed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
