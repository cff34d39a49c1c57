/* Redis Cluster's key-to-slot rule and its redirect errors (issue 14). Pure functions, no
 * I/O: the cluster routing of the Redis limiter builds on them. Private to store/. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SLOT_COUNT 16384u
#define CLUSTER_HOST_MAX 256          /* bytes of a node's host, with its NUL */

/* CRC16/XMODEM (polynomial 0x1021, initial 0, no reflection), as Redis' crc16.c:
 * "123456789" gives 0x31C3. */
unsigned cluster_crc16(const char *buf, size_t len);

/* The slot Redis puts key in: CRC16 of the hash tag (the bytes between the first '{' and
 * the first '}' after it, when that is not empty), else of the whole key, mod 16384.
 * Same answer as CLUSTER KEYSLOT. */
unsigned cluster_key_slot(const char *key, size_t len);

/* The slot of the limiter key "<prefix>{<subject>}:<rule id>" (store/redis/limiter_redis.c's
 * put_key) without building it: cluster_key_slot of that key. Every key of one check
 * (same prefix and subject) lands in this slot when prefix holds no '{' (the hash tag is
 * then the subject, or its part before a '}' it holds). */
unsigned cluster_limiter_key_slot(const char *prefix, size_t prefix_len, const char *subject, size_t subject_len,
                                  int64_t rule_id);

enum cluster_redirect_kind {
    CLUSTER_REDIRECT_MOVED = 1,   /* the slot lives elsewhere now: refresh the map, resend */
    CLUSTER_REDIRECT_ASK,         /* the slot is migrating: ASKING then resend there, once */
};

struct cluster_redirect {
    enum cluster_redirect_kind kind;
    unsigned slot;
    char host[CLUSTER_HOST_MAX];   /* empty: the host of the connection that answered */
    int port;
};

/* Parses an error reply's text (err, len bytes, no NUL needed) such as
 * "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381" into *out. The port follows
 * the last ':' (IPv6 addresses come without brackets). Returns 0 for a redirect, 1 when
 * the error is not a MOVED or ASK (out untouched), -EINVAL when it is one but malformed
 * (bad slot, port or host too long). */
int cluster_redirect_parse(const char *err, size_t len, struct cluster_redirect *out);
