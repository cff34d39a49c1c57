/* A later request head on a kept-alive connection, screened by head_screen's rules where
 * libmicrohttpd 0.9.75 has it: in its connection pool, when its URI log callback runs.
 *
 * The first head of a connection is screened before libmicrohttpd reads it (intake.c). A
 * later one is read by libmicrohttpd, which cuts a field value at a NUL, joins obs-folded
 * lines, takes an empty field name, and answers some heads itself in HTML; it calls the URI
 * log callback once it has parsed the request line and before it parses a single field
 * line. What that relies on, all of libmicrohttpd 0.9.75's pool (memorypool.c,
 * connection.c):
 *  - after a request, the pool is zeroed but for the bytes already read past it, which move
 *    to the pool's start, where the next request head is read (the first head of the
 *    connection was there too: pool_trim_pool_start);
 *  - the request line is parsed in place: the space after the method, the space before the
 *    version and the line's CR and LF are overwritten with NULs, the rest is as received;
 *  - the field lines after it are untouched until the callback returns, and past the last
 *    byte received the pool is all zeros (nothing is allocated from its end before the
 *    callback).
 * So a NUL in the received bytes is the client's when non-zero bytes follow it, and the
 * end of what was received when only zeros do. Pure: no I/O; it reads the pool only. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "proxy/head_screen.h"

enum later_head_outcome {
    LATER_HEAD_ACCEPTABLE, /* the whole head is in the pool and passes */
    LATER_HEAD_REFUSED,    /* screen says why */
    LATER_HEAD_INCOMPLETE, /* fine so far: the rest of the field lines is still to come */
};

struct later_head {
    enum later_head_outcome outcome;
    struct head_screen screen; /* REFUSED: status, error_code and fault */
    const char *method;        /* in the pool, method_len bytes (for the access log); NULL if
                                  not found */
    size_t method_len;
    const char *fields;        /* where the field lines start in the pool */
    size_t line_bytes;         /* what comes before them: the request line, empty lines */
    size_t received;           /* how many bytes from `fields` on had been read */
    size_t max_fields;         /* what the field lines may take: MAX_HEAD_BYTES less the line */
    size_t entry_bytes;        /* what the query's arguments take of the pool */
    const char *query;         /* the target's '?' in the pool; NULL: none */
    /* ACCEPTABLE: one past the head's blank line. When the request line was followed by two
     * NULs and nothing else yet, it ended with CR LF or with an LF before what is still to
     * come: the fields start at `fields` or one byte before, and so does the end. */
    const char *end;
    bool end_may_be_one_less;
};

/* Screens the head whose request line libmicrohttpd has just parsed: uri is the target it
 * hands its URI log callback, pool the start of the connection's pool of pool_size bytes.
 * Refused: a NUL in the method or target (400), a request line over MAX_HEAD_BYTES (414),
 * and whatever head_screen_fields refuses in the field lines (the query's arguments
 * counted), a NUL with bytes after it included. */
void later_head_screen(const char *pool, size_t pool_size, const char *uri, struct later_head *out);

/* Keeps libmicrohttpd from parsing the query arguments of a head that is refused, or will be
 * for them: it parses them right after the URI log callback, and too many for its pool leave
 * the connection hanging without an answer. Cuts the query in the pool (libmicrohttpd's own
 * buffer, writable; the proxy forwards the target it copied, never libmicrohttpd's). */
void later_head_drop_query(const struct later_head *lh);

/* An INCOMPLETE head's field lines are all in: `fields` is head_screen_fields over the
 * bytes in the pool and the rest, which libmicrohttpd will append to them. Makes lh
 * ACCEPTABLE or REFUSED. */
void later_head_complete(struct later_head *lh, const struct head_screen *fields);

/* After libmicrohttpd parsed the head: true when it ended where the screen found its end
 * (method is its pointer to the request line, header_size its head's length). It does not
 * when it read a NUL the screen could not see (the last byte of a read, with only zeros
 * after it) or took a line the screen did not (an LF then a NUL): that head is refused. */
bool later_head_parsed_alike(const struct later_head *lh, const char *method, size_t header_size);

