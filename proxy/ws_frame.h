/* Reads WebSocket frame headers (RFC 6455 section 5.2) as bytes stream past, without
 * unmasking or copying payloads: enough to count messages and to refuse malformed
 * frames, while the bytes themselves are forwarded unchanged. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ws_opcode {
    WS_CONTINUATION = 0x0,
    WS_TEXT = 0x1,
    WS_BINARY = 0x2,
    WS_CLOSE = 0x8,
    WS_PING = 0x9,
    WS_PONG = 0xA,
};

struct ws_frame_reader {
    uint8_t head[14];
    size_t head_len;         /* bytes of the current frame head read so far */
    uint64_t payload_left;   /* payload bytes of the current frame still to pass */
    bool in_payload;
    bool in_message;         /* a fragmented data message is open */
    bool failed;
    /* permessage-deflate was negotiated (RFC 7692): RSV1 marks a compressed message on its
     * first frame. Set by the caller after init. */
    bool per_message_deflate;
};

enum ws_event {
    WS_NEED_MORE = 0,        /* all input consumed, no frame head completed */
    WS_FRAME,                /* a frame head completed: see *pframe */
    WS_PROTOCOL_ERROR,       /* malformed: close with 1002 */
};

struct ws_frame_info {
    bool fin;
    enum ws_opcode opcode;
    bool masked;
    uint64_t payload_len;
    bool ends_message;       /* a data frame with FIN: one whole message has passed */
    bool compressed;         /* RSV1 on a message's first frame (permessage-deflate) */
};

void ws_frame_reader_init(struct ws_frame_reader *fr);

/* Consumes input from data[0..len) up to and including the next complete frame head.
 * Sets *pconsumed to the bytes consumed (payload bytes are consumed without events).
 * Returns WS_FRAME with *pframe filled when a head completed (the bytes before it, and
 * the head itself, are in *pconsumed), WS_NEED_MORE when all input was consumed, or
 * WS_PROTOCOL_ERROR. Call again with the rest of the input. */
enum ws_event ws_frame_read(struct ws_frame_reader *fr, const uint8_t *data, size_t len, size_t *pconsumed,
                            struct ws_frame_info *pframe);

/* Writes an unmasked (server-to-client) close frame with code and reason into buf
 * (at least 4 + strlen(reason) bytes, reason at most 123 bytes). Returns its length. */
size_t ws_close_frame(uint16_t code, const char *reason, uint8_t *buf, size_t buflen);

/* The same close frame as a client sends it (RFC 6455 5.3): the mask bit set, the 4-byte
 * key mask[] written after the length and applied to the payload. buf needs at least
 * 8 + strlen(reason) bytes. Returns its length (0 when buf is too small). */
size_t ws_close_frame_masked(uint16_t code, const char *reason, const uint8_t mask[4], uint8_t *buf,
                             size_t buflen);

/* Follows frame boundaries in a byte stream without judging the frames: the upstream's,
 * which pass as they come, so that a frame of the proxy's own goes between two of them. */
struct ws_frame_bounds {
    uint8_t head[14];
    size_t head_len;         /* bytes of the current frame head seen so far */
    uint64_t payload_left;   /* payload bytes of the current frame still to come */
};

/* True between two frames. A zeroed struct is at the stream's start, between frames. */
bool ws_frame_bounds_at_end(const struct ws_frame_bounds *b);

/* Follows data[0..len). With stop_at_end it stops where the frame in progress ends (at
 * once when there is none). Returns the bytes followed. */
size_t ws_frame_bounds_feed(struct ws_frame_bounds *b, const uint8_t *data, size_t len, bool stop_at_end);
