/* The first request head of a new connection is screened here before libmicrohttpd gets
 * the socket. libmicrohttpd 0.9.75 answers an oversized or malformed head itself, with an
 * HTML body (SPEC: every error body is JSON), sometimes twice over or not at all, and it
 * cuts a header value at a NUL instead of refusing it. A head that passes here is one it
 * takes whole and hands to the proxy. Pure: no I/O, so the fuzzer and unit tests call it. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* The largest request head (request line, headers and the blank line) accepted. Well under
 * libmicrohttpd's per-connection pool (FORWARD_CLIENT_POOL_BYTES), so a later head on a
 * kept-alive connection that is over it still fits there and gets the proxy's own JSON 431. */
#define MAX_HEAD_BYTES (16 * 1024)

enum head_screen_outcome {
    HEAD_INCOMPLETE, /* fine so far, no end of head yet: wait for more */
    HEAD_ACCEPTABLE, /* a whole head libmicrohttpd may have */
    HEAD_REFUSED,    /* answer `status` with `error_code`, then close */
};

struct head_screen {
    enum head_screen_outcome outcome;
    unsigned status;        /* when refused: 400, 413, 414, 431 or 505 */
    const char *error_code; /* when refused: the JSON error_code */
    /* The request line's method and target once it has been read whole (for the access
     * log); pointers into the screened bytes, not NUL-terminated. */
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
};

/* The rules every request head meets, the first of a connection (screened raw by
 * head_screen) and every later one (parsed by libmicrohttpd, screened by request.c); a
 * field's name and value meet http1_name_ok and http1_value_ok (http1.h). */
bool head_screen_method_ok(const char *method, size_t len); /* an upper-case token */
bool head_screen_target_ok(const char *target, size_t len); /* no control character, no space */
/* A field that may appear once only: a second one is refused (today: Host). */
bool head_screen_single_field(const char *name, size_t len);

/* Screens the first `len` bytes a client sent on a connection (they may end anywhere, and
 * carry a body or further requests after the head). A head is refused when it is longer
 * than max_head bytes (414 while still in the request line, else 431), when its request
 * line or a field line is malformed (400: RFC 9112 2-5, including obs-fold, a bare CR, a
 * NUL or other control character in a value, whitespace before the colon, a method with a
 * lower-case letter, a second Host), for an HTTP version other than 1.0 and 1.1 (505), and
 * for a Content-Length that is not a number (400), differs from an earlier one (400), or
 * does not fit 64 bits (413). Empty lines before the request line are skipped (RFC 9112
 * 2.2). Transfer codings and the body are left to the proxy. */
struct head_screen head_screen(const char *data, size_t len, size_t max_head);
