/* Where a browser can put its API key, since page script cannot set Authorization on
 * `new WebSocket()` (SPEC "Clients as they are", Browser WebSockets):
 * - in the query parameter [auth] key_query (any request, not only handshakes: EventSource
 *   and <img> cannot set headers either), removed from the target the upstream receives,
 *   from the access log's path and from a Referer (a page whose address carries the key
 *   names it in every request it makes);
 * - in a WebSocket handshake's offered subprotocol "tierproxy.key.KEY"
 *   (Sec-WebSocket-Protocol), removed with an offered "tierproxy" from what the upstream
 *   sees; "tierproxy" is what the proxy selects in the client's 101 when the upstream
 *   selects none (a browser that offered subprotocols fails a 101 that selects none).
 *
 * One request, one key: a key given in several places (the key header, the parameter
 * repeated, a subprotocol) must be the same everywhere, else the request is refused as an
 * invalid key: the proxy never guesses which one the client meant.
 *
 * Query parameters are split on '&' and their names and values percent-decoded ('+' is a
 * space), as browsers' URLSearchParams and the upstream's frameworks read them, so
 * "api%5Fkey=K" is the parameter api_key too. Subprotocol lists are RFC 9110 lists: any
 * number of fields, elements separated by commas with optional whitespace, empty elements
 * ignored; "tierproxy" and the "tierproxy.key." prefix match in any case.
 *
 * Pure: no libmicrohttpd or I/O; the gate, request.c and the access log call it.
 *
 * request.c takes every key_query parameter out of the normalised target right after it is
 * parsed (in place: the target only shrinks; a query left empty loses its "?"), before the
 * gate or the upstream sees it, keeping the first non-empty value (decoded, capped at 256
 * bytes) in the request's scratch; the access log strips the same parameter from the raw
 * path it logs (access_log_write), so every line that has a path goes through one place. An
 * empty key counts as none. forward_key = yes forwards the key header only: the parameter
 * and the subprotocol never reach the upstream.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "proxy/header_field.h"
#include "proxy/scratch.h"
#include "tiers/request_target.h"

/* The longest key looked up; a longer one is invalid (keys are 51 characters). */
#define WS_AUTH_KEY_MAX 256

/* The marker subprotocol and the prefix of the one that carries the key. */
#define WS_AUTH_PROTOCOL "tierproxy"
#define WS_AUTH_KEY_PROTOCOL "tierproxy.key."

/* A key found in one kind of place (the query, or the subprotocols). */
struct ws_auth_key {
    unsigned found;              /* occurrences, empty ones included */
    bool conflict;               /* occurrences differ, or one is longer than WS_AUTH_KEY_MAX */
    const char *key;             /* the first non-empty one (NULL: none): key[0, len), in
                                    decoded (the query's) or in the header field (a subprotocol's) */
    size_t len;
    char decoded[WS_AUTH_KEY_MAX];
};

/* Takes every parameter called name (decoded) out of t's query, in place (t->forward and
 * t->forward_len shrink; a query left empty loses its '?'), and records the first non-empty
 * value in *out. name NULL: nothing is taken. */
void ws_auth_query_take(struct request_target *t, const char *name, struct ws_auth_key *out);

/* The same for a request whose key_query is name (NULL: off, *out stays NULL): *out comes
 * from scratch. Returns 0, or -ENOMEM. */
int ws_auth_query_take_into(struct request_target *t, const char *name, struct scratch *scratch,
                            struct ws_auth_key **out);

/* Writes target (a raw request target, NUL-terminated) into out without the parameters
 * called name: out needs strlen(target) + 1 bytes. Returns out. */
char *ws_auth_query_strip(const char *target, const char *name, char *out);

/* The key offered as a "tierproxy.key.KEY" subprotocol in the handshake's fields. */
void ws_auth_protocol_key(const struct gate_header *headers, size_t n_headers, struct ws_auth_key *out);

/* True when the client offered "tierproxy": *spelling / *spelling_len is how it wrote it
 * (in its fields), which is what a 101 must select. */
bool ws_auth_offered_marker(const struct gate_header *headers, size_t n_headers, const char **spelling,
                            size_t *spelling_len);

/* The key a request presents, from the key header's (header_key, NULL when none), the
 * query's (query, NULL when key_query is off) and, for a handshake (websocket), the
 * subprotocols' in headers. Returns 0 with *key / *key_len set (NULL: no key anywhere), or
 * 1 when the places disagree (an invalid key). *key may point into *query or headers. */
int ws_auth_presented_key(const struct gate_header *headers, size_t n_headers, bool websocket,
                          const char *header_key, size_t header_len, const struct ws_auth_key *query,
                          const char **key, size_t *key_len);

/* Field i of headers, for the upstream: returns 0 when it goes as it is; 1 when it was dealt
 * with: the first Sec-WebSocket-Protocol field of a list holding the proxy's elements is
 * emitted without them (not at all when nothing is left), and the later ones are folded
 * into it; a Referer (a page whose address carries the key names it in the requests it
 * makes) is emitted without the key_query parameter (key_query NULL: off); -ENOMEM. */
int ws_auth_emit_field(const struct gate_header *headers, size_t n_headers, size_t i, const char *key_query,
                       const struct gate_header_sink *sink);
