/* How a WebSocket tunnel ends: the close handshake the proxy starts (a message limit, a bad
 * frame, the idle timeout, a drain), the flush of what is queued, and the end itself
 * (sockets closed, the slot given back, the owner told). The relay in websocket.c calls in
 * here; nothing here calls the relay.
 *
 * The codes: 1008 over the message limit, 1002 for a bad client frame, 1001 for the idle
 * timeout and for a drain. Each side gets a close frame with the code and reason: the
 * client's unmasked, the upstream's masked with a key from RAND_bytes (RFC 6455 5.3: toward
 * the upstream the proxy is the client); the same code goes both ways, so the upstream
 * learns why the client's session ended. Each frame goes after what was queued for its
 * side, so whole frames that came before a bad one in the same read reach the upstream
 * first; the refused frame and what follows do not. The slot goes back at once. Then the
 * proxy waits for each side's answer (RFC 6455 7.1.1) under one timer of CLOSE_FLUSH_MS (2
 * s), never blocking: the client's close or EOF (it half-closes toward the client once its
 * frame is out) and the upstream's EOF; what either sends meanwhile goes nowhere (5.5.1). A
 * close frame must go between two frames: the upstream's frames toward the client are
 * followed as they pass (ws_frame_bounds, heads only), and when the proxy closes in the
 * middle of one, the rest of that frame is relayed first. The idle timeout and a drain can
 * come in the middle of a client frame too: the upstream then gets what was queued and a
 * TCP close.
 *
 * An upstream that closes before the frame it was sending ends leaves the client a TCP
 * close.
 */
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
