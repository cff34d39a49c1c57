/* The rest of a later request head that libmicrohttpd has only begun to read: its request
 * line (and maybe some field lines) are in libmicrohttpd's pool, the rest is still to come.
 * The connection is suspended meanwhile, so libmicrohttpd reads nothing more; the rest is
 * peeked at on the socket as it arrives (MSG_PEEK: libmicrohttpd reads the same bytes once
 * resumed) and screened with what the pool holds, as the intake screens a first head. */
#pragma once
#include <stddef.h>

#include "proxy/head_screen.h"

struct event_base;
struct head_wait;

/* What the wait tells its owner, once: fields is head_screen_fields over the field lines
 * (the bytes in the pool, then the socket's), acceptable or refused; NULL when the client
 * left, or has not sent the rest HEAD_WAIT_MS after the wait began. The owner may free the
 * wait from here. */
typedef void head_wait_done_fn(void *owner, const struct head_screen *fields);

/* Waits on fd for the rest of a head whose first field-line bytes are prefix (prefix_len
 * bytes, in libmicrohttpd's pool, left as they are until done), with head_screen_fields'
 * max_bytes and entry_bytes. NULL when memory runs out. */
struct head_wait *head_wait_start(struct event_base *base, int fd, const char *prefix, size_t prefix_len,
                                  size_t max_bytes, size_t entry_bytes, head_wait_done_fn *done, void *owner);

/* Stops waiting (NULL is fine). */
void head_wait_free(struct head_wait *w);
