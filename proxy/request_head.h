/* A request's head as libmicrohttpd hands it to request.c, screened like a connection's
 * first head (head_screen.h) whichever head of its connection it is.
 *
 * The first head was screened by the intake before libmicrohttpd read it. A later head on a
 * kept-alive connection is screened in libmicrohttpd's pool when its URI log callback runs,
 * before it parses the field lines (later_head.h); when only part of the head has come, the
 * connection waits suspended for the rest (head_wait.h). A later head refused there is
 * answered on the socket (JSON as the first head's answer, or a problem body where
 * libmicrohttpd used to answer in HTML) with Connection: close and the sending side shut:
 * what libmicrohttpd then does with it reaches no one. Once libmicrohttpd has parsed a head,
 * request_head_check finds what the screen leaves to the proxy (transfer codings, the body's
 * size) and that libmicrohttpd parsed what was screened.
 *
 * Left to libmicrohttpd: a later head's request line is parsed by it before any callback of
 * the proxy runs, so what it refuses there it answers itself (a version other than
 * HTTP/1.x, a line without a space, a request line longer than its pool). The pool's 20 KiB
 * for entries holds beside a 16 KiB head; body bytes that came with the head and fill
 * libmicrohttpd's 18 KiB read buffer leave it 18 KiB, so a head with 290 to 320 entries and
 * a body in the same packets can still meet its HTML 431.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "proxy/later_head.h"

struct event_base;
struct head_wait;
struct scratch;

struct request_head {
    struct later_head later;
    struct head_wait *wait;  /* the rest of a split later head, awaited */
    bool is_later;           /* not the first head of its connection */
    bool unscreened;         /* not known to have been screened raw (out of memory) */
    unsigned refused_status; /* refused before libmicrohttpd parsed it, and answered */
    const char *method;      /* then: the method (in the request's scratch), NULL if unknown */
};

enum request_head_step {
    REQUEST_HEAD_GO,      /* libmicrohttpd may go on with it */
    REQUEST_HEAD_REFUSED, /* answered on the socket (refused_status, method) */
    REQUEST_HEAD_WAIT,    /* the caller suspends the connection until rest_in */
};

/* libmicrohttpd's URI log callback for the request whose head h is: screens a later head.
 * On REQUEST_HEAD_WAIT, rest_in(owner) is called once the rest came (or the client left or
 * took too long): the caller resumes the connection then; h says whether it was refused
 * meanwhile (refused_status). scratch holds the refused method's copy. */
enum request_head_step request_head_begin(struct request_head *h, struct MHD_Connection *conn, const char *uri,
                                          struct event_base *base, struct scratch *scratch,
                                          void (*rest_in)(void *owner), void *owner);

/* What request_handle's first call does with a head libmicrohttpd parsed. */
struct head_verdict {
    unsigned status;        /* 0: go on; else answer it with error_code (the connection
                               closes after it) */
    const char *error_code;
    const char *decision;   /* the access log's decision for the refusal, or NULL */
    size_t fields;          /* the head's fields */
    size_t pool_bytes;      /* what the head takes of libmicrohttpd's pool */
    bool expects_body;      /* a Content-Length above 0, or chunked */
};

/* Checks a head libmicrohttpd parsed (method and version are its request line's, raw_uri
 * the target as sent): the method and the target, the size, one Host, Content-Length,
 * Host present in HTTP/1.1 and later (400, RFC 9112 3.2), Transfer-Encoding
 * (transfer_coding.h: 400 unless chunked is the last coding and read as libmicrohttpd reads
 * it, 501 for other codings before it), 413 past max_body_bytes, and for a later head that
 * libmicrohttpd parsed the bytes that were screened. */
void request_head_check(const struct request_head *h, struct MHD_Connection *conn, const char *method,
                        const char *version, const char *raw_uri, int64_t max_body_bytes,
                        struct head_verdict *out);

/* Stops a wait still under way (the request ends). */
void request_head_free(struct request_head *h);
