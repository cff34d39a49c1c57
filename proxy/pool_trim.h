/* Gives back the memory libmicrohttpd leaves resident, all zeros, in a connection's pool.
 * libmicrohttpd 0.9.75 maps each connection's pool (FORWARD_CLIENT_POOL_BYTES, forward.h)
 * with mmap, so pages it never writes cost nothing; but it zeroes the whole pool after
 * every request, so an idle kept-alive connection would hold all of it resident, and an
 * upgraded one (a WebSocket tunnel) keeps its pool for the tunnel's life. The pages of a
 * pool that are still all zeros are given back with MADV_DONTNEED: private anonymous
 * memory so dropped reads back as zeros, so nothing anyone can see changes, and a later
 * write faults in a fresh page. That happens once a connection has been idle for
 * POOL_TRIM_IDLE_MS after a request. An upgraded connection gives back all of its pool at
 * once, written pages too: libmicrohttpd 0.9.75 without TLS reads nothing in an upgraded
 * connection's pool again until it unmaps it, and the proxy has copied what it keeps (the
 * bytes read past the handshake, the method for the access line) by then. That halves an
 * idle tunnel's memory (two written pages of eight KiB).
 *
 * Where a pool starts is learnt from the connection's first request: the intake drops the
 * empty lines before a first request line, so libmicrohttpd has the head, and the method
 * it hands over, at the pool's start, which an mmap puts on a page boundary. A connection
 * whose first method is not on a page boundary is left alone. Everything here runs on the
 * worker's thread, which alone touches its connections' pools; the timer runs between
 * MHD_run calls, so no pool it looks at is being freed (MHD frees a pool, then notifies
 * CLOSED, within one MHD_run). */
#pragma once
#include <stdbool.h>

#include <microhttpd.h>

struct event_base;

/* How long a connection waits, idle after a request, before its pool is trimmed: a busy
 * one is not trimmed (and faulted in again) between its requests. */
#define POOL_TRIM_IDLE_MS 1000

struct client_pool; /* one per MHD connection, in its socket context */

/* A worker's trimming: its connections idle since a request, and the timer. */
struct pool_trim;

/* NULL when out of memory. */
struct pool_trim *pool_trim_new(struct event_base *base);
/* After MHD_stop_daemon: every connection has closed by then. */
void pool_trim_free(struct pool_trim *t);

/* MHD's NOTIFY_CONNECTION STARTED and CLOSED; socket_context is MHD's slot for it. */
void pool_trim_connection_started(struct pool_trim *t, void **socket_context);
void pool_trim_connection_closed(struct pool_trim *t, void **socket_context);

/* A request head has arrived on conn; method is libmicrohttpd's pointer to it. */
void pool_trim_request_head(struct pool_trim *t, struct MHD_Connection *conn, const char *method);
/* Where conn's pool starts, learnt from its first head (whatever the page alignment), in
 * *pool, or NULL before that: every later head of conn is read from there too
 * (later_head.h). False when conn is not followed (memory ran out at its start). */
bool pool_trim_pool_start(struct MHD_Connection *conn, const char **pool);
/* A request on conn has ended (MHD's NOTIFY_COMPLETED). */
void pool_trim_request_done(struct pool_trim *t, struct MHD_Connection *conn);
/* conn became a tunnel, and what it needs of its pool is copied: all of the pool is given
 * back now, and no more is trimmed. */
void pool_trim_upgraded(struct pool_trim *t, struct MHD_Connection *conn);
