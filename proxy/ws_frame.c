/* The frame-head readers of ws_frame.h. Pure: no I/O, no allocation; a reader owns only the
 * head bytes it has seen so far (at most 14) and never reads a payload, which passes as it
 * came. Once a ws_frame_reader has found a protocol error it stays failed and answers every
 * later call with WS_PROTOCOL_ERROR. ws_frame_bounds judges nothing: it only knows where
 * frames end, so it can follow the upstream's frames, which are not ours to refuse. */
#include "proxy/ws_frame.h"

#include <string.h>

void ws_frame_reader_init(struct ws_frame_reader *fr)
{
    memset(fr, 0, sizeof(*fr));
}

/* Bytes of the frame head once its first two bytes are known. */
static size_t head_size(const uint8_t *head)
{
    size_t n = 2;
    uint8_t len7 = head[1] & 0x7f;
    if (len7 == 126)
        n += 2;
    else if (len7 == 127)
        n += 8;
    if (head[1] & 0x80)
        n += 4;
    return n;
}

static enum ws_event finish_head(struct ws_frame_reader *fr, struct ws_frame_info *f)
{
    const uint8_t *h = fr->head;
    f->fin = (h[0] & 0x80) != 0;
    f->opcode = (enum ws_opcode)(h[0] & 0x0f);
    f->masked = (h[1] & 0x80) != 0;
    uint8_t len7 = h[1] & 0x7f;
    uint64_t len = len7;
    if (len7 == 126) {
        len = ((uint64_t)h[2] << 8) | h[3];
    } else if (len7 == 127) {
        len = 0;
        for (int i = 2; i < 10; i++)
            len = (len << 8) | h[i];
        if (len >> 63)
            return WS_PROTOCOL_ERROR;
    }
    f->payload_len = len;
    /* RSV2 and RSV3 belong to no extension we know of. RSV1 is permessage-deflate's, and
     * only on the first frame of a data message (RFC 7692 6). */
    f->compressed = (h[0] & 0x40) != 0;
    if ((h[0] & 0x30) != 0)
        return WS_PROTOCOL_ERROR;
    if (f->compressed && (!fr->per_message_deflate || (f->opcode != WS_TEXT && f->opcode != WS_BINARY)))
        return WS_PROTOCOL_ERROR;
    bool control = (f->opcode & 0x8) != 0;
    switch (f->opcode) {
    case WS_CONTINUATION:
        if (!fr->in_message)
            return WS_PROTOCOL_ERROR;
        break;
    case WS_TEXT:
    case WS_BINARY:
        if (fr->in_message)
            return WS_PROTOCOL_ERROR;
        break;
    case WS_CLOSE:
    case WS_PING:
    case WS_PONG:
        if (!f->fin || len > 125)
            return WS_PROTOCOL_ERROR;
        break;
    default:
        return WS_PROTOCOL_ERROR;
    }
    f->ends_message = !control && f->fin;
    if (!control)
        fr->in_message = !f->fin;
    fr->payload_left = len;
    fr->in_payload = len > 0;
    fr->head_len = 0;
    return WS_FRAME;
}

enum ws_event ws_frame_read(struct ws_frame_reader *fr, const uint8_t *data, size_t len, size_t *pconsumed,
                            struct ws_frame_info *pframe)
{
    size_t pos = 0;
    *pconsumed = 0;
    if (fr->failed)
        return WS_PROTOCOL_ERROR;
    while (pos < len) {
        if (fr->in_payload) {
            uint64_t take = fr->payload_left;
            if (take > len - pos)
                take = len - pos;
            pos += (size_t)take;
            fr->payload_left -= take;
            if (fr->payload_left == 0)
                fr->in_payload = false;
            continue;
        }
        fr->head[fr->head_len++] = data[pos++];
        if (fr->head_len < 2 || fr->head_len < head_size(fr->head))
            continue;
        enum ws_event ev = finish_head(fr, pframe);
        *pconsumed = pos;
        if (ev == WS_PROTOCOL_ERROR)
            fr->failed = true;
        return ev;
    }
    *pconsumed = pos;
    return WS_NEED_MORE;
}

size_t ws_close_frame(uint16_t code, const char *reason, uint8_t *buf, size_t buflen)
{
    size_t rlen = strlen(reason);
    if (rlen > 123)
        rlen = 123;
    if (buflen < 4 + rlen)
        return 0;
    buf[0] = 0x80 | WS_CLOSE;
    buf[1] = (uint8_t)(2 + rlen);
    buf[2] = (uint8_t)(code >> 8);
    buf[3] = (uint8_t)(code & 0xff);
    memcpy(buf + 4, reason, rlen);
    return 4 + rlen;
}

size_t ws_close_frame_masked(uint16_t code, const char *reason, const uint8_t mask[4], uint8_t *buf,
                             size_t buflen)
{
    if (buflen < 4)
        return 0;
    /* The unmasked frame written 4 bytes on has its payload where the masked one needs it,
     * after the 2-byte head and the key; its own head is overwritten by the key. */
    size_t n = ws_close_frame(code, reason, buf + 4, buflen - 4);
    if (n == 0)
        return 0;
    uint8_t *payload = buf + 6;
    size_t len = n - 2;
    buf[0] = 0x80 | WS_CLOSE;
    buf[1] = (uint8_t)(0x80 | len);
    memcpy(buf + 2, mask, 4);
    for (size_t i = 0; i < len; i++)
        payload[i] ^= mask[i % 4];
    return 2 + 4 + len;
}

bool ws_frame_bounds_at_end(const struct ws_frame_bounds *b)
{
    return b->head_len == 0 && b->payload_left == 0;
}

static uint64_t payload_length(const uint8_t *head)
{
    uint8_t len7 = head[1] & 0x7f;
    if (len7 < 126)
        return len7;
    if (len7 == 126)
        return ((uint64_t)head[2] << 8) | head[3];
    uint64_t len = 0;
    for (int i = 2; i < 10; i++)
        len = (len << 8) | head[i];
    return len;
}

size_t ws_frame_bounds_feed(struct ws_frame_bounds *b, const uint8_t *data, size_t len, bool stop_at_end)
{
    size_t pos = 0;
    while (pos < len && !(stop_at_end && ws_frame_bounds_at_end(b))) {
        if (b->payload_left > 0) {
            uint64_t take = b->payload_left < len - pos ? b->payload_left : len - pos;
            pos += (size_t)take;
            b->payload_left -= take;
            continue;
        }
        b->head[b->head_len++] = data[pos++];
        if (b->head_len >= 2 && b->head_len == head_size(b->head)) {
            b->payload_left = payload_length(b->head);
            b->head_len = 0;
        }
    }
    return pos;
}
