/* The first request head of a new connection is screened here before libmicrohttpd gets
 * the socket. libmicrohttpd 0.9.75 answers an oversized or malformed head itself, with an
 * HTML body (SPEC: every error body is JSON), sometimes twice over or not at all, and it
 * cuts a header value at a NUL instead of refusing it. A head that passes here is one it
 * takes whole and hands to the proxy. Pure: no I/O, so the fuzzer and unit tests call it.
 *
 * The rules: the head's size (16 KiB; 414 while still in the request line, else 431);
 * request-line and field-line syntax (RFC 9112: obs-fold, bare CR and NUL refused, no space
 * after the version, which libmicrohttpd would read as part of it); the version (1.x is
 * HTTP/1.1; 505 past 1.x); one Host that is an RFC 3986 authority (http1_host_ok: host and
 * port, no userinfo, not empty, RFC 9110 4.2.1); Content-Length (400, or 413 past 64 bits);
 * and what the fields, query arguments and cookies take of libmicrohttpd's pool (it keeps a
 * 64-byte entry for each and copies a Cookie value: past 20 KiB, what the 36 KiB pool holds
 * beside a 16 KiB head, 431).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* The largest request head (request line, headers and the blank line) accepted. Well under
 * libmicrohttpd's per-connection pool (FORWARD_CLIENT_POOL_BYTES), so a later head on a
 * kept-alive connection that is over it still fits there and gets the proxy's own JSON 431. */
#define MAX_HEAD_BYTES (16 * 1024)

/* How long a client may take to send a whole head, the first on a connection (intake.c) or
 * the rest of a later one (head_wait.c); nginx's client_header_timeout. libmicrohttpd's own
 * timeout only counts idle time, so a head trickled a line at a time was never cut. */
#define HEAD_WAIT_MS 60000

/* What libmicrohttpd 0.9.75 takes of a connection's pool for each field, query argument and
 * cookie of a request: its list entry (56 bytes, aligned to 16). A Cookie value is also
 * copied there whole. */
#define HEAD_ENTRY_BYTES 64
/* The most a head's entries (and Cookie copies) may take of libmicrohttpd's pool: what is
 * left of it beside a head of MAX_HEAD_BYTES. Past that libmicrohttpd runs out of room and
 * answers with its own HTML 431 (for query arguments: not at all). It may still run out
 * sooner when body bytes that came with the head fill its read buffer (18 KiB) too. */
#define MAX_HEAD_ENTRY_BYTES (20 * 1024)

enum head_screen_outcome {
    HEAD_INCOMPLETE, /* fine so far, no end of head yet: wait for more */
    HEAD_ACCEPTABLE, /* a whole head libmicrohttpd may have */
    HEAD_REFUSED,    /* answer `status` with `error_code`, then close */
};

/* Why a head was refused: the answer's form depends on it (on a later head, what
 * libmicrohttpd used to answer itself in HTML is answered with a problem body). */
enum head_fault {
    HEAD_FAULT_SYNTAX,   /* a malformed request line or field line (a NUL, obs-fold, ...) */
    HEAD_FAULT_NO_COLON, /* a field line that ends without a colon */
    HEAD_FAULT_LENGTH,   /* a Content-Length that is no number, differs, or is over 64 bits */
    HEAD_FAULT_VERSION,  /* an HTTP version other than 1.x */
    HEAD_FAULT_AFTER_VERSION, /* whitespace after the version (RFC 9112 3 has none) */
    HEAD_FAULT_SIZE,     /* longer than the limit given */
    HEAD_FAULT_ENTRIES,  /* more fields, query arguments and cookies than MAX_HEAD_ENTRY_BYTES */
};

struct head_screen {
    enum head_screen_outcome outcome;
    unsigned status;        /* when refused: 400, 413, 414, 431 or 505 */
    const char *error_code; /* when refused: the JSON error_code */
    enum head_fault fault;  /* when refused */
    size_t head_len;        /* when acceptable: its bytes, through the blank line */
    /* The request line's method and target once it has been read whole (for the access
     * log); pointers into the screened bytes, not NUL-terminated. */
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
};

/* The rules every request head meets, the first of a connection (screened raw by
 * head_screen) and every later one (head_screen_fields, later_head.h); a field's name and
 * value meet http1_name_ok and http1_value_ok (http1.h). */
bool head_screen_method_ok(const char *method, size_t len); /* an upper-case token */
bool head_screen_target_ok(const char *target, size_t len); /* no control character, no space */
/* A field that may appear once only: a second one is refused (today: Host). */
bool head_screen_single_field(const char *name, size_t len);
/* A Host value, whitespace around it allowed, is an authority (http1_host_ok). */
bool head_screen_host_ok(const char *value, size_t len);

/* Screens the first `len` bytes a client sent on a connection (they may end anywhere, and
 * carry a body or further requests after the head). A head is refused when it is longer
 * than max_head bytes (414 while still in the request line, else 431), when its request
 * line or a field line is malformed (400: RFC 9112 2-5, including obs-fold, a bare CR, a
 * NUL or other control character in a value, whitespace after the version or before a
 * colon, a method with a
 * lower-case letter, a second Host, a Host that is not an authority (http1_host_ok)), for
 * an HTTP version other than 1.x (505; HTTP/1.2 and the like are HTTP/1.1), for a
 * Content-Length that is not a number (400), differs from an earlier one (400), or does not
 * fit 64 bits (413), and when its fields, query arguments and cookies would take more than
 * MAX_HEAD_ENTRY_BYTES of libmicrohttpd's pool (431, once the head has ended: a head that
 * is also too long is refused for its length). Empty lines before the request line are
 * skipped (RFC 9112 2.2). Transfer codings and the body are left to the proxy. */
struct head_screen head_screen(const char *data, size_t len, size_t max_head);

/* The same rules for the field lines alone, of a head whose request line has been read
 * already: data starts at the first field line, max_bytes is what the field lines (with the
 * blank line) may take, and entry_bytes what the request line's query arguments take
 * already (head_screen_query_entry_bytes). head_len and the refusals are as head_screen's,
 * a size refusal 431; method and target stay NULL. */
struct head_screen head_screen_fields(const char *data, size_t len, size_t max_bytes, size_t entry_bytes);

/* What a request target's query arguments take of libmicrohttpd's pool (an entry for each,
 * counted as it splits them: at the '&'s after the first '?'). */
size_t head_screen_query_entry_bytes(const char *target, size_t len);
/* What a Cookie value takes of it: its copy, and an entry for each cookie (split at ';' and
 * ','). */
size_t head_screen_cookie_entry_bytes(const char *value, size_t len);
