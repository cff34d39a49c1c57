/* HTTP/1.1 pieces read in more than one place: the characters a field name and value may
 * hold, a Content-Length value, a field line, the hop-by-hop field names and an upstream's
 * status line (RFC 9110, RFC 9112). head_screen applies them to request heads, forward.c
 * and websocket.c to upstream heads. Pure: no I/O. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

bool http1_name_ok(const char *name, size_t len);   /* a token (RFC 9110 5.1) */
bool http1_value_ok(const char *value, size_t len); /* no control character but HTAB (RFC 9110 5.5) */
/* How many of the first len bytes meet http1_value_ok: the offset of the first that does
 * not (a CR, an LF, a NUL, ...), or len. */
size_t http1_value_span(const char *value, size_t len);

/* A Host value without the whitespace around it is an authority without userinfo (RFC
 * 3986 3.2: host [":" port], the host an IP-literal, an IPv4 address or a reg-name, the
 * port digits up to 65535). An empty value is refused: an http URI's host is never empty
 * (RFC 9110 4.2.1), so there is no authority to forward. */
bool http1_host_ok(const char *value, size_t len);

/* A Content-Length value with optional whitespace around it: digits only (RFC 9110 8.6).
 * Returns 0 with *length set, -EINVAL for anything else, -ERANGE past INT64_MAX. */
int http1_content_length(const char *value, size_t len, int64_t *length);

/* One field line "Name: value" without its CRLF, split and checked: the name a token right
 * before the colon, the value free of control characters but HTAB, with the whitespace
 * around it left out. Returns 0, or -EINVAL for a malformed line. */
struct http1_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int http1_field_line(const char *line, size_t len, struct http1_field *out);

/* True for a name that is a case-insensitive match of `literal` (inline: the literal's
 * length folds away). */
static inline bool http1_name_is(const char *name, size_t len, const char *literal)
{
    return strlen(literal) == len && strncasecmp(name, literal, len) == 0;
}

/* Fields meant for one connection, never forwarded (RFC 9110 7.6.1), plus the old
 * Keep-Alive and Proxy-Connection that clients still send. */
bool http1_is_hop_by_hop(const char *name, size_t len);

/* An upstream's status line, "HTTP/1.x SP 3DIGIT [SP reason]" (RFC 9112 4) without its
 * CRLF: the status (100-599), or 0 when it is malformed. For curl's heads and the
 * WebSocket handshake's alike. */
long http1_status_line(const char *line, size_t len);
