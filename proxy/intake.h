/* A newly accepted client connection waits here until its first request head has come in
 * and passed head_screen; only then does libmicrohttpd get the socket. The head is read
 * with MSG_PEEK, so libmicrohttpd reads the same bytes again. A refused head is answered
 * here with a JSON error and the connection closed after a short lingering read, so the
 * client sees the answer rather than a reset.
 *
 * Only the first request of a connection passes here: later ones on a kept-alive
 * connection are libmicrohttpd's (the proxy's own checks in request.c still apply to
 * them). Most connections send their head with the connect, and cost one recv() more. */
#pragma once
#include <sys/socket.h>

struct worker;
struct intake_conn;

/* Takes a connection just accepted. It goes to MHD (worker_hand_to_mhd) at once when its
 * head is already there and acceptable, else waits on the worker's loop. */
void intake_take(struct worker *w, int fd, const struct sockaddr_storage *addr, socklen_t addrlen);

/* Closes every connection still waiting (stopping, or freeing the worker). */
void intake_close_all(struct worker *w);
