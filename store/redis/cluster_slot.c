/* Redis Cluster's key-to-slot rule and MOVED/ASK parsing. */
#include "store/redis/cluster_slot.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint16_t crc16_update(uint16_t crc, const char *buf, size_t len)
{
    /* bitwise rather than Redis' 256-entry table: a key is tens of bytes, and the loop
     * cannot carry a mistyped table entry */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned cluster_crc16(const char *buf, size_t len)
{
    return crc16_update(0, buf, len);
}

unsigned cluster_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        /* "{}" is no tag: the whole key counts, as in Redis' keyHashSlot */
        if (close != NULL && close > key + from)
            return cluster_crc16(key + from, (size_t)(close - (key + from))) % CLUSTER_SLOT_COUNT;
    }
    return cluster_crc16(key, len) % CLUSTER_SLOT_COUNT;
}

/* A decimal spanning exactly [s, s+len) in [0, max]; -1 otherwise. */
static long parse_decimal(const char *s, size_t len, long max)
{
    if (len == 0 || len > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= max ? v : -1;
}

int cluster_redirect_parse(const char *err, size_t len, struct cluster_redirect *out)
{
    enum cluster_redirect_kind kind;
    size_t at;
    if (len >= 6 && memcmp(err, "MOVED ", 6) == 0) {
        kind = CLUSTER_REDIRECT_MOVED;
        at = 6;
    } else if (len >= 4 && memcmp(err, "ASK ", 4) == 0) {
        kind = CLUSTER_REDIRECT_ASK;
        at = 4;
    } else {
        return 1;
    }
    const char *slot_s = err + at;
    const char *space = memchr(slot_s, ' ', len - at);
    if (space == NULL)
        return -EINVAL;
    long slot = parse_decimal(slot_s, (size_t)(space - slot_s), CLUSTER_SLOT_COUNT - 1);
    const char *addr = space + 1;
    size_t addr_len = len - (size_t)(addr - err);
    const char *colon = NULL;
    for (size_t i = addr_len; i > 0; i--) {
        if (addr[i - 1] == ':') {
            colon = addr + i - 1;
            break;
        }
    }
    if (slot < 0 || colon == NULL)
        return -EINVAL;
    size_t host_len = (size_t)(colon - addr);
    long port = parse_decimal(colon + 1, addr_len - host_len - 1, 65535);
    if (port <= 0 || host_len >= CLUSTER_HOST_MAX || memchr(addr, ' ', host_len) != NULL)
        return -EINVAL;
    out->kind = kind;
    out->slot = (unsigned)slot;
    memcpy(out->host, addr, host_len);
    out->host[host_len] = '\0';
    out->port = (int)port;
    return 0;
}

/* A key made of pieces laid end to end, without copying them. */
struct key_piece {
    const char *p;
    size_t len;
};

/* CRC16 of the bytes [from, to) of the pieces' concatenation. */
static uint16_t crc16_pieces(const struct key_piece *pieces, size_t n, size_t from, size_t to)
{
    uint16_t crc = 0;
    size_t at = 0;
    for (size_t i = 0; i < n && at < to; at += pieces[i].len, i++) {
        size_t lo = from > at ? from - at : 0;
        size_t hi = to - at < pieces[i].len ? to - at : pieces[i].len;
        if (lo < hi)
            crc = crc16_update(crc, pieces[i].p + lo, hi - lo);
    }
    return crc;
}

/* The first offset >= from holding byte c, or SIZE_MAX. */
static size_t find_in_pieces(const struct key_piece *pieces, size_t n, size_t from, char c)
{
    size_t at = 0;
    for (size_t i = 0; i < n; at += pieces[i].len, i++) {
        if (from >= at + pieces[i].len)
            continue;
        size_t lo = from > at ? from - at : 0;
        const char *hit = memchr(pieces[i].p + lo, c, pieces[i].len - lo);
        if (hit != NULL)
            return at + (size_t)(hit - pieces[i].p);
    }
    return SIZE_MAX;
}

unsigned cluster_limiter_key_slot(const char *prefix, size_t prefix_len, const char *subject, size_t subject_len,
                                  int64_t rule_id)
{
    char tail[32];
    int tail_len = snprintf(tail, sizeof(tail), "}:%" PRId64, rule_id);
    const struct key_piece pieces[4] = {
        {prefix, prefix_len}, {"{", 1}, {subject, subject_len}, {tail, (size_t)tail_len}};
    size_t total = prefix_len + 1 + subject_len + (size_t)tail_len;
    size_t open = find_in_pieces(pieces, 4, 0, '{');   /* never SIZE_MAX: there is ours */
    size_t close = find_in_pieces(pieces, 4, open + 1, '}');
    if (close != SIZE_MAX && close > open + 1)
        return crc16_pieces(pieces, 4, open + 1, close) % CLUSTER_SLOT_COUNT;
    return crc16_pieces(pieces, 4, 0, total) % CLUSTER_SLOT_COUNT;
}
