/* The WebSocket frame-head reader: counts messages as bytes stream past in any split, and
 * refuses what RFC 6455 forbids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proxy/ws_frame.h"

/* A masked client frame with `len` payload bytes. Returns its length. */
static size_t client_frame(uint8_t *buf, bool fin, uint8_t opcode, size_t len)
{
    size_t n = 0;
    buf[n++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (len < 126) {
        buf[n++] = (uint8_t)(0x80 | len);
    } else if (len < 65536) {
        buf[n++] = 0x80 | 126;
        buf[n++] = (uint8_t)(len >> 8);
        buf[n++] = (uint8_t)len;
    } else {
        buf[n++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            buf[n++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    memcpy(buf + n, "\x01\x02\x03\x04", 4);
    n += 4;
    memset(buf + n, 'x', len);
    return n + len;
}

/* Feeds data in pieces of `step` bytes; returns the number of messages seen, or -1 on a
 * protocol error. */
static int count_messages_deflate(const uint8_t *data, size_t len, size_t step, bool deflate)
{
    struct ws_frame_reader fr;
    ws_frame_reader_init(&fr);
    fr.per_message_deflate = deflate;
    int messages = 0;
    for (size_t off = 0; off < len;) {
        size_t piece = len - off < step ? len - off : step;
        size_t used = 0;
        while (used < piece) {
            size_t consumed;
            struct ws_frame_info f;
            enum ws_event ev = ws_frame_read(&fr, data + off + used, piece - used, &consumed, &f);
            used += consumed;
            if (ev == WS_PROTOCOL_ERROR)
                return -1;
            if (ev == WS_FRAME && f.ends_message)
                messages++;
        }
        off += piece;
    }
    return messages;
}

static int count_messages(const uint8_t *data, size_t len, size_t step)
{
    return count_messages_deflate(data, len, step, false);
}

static void messages_counted_in_any_split(void **state)
{
    static uint8_t buf[300000];
    size_t n = 0;
    n += client_frame(buf + n, true, WS_TEXT, 5);          /* 1 */
    n += client_frame(buf + n, false, WS_BINARY, 200);     /* fragmented: */
    n += client_frame(buf + n, true, WS_PING, 3);          /* control inside a message */
    n += client_frame(buf + n, false, WS_CONTINUATION, 70000);
    n += client_frame(buf + n, true, WS_CONTINUATION, 1);  /* 2 */
    n += client_frame(buf + n, true, WS_BINARY, 0);        /* 3 */
    n += client_frame(buf + n, true, WS_CLOSE, 2);
    size_t steps[] = { 1, 2, 3, 7, 13, 100, 4096, sizeof(buf) };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        assert_int_equal(count_messages(buf, n, steps[i]), 3);
}

static void forbidden_frames_refused(void **state)
{
    uint8_t buf[200];
    size_t n;
    n = client_frame(buf, true, WS_CONTINUATION, 1); /* continuation with no message */
    assert_int_equal(count_messages(buf, n, 1), -1);
    n = client_frame(buf, false, WS_PING, 1); /* fragmented control frame */
    assert_int_equal(count_messages(buf, n, 1), -1);
    n = client_frame(buf, true, WS_PING, 126); /* control frame over 125 bytes */
    assert_int_equal(count_messages(buf, n, 1), -1);
    n = client_frame(buf, true, 0x3, 1); /* reserved opcode */
    assert_int_equal(count_messages(buf, n, 1), -1);
    n = client_frame(buf, false, WS_TEXT, 1);
    n += client_frame(buf + n, true, WS_TEXT, 1); /* new message inside an open one */
    assert_int_equal(count_messages(buf, n, 1), -1);
    n = client_frame(buf, true, WS_TEXT, 1);
    buf[0] |= 0x40; /* RSV1 without an extension */
    assert_int_equal(count_messages(buf, n, 1), -1);
    uint8_t huge[14] = { 0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4 }; /* 64-bit length, top bit set */
    assert_int_equal(count_messages(huge, sizeof(huge), 1), -1);
}

/* permessage-deflate negotiated: RSV1 on a message's first frame passes and the message
 * counts; anywhere else, and RSV2/RSV3 always, it is refused. */
static void compressed_messages_with_deflate(void **state)
{
    uint8_t buf[600];
    size_t n = 0, first;
    first = n;
    n += client_frame(buf + n, true, WS_TEXT, 5);
    buf[first] |= 0x40;                                      /* 1: compressed text */
    first = n;
    n += client_frame(buf + n, false, WS_BINARY, 200);
    buf[first] |= 0x40;                                      /* compressed, fragmented: */
    n += client_frame(buf + n, true, WS_PING, 3);
    n += client_frame(buf + n, true, WS_CONTINUATION, 100);  /* 2 */
    n += client_frame(buf + n, true, WS_TEXT, 4);            /* 3: not compressed */
    size_t steps[] = { 1, 3, 17, sizeof(buf) };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        assert_int_equal(count_messages_deflate(buf, n, steps[i], true), 3);
    assert_int_equal(count_messages(buf, n, 1), -1);         /* not negotiated */

    size_t second = client_frame(buf, false, WS_TEXT, 1);
    n = second + client_frame(buf + second, true, WS_CONTINUATION, 1);
    buf[second] |= 0x40;                                     /* RSV1 on a continuation */
    assert_int_equal(count_messages_deflate(buf, n, 1, true), -1);
    n = client_frame(buf, true, WS_PING, 1);
    buf[0] |= 0x40;                                          /* RSV1 on a control frame */
    assert_int_equal(count_messages_deflate(buf, n, 1, true), -1);
    n = client_frame(buf, true, WS_TEXT, 1);
    buf[0] |= 0x20;                                          /* RSV2 */
    assert_int_equal(count_messages_deflate(buf, n, 1, true), -1);
    n = client_frame(buf, true, WS_TEXT, 1);
    buf[0] |= 0x10;                                          /* RSV3 */
    assert_int_equal(count_messages_deflate(buf, n, 1, true), -1);
}

static void close_frame_layout(void **state)
{
    uint8_t buf[64];
    size_t n = ws_close_frame(1008, "policy", buf, sizeof(buf));
    assert_int_equal(n, 4 + 6);
    assert_int_equal(buf[0], 0x88);
    assert_int_equal(buf[1], 8);
    assert_int_equal((buf[2] << 8) | buf[3], 1008);
    assert_memory_equal(buf + 4, "policy", 6);
    assert_int_equal(ws_close_frame(1000, "x", buf, 4), 0); /* no room: nothing written */
}

/* Toward the upstream the proxy is a client: the frame is masked with the key given, and a
 * reader that unmasks it finds the same code and reason. */
/* Frames of each length encoding in any split: the tracker is between frames exactly where
 * one ends, and stop_at_end takes just the rest of the frame in flight. */
static void bounds_follow_frames_in_any_split(void **state)
{
    static uint8_t stream[70000 + 300];
    size_t n = 0, ends[3];
    const size_t lens[3] = { 5, 200, 70000 };
    for (int f = 0; f < 3; f++) {
        n += client_frame(stream + n, true, 0x2, lens[f]);
        ends[f] = n;
    }
    const size_t steps[] = { 1, 3, 1000, 4096, sizeof(stream) };
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        struct ws_frame_bounds b = { 0 };
        assert_true(ws_frame_bounds_at_end(&b));
        for (size_t off = 0; off < n;) {
            size_t piece = n - off < steps[k] ? n - off : steps[k];
            assert_int_equal(ws_frame_bounds_feed(&b, stream + off, piece, false), piece);
            off += piece;
            bool at_an_end = off == ends[0] || off == ends[1] || off == ends[2];
            assert_int_equal(ws_frame_bounds_at_end(&b), at_an_end);
        }
    }
    /* 3 bytes into the second frame: the rest of it, and not a byte of the third */
    struct ws_frame_bounds b = { 0 };
    assert_int_equal(ws_frame_bounds_feed(&b, stream, ends[0] + 3, false), ends[0] + 3);
    assert_int_equal(ws_frame_bounds_feed(&b, stream + ends[0] + 3, n - ends[0] - 3, true),
                     ends[1] - ends[0] - 3);
    assert_true(ws_frame_bounds_at_end(&b));
    assert_int_equal(ws_frame_bounds_feed(&b, stream + ends[1], n - ends[1], true), 0);
}

static void masked_close_frame_layout(void **state)
{
    const uint8_t key[4] = { 0xa1, 0x02, 0xff, 0x40 };
    uint8_t buf[64];
    size_t n = ws_close_frame_masked(1002, "protocol error", key, buf, sizeof(buf));
    assert_int_equal(n, 2 + 4 + 2 + 14);
    assert_int_equal(buf[0], 0x88);
    assert_int_equal(buf[1], 0x80 | 16);
    assert_memory_equal(buf + 2, key, 4);
    uint8_t plain[16];
    for (size_t i = 0; i < 16; i++)
        plain[i] = buf[6 + i] ^ key[i % 4];
    assert_int_equal((plain[0] << 8) | plain[1], 1002);
    assert_memory_equal(plain + 2, "protocol error", 14);
    assert_int_equal(ws_close_frame_masked(1000, "x", key, buf, 8), 0); /* no room */
    assert_int_equal(ws_close_frame_masked(1000, "x", key, buf, 9), 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(messages_counted_in_any_split),
        cmocka_unit_test(forbidden_frames_refused),
        cmocka_unit_test(compressed_messages_with_deflate),
        cmocka_unit_test(close_frame_layout),
        cmocka_unit_test(masked_close_frame_layout),
        cmocka_unit_test(bounds_follow_frames_in_any_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
