/* Where a browser puts its key (ws_auth.h): the key_query parameter taken out of targets
 * however it is spelled, the subprotocols the upstream never sees, one key wherever it
 * comes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/ws_auth.h"

static char *strip(const char *target)
{
    static char out[512];
    return ws_auth_query_strip(target, "api_key", out);
}

static void test_the_parameter_leaves_the_logged_path(void **state)
{
    assert_string_equal(strip("/ws?api_key=K"), "/ws");
    assert_string_equal(strip("/ws?a=1&api_key=K&b=2"), "/ws?a=1&b=2");
    assert_string_equal(strip("/ws?api_key=K&api_key=J&b"), "/ws?b");
    assert_string_equal(strip("/ws?api%5Fkey=K&b"), "/ws?b");
    assert_string_equal(strip("/ws?api%5fkey=K"), "/ws");
    assert_string_equal(strip("/ws?api_key"), "/ws");
    assert_string_equal(strip("/ws?api+key=K&api_keys=J&xapi_key=L"), "/ws?api+key=K&api_keys=J&xapi_key=L");
    assert_string_equal(strip("/ws?a=1&&b=%zz"), "/ws?a=1&&b=%zz");
    assert_string_equal(strip("/ws"), "/ws");
    assert_string_equal(strip("/ws?"), "/ws");
    assert_string_equal(strip("/a?b?api_key=K"), "/a?b?api_key=K"); /* one parameter "b?api_key" */
    char out[16];
    assert_string_equal(ws_auth_query_strip("/ws?api_key=K", NULL, out), "/ws?api_key=K");
}

/* Parses target and takes the parameter out of it. */
static void take(const char *target, struct request_target *t, char *buf, size_t buflen, struct ws_auth_key *key)
{
    assert_int_equal(request_target_parse("GET", target, strlen(target), buf, buflen, t), 0);
    ws_auth_query_take(t, "api_key", key);
    assert_int_equal(strlen(t->forward), t->forward_len);
}

static void test_the_key_is_read_decoded_and_taken_out(void **state)
{
    struct request_target t;
    struct ws_auth_key k;
    char buf[1024];
    take("/x/../ws?room=7&api%5Fkey=tp%5Fab+c&z", &t, buf, sizeof(buf), &k);
    assert_string_equal(t.forward, "/ws?room=7&z");
    assert_int_equal(t.path_len, 3);
    assert_int_equal(k.found, 1);
    assert_false(k.conflict);
    assert_int_equal(k.len, 7);
    assert_memory_equal(k.key, "tp_ab c", 7);
    take("/ws?api_key=K", &t, buf, sizeof(buf), &k);
    assert_string_equal(t.forward, "/ws");
    assert_int_equal(k.len, 1);
    take("/ws?api_key=&api_key=K&api_key=%4B", &t, buf, sizeof(buf), &k);
    assert_int_equal(k.found, 3);
    assert_false(k.conflict);
    take("/ws?api_key=K&api_key=J", &t, buf, sizeof(buf), &k);
    assert_true(k.conflict);
    take("/ws?api_key=", &t, buf, sizeof(buf), &k);
    assert_int_equal(k.found, 1);
    assert_null(k.key);
    take("/ws?other=1", &t, buf, sizeof(buf), &k);
    assert_int_equal(k.found, 0);
    assert_string_equal(t.forward, "/ws?other=1");
    char target[WS_AUTH_KEY_MAX + 32];
    snprintf(target, sizeof(target), "/ws?api_key=%0*d", WS_AUTH_KEY_MAX + 1, 0);
    take(target, &t, buf, sizeof(buf), &k);
    assert_true(k.conflict); /* too long to be a key */
    assert_string_equal(t.forward, "/ws");
}

#define H(n, v) { .name = n, .name_len = sizeof(n) - 1, .value = v, .value_len = sizeof(v) - 1 }

static void test_the_subprotocol_key_and_marker(void **state)
{
    struct gate_header h[] = { H("Sec-WebSocket-Protocol", " , chat,\tTIERPROXY.KEY.tp_1 ,"),
                               H("Host", "x"), H("sec-websocket-protocol", "TierProxy,tierproxy.key.tp_1") };
    struct ws_auth_key k;
    ws_auth_protocol_key(h, 3, &k);
    assert_int_equal(k.found, 2);
    assert_false(k.conflict);
    assert_int_equal(k.len, 4);
    assert_memory_equal(k.key, "tp_1", 4);
    const char *spelling;
    size_t len;
    assert_true(ws_auth_offered_marker(h, 3, &spelling, &len));
    assert_int_equal(len, 9);
    assert_memory_equal(spelling, "TierProxy", 9);
    assert_false(ws_auth_offered_marker(h, 2, &spelling, &len));
    struct gate_header empty[] = { H("Sec-WebSocket-Protocol", "tierproxy.key.") };
    ws_auth_protocol_key(empty, 1, &k);
    assert_int_equal(k.found, 1);
    assert_null(k.key);
    struct gate_header two[] = { H("Sec-WebSocket-Protocol", "tierproxy.key.a, tierproxy.key.b") };
    ws_auth_protocol_key(two, 1, &k);
    assert_true(k.conflict);
}

