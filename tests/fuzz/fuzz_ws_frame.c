/* Fuzzes the WebSocket frame-head reader: the stream is fed whole, one byte at a time and
 * in pseudo-random splits; every split must give the same frames, the same message count
 * and the same protocol error at the same offset. Each call consumes at most what it was
 * given, makes progress unless it reports an error, and consumes everything when it asks
 * for more. Also round-trips ws_close_frame through the reader.
 *
 * Input: 4 bytes of split seed, then the byte stream. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/ws_frame.h"

#include "tests/fuzz/fuzz_check.h"

#define MAX_INPUT 16384
#define MAX_FRAMES (MAX_INPUT / 2) /* a head is at least 2 bytes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
    struct ws_frame_info frames[MAX_FRAMES];
    size_t frame_end[MAX_FRAMES]; /* stream offset just past each head */
    size_t n_frames;
    size_t messages;
    bool error;
    size_t error_at;              /* stream offset just past the offending head */
};

/* Feeds one piece; returns false once the reader has failed. */
static bool feed(struct ws_frame_reader *fr, const uint8_t *piece, size_t len, size_t base,
                 struct outcome *o)
{
    size_t used = 0;
    do {
        size_t consumed = (size_t)-1;
        struct ws_frame_info f;
        memset(&f, 0xa5, sizeof(f));
        enum ws_event ev = ws_frame_read(fr, piece + used, len - used, &consumed, &f);
        CHECK(consumed <= len - used);
        used += consumed;
        switch (ev) {
        case WS_NEED_MORE:
            CHECK(used == len);
            break;
        case WS_FRAME:
            CHECK(consumed > 0);
            CHECK(f.opcode == WS_CONTINUATION || f.opcode == WS_TEXT || f.opcode == WS_BINARY ||
                  f.opcode == WS_CLOSE || f.opcode == WS_PING || f.opcode == WS_PONG);
            CHECK(!f.ends_message || (f.fin && !(f.opcode & 8)));
            if (f.opcode & 8)
                CHECK(f.fin && f.payload_len <= 125);
            CHECK(f.payload_len < (UINT64_C(1) << 63));
            CHECK(o->n_frames < MAX_FRAMES);
            o->frames[o->n_frames] = f;
            o->frame_end[o->n_frames++] = base + used;
            o->messages += f.ends_message;
            break;
        case WS_PROTOCOL_ERROR:
            o->error = true;
            o->error_at = base + used;
            /* a failed reader stays failed and consumes nothing more */
            CHECK(ws_frame_read(fr, piece, len, &consumed, &f) == WS_PROTOCOL_ERROR);
            CHECK(consumed == 0);
            return false;
        default:
            CHECK(!"unknown event");
        }
    } while (used < len);
    return true;
}

static uint32_t next_rand(uint32_t *state)
{
    *state = *state * 1103515245u + 12345u;
    return *state >> 8;
}

static uint8_t *piece_buf; /* MAX_INPUT bytes */

/* mode 0: whole; 1: byte by byte; 2: random pieces from seed. */
static void run(const uint8_t *data, size_t size, int mode, uint32_t seed, struct outcome *o)
{
    struct ws_frame_reader fr;
    o->n_frames = o->messages = o->error_at = 0;
    o->error = false;
    ws_frame_reader_init(&fr);
    if (size == 0) {
        size_t consumed = 1;
        struct ws_frame_info f;
        CHECK(ws_frame_read(&fr, data, 0, &consumed, &f) == WS_NEED_MORE && consumed == 0);
        return;
    }
    for (size_t off = 0; off < size;) {
        size_t piece = size - off;
        if (mode == 1)
            piece = 1;
        else if (mode == 2)
            piece = 1 + next_rand(&seed) % (next_rand(&seed) % 4 == 0 ? 64 : 16);
        if (piece > size - off)
            piece = size - off;
        /* Each piece ends where the heap buffer ends, so ASan sees any read past it. */
        uint8_t *copy = piece_buf + MAX_INPUT - piece;
        memcpy(copy, data + off, piece);
        bool ok = feed(&fr, copy, piece, off, o);
        if (!ok)
            return;
        off += piece;
    }
}

static bool same_frame(const struct ws_frame_info *a, const struct ws_frame_info *b)
{
    return a->fin == b->fin && a->opcode == b->opcode && a->masked == b->masked &&
           a->payload_len == b->payload_len && a->ends_message == b->ends_message;
}

static void same_outcome(const struct outcome *a, const struct outcome *b)
{
    CHECK(a->n_frames == b->n_frames);
    CHECK(a->messages == b->messages);
    CHECK(a->error == b->error);
    if (a->error)
        CHECK(a->error_at == b->error_at);
    for (size_t i = 0; i < a->n_frames; i++) {
        CHECK(same_frame(&a->frames[i], &b->frames[i]));
        CHECK(a->frame_end[i] == b->frame_end[i]);
    }
}

static void close_frame_round_trip(const uint8_t *data, size_t size)
{
    char reason[200];
    uint8_t buf[256];
    size_t rlen = size < sizeof(reason) - 1 ? size : sizeof(reason) - 1;
    memcpy(reason, data, rlen);
    reason[rlen] = '\0';
    uint16_t code = size >= 2 ? (uint16_t)(data[0] << 8 | data[1]) : 1000;
    size_t buflen = size >= 3 ? data[2] % (sizeof(buf) + 1) : sizeof(buf);
    size_t n = ws_close_frame(code, reason, buf, buflen);
    size_t want = 4 + (strlen(reason) > 123 ? 123 : strlen(reason));
    CHECK(n == 0 || n == want);
    CHECK(n <= buflen);
    if (n == 0) {
        CHECK(buflen < want);
        return;
    }
    struct ws_frame_reader fr;
    struct ws_frame_info f;
    size_t consumed;
    ws_frame_reader_init(&fr);
    CHECK(ws_frame_read(&fr, buf, n, &consumed, &f) == WS_FRAME);
    CHECK(f.opcode == WS_CLOSE && f.fin && !f.masked && f.payload_len == n - 2);
    CHECK(consumed == 2);
    CHECK(ws_frame_read(&fr, buf + 2, n - 2, &consumed, &f) == WS_NEED_MORE && consumed == n - 2);
    CHECK(((uint16_t)(buf[2] << 8 | buf[3])) == code);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct outcome whole, bytes, pieces;
    uint32_t seed = 0;
    if (size < 4 || size > MAX_INPUT + 4)
        return 0;
    if (piece_buf == NULL) {
        piece_buf = malloc(MAX_INPUT);
        CHECK(piece_buf != NULL);
    }
    for (int i = 0; i < 4; i++)
        seed = seed << 8 | data[i];
    data += 4;
    size -= 4;

    run(data, size, 0, 0, &whole);
    run(data, size, 1, 0, &bytes);
    run(data, size, 2, seed, &pieces);
    same_outcome(&whole, &bytes);
    same_outcome(&whole, &pieces);

    close_frame_round_trip(data, size);
    return 0;
}
