/* How a WebSocket tunnel ends: the close handshake the proxy starts (a message limit, a bad
 * frame, the idle timeout, a drain), the flush of what is queued, and the end itself
 * (sockets closed, the slot given back, the owner told). The relay in websocket.c calls in
 * here; nothing here calls the relay. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

struct event;
struct evbuffer;
struct ws_tunnel;

/* The tunnel's timer (the idle timeout while open, the flush while closing), or NULL when
 * memory runs out. The caller frees it with event_free. */
struct event *ws_close_timer_create(struct ws_tunnel *t);

/* Traffic passed: the idle timeout starts again (websocket_idle_timeout_ms; 0 is off). */
void ws_close_idle_arm(struct ws_tunnel *t);

/* The proxy ends an open tunnel: the slot goes back at once, and each side gets a close
 * frame (code and reason, the reason cut at 123 bytes) after what is already queued for it
 * (the client's after the upstream's frame in flight, if any), whose answer the proxy waits
 * for briefly. mid_frame_upstream: what went to the upstream
 * ends inside a frame, so it gets no close frame, only a TCP close after what is queued. */
void ws_close_initiate(struct ws_tunnel *t, uint16_t code, const char *reason, bool mid_frame_upstream);

/* Either side ended (or the proxy did): stop reading, and end the tunnel once what is
 * queued has been written, or after a short flush time. */
void ws_close_shutdown(struct ws_tunnel *t);

/* A side's output drained: a closing tunnel may be done. */
void ws_close_after_flush(struct ws_tunnel *t);

/* The client's connection ended (EOF or an error): nothing more can reach it. */
void ws_close_client_gone(struct ws_tunnel *t);

/* The upstream's connection ended (EOF or an error): nothing more can reach it. */
void ws_close_upstream_gone(struct ws_tunnel *t);

/* What the relay moves from the upstream toward the client, all of in: followed frame by
 * frame, so that a close frame of ours goes between two of the upstream's frames. */
void ws_close_follow_upstream(struct ws_tunnel *t, struct evbuffer *in);

/* The upstream sent something while the tunnel closes (its answer to our close frame, or
 * frames that crossed it): the rest of its frame in flight when we closed goes to the
 * client, followed by our close frame; nothing after. */
void ws_close_upstream_read(struct ws_tunnel *t);

/* Ends the tunnel now: sockets closed, slot given back, the owner let go (which may free
 * the tunnel). Does nothing on a tunnel already ended. */
void ws_close_finish(struct ws_tunnel *t);
