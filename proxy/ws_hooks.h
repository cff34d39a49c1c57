/* What a WebSocket tunnel tells the request that started it (its owner). Apart from
 * websocket.h so that the files running a tunnel (websocket.c, ws_close.c) share it. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include <microhttpd.h>

/* What the tunnel tells its owner. */
struct ws_hooks {
    /* The handshake ended with the upstream's answer other than 101 (resp, whose body is
     * body_bytes long): the owner gives the slots back, then sends it. Takes resp. */
    void (*answer)(void *owner, unsigned status, struct MHD_Response *resp, uint64_t body_bytes);
    /* The handshake failed on our side or the upstream's (status 502 or 504). */
    void (*fail)(void *owner, unsigned status, const char *error_code);
    /* The upstream said 101: the owner queues resp. From now until `closed` the tunnel
     * holds the owner. Takes resp. */
    void (*switching)(void *owner, struct MHD_Response *resp);
    /* The tunnel gives back the concurrency slots (idempotent on the owner's side). */
    void (*release_slots)(void *owner);
    /* The tunnel is over: the hold taken at `switching` goes (the tunnel may be freed). */
    void (*closed)(void *owner);
    /* True when the client left (or has its answer) while the upstream answered: nothing
     * is relayed then. */
    bool (*abandoned)(void *owner);
};