static void test_one_key_wherever_it_comes(void **state)
{
    struct gate_header h[] = { H("Sec-WebSocket-Protocol", "tierproxy.key.tp_1") };
    struct { const struct gate_header *headers; size_t n_headers; bool websocket; } req = { h, 1, true };
    struct ws_auth_key q = { 0 };
    const char *key;
    size_t len;
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, NULL, 0, NULL, &key, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(key, "tp_1", 4);
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, "tp_1", 4, &q, &key, &len), 0);
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, "tp_2", 4, &q, &key, &len), 1);
    q.found = 1;
    q.key = "tp_2";
    q.len = 4;
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, NULL, 0, &q, &key, &len), 1);
    req.websocket = false; /* a subprotocol is no key outside a handshake */
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, NULL, 0, &q, &key, &len), 0);
    assert_memory_equal(key, "tp_2", 4);
    q.conflict = true;
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, NULL, 0, &q, &key, &len), 1);
    req.n_headers = 0;
    q = (struct ws_auth_key){ 0 };
    assert_int_equal(ws_auth_presented_key(req.headers, req.n_headers, req.websocket, NULL, 0, &q, &key, &len), 0);
    assert_null(key);
}

struct sink_log {
    char lines[8][128];
    int n;
};

static int log_emit(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len)
{
    struct sink_log *log = ctx;
    snprintf(log->lines[log->n++], 128, "%.*s: %.*s", (int)name_len, name, (int)value_len, value);
    return 0;
}

static void *log_alloc(void *ctx, size_t n)
{
    static char pool[4096];
    static size_t used;
    (void)ctx;
    if (used + n > sizeof(pool))
        used = 0;
    used += n;
    return pool + used - n;
}

/* What the upstream gets for each field of h, in order. */
static void emit_all(const struct gate_header *h, size_t n, struct sink_log *log)
{
    struct gate_header_sink sink = { .emit = log_emit, .alloc = log_alloc, .ctx = log };
    memset(log, 0, sizeof(*log));
    for (size_t i = 0; i < n; i++) {
        int rc = ws_auth_emit_field(h, n, i, "api_key", &sink);
        assert_true(rc >= 0);
        if (rc == 0)
            log_emit(log, h[i].name, h[i].name_len, h[i].value, h[i].value_len);
    }
}

static void test_the_upstream_never_sees_the_proxys_subprotocols(void **state)
{
    struct sink_log log;
    struct gate_header mixed[] = { H("Sec-WebSocket-Protocol", ",tierproxy,  chat ,tierproxy.key.tp_1,,"),
                                   H("Host", "x"), H("Sec-WebSocket-Protocol", "a,b,c,d,e") };
    emit_all(mixed, 3, &log);
    assert_int_equal(log.n, 2);
    assert_string_equal(log.lines[0], "Sec-WebSocket-Protocol: chat, a, b, c, d, e");
    assert_string_equal(log.lines[1], "Host: x");
    struct gate_header ours[] = { H("Sec-WebSocket-Protocol", "tierproxy"), H("Sec-WebSocket-Protocol", "tierproxy.key.") };
    emit_all(ours, 2, &log);
    assert_int_equal(log.n, 0);
    struct gate_header referer[] = { H("referer", "http://h/page?a=1&api_key=K#x"), H("Referer", "http://h/p") };
    emit_all(referer, 2, &log);
    assert_int_equal(log.n, 2);
    assert_string_equal(log.lines[0], "referer: http://h/page?a=1");
    assert_string_equal(log.lines[1], "Referer: http://h/p");
    struct gate_header theirs[] = { H("Sec-WebSocket-Protocol", " chat ,, x") };
    emit_all(theirs, 1, &log);
    assert_int_equal(log.n, 1);
    assert_string_equal(log.lines[0], "Sec-WebSocket-Protocol:  chat ,, x"); /* as it came */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_parameter_leaves_the_logged_path),
        cmocka_unit_test(test_the_key_is_read_decoded_and_taken_out),
        cmocka_unit_test(test_the_subprotocol_key_and_marker),
        cmocka_unit_test(test_one_key_wherever_it_comes),
        cmocka_unit_test(test_the_upstream_never_sees_the_proxys_subprotocols),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
