/* The upstream's answer 101 to a WebSocket handshake: what it must carry to be relayed
 * (RFC 6455 4.1: an Upgrade field of "websocket" and a Sec-WebSocket-Accept that is the
 * base64 SHA-1 of the client's Sec-WebSocket-Key and the protocol's GUID, each once) and
 * what it tells the tunnel (permessage-deflate, RFC 7692). Pure: no I/O. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "proxy/gate.h"

#define WS_ACCEPT_LEN 28 /* base64 of a 20-byte SHA-1 */

/* What a handshake's 101 is held to, made from the client's handshake. */
struct ws_101_expect {
    bool has_key;                       /* the client sent a Sec-WebSocket-Key */
    char accept[WS_ACCEPT_LEN + 1];     /* then: the Sec-WebSocket-Accept it must get */
};

/* What the 101's fields said so far. */
struct ws_101 {
    unsigned upgrades;         /* Upgrade fields */
    bool upgrade_websocket;    /* the (one) Upgrade field is "websocket" */
    unsigned accepts;          /* Sec-WebSocket-Accept fields */
    bool accept_matches;       /* the (one) Sec-WebSocket-Accept is the expected one */
    bool per_message_deflate;  /* Sec-WebSocket-Extensions names permessage-deflate */
};

/* The expectation for a client's Sec-WebSocket-Key value (key NULL: it sent none). */
void ws_101_expect_key(struct ws_101_expect *e, const char *key, size_t key_len);
/* The same from the handshake's fields (its first Sec-WebSocket-Key). */
void ws_101_expect_from(struct ws_101_expect *e, const struct gate_header *headers, size_t n_headers);

/* Reads one field of the 101 (value without the whitespace around it). */
void ws_101_field(struct ws_101 *seen, const struct ws_101_expect *e, const char *name, size_t name_len,
                  const char *value, size_t value_len);

/* True when the 101 may be relayed: one Upgrade, websocket, and one Sec-WebSocket-Accept
 * that matches. An upstream 101 without them is a 502 bad_upstream_response. */
bool ws_101_valid(const struct ws_101 *seen);
