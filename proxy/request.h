/* One client request from the first byte to the last, on libmicrohttpd: the head screened
 * and normalised, the gate's admission, the store's check, the upstream (forward.c, or
 * websocket.c for a handshake) and the response, then metrics and the access log line.
 * request.c owns struct request (private to it) and the request_context, one per worker:
 * what every request of the worker shares, its live requests and a pool of freed ones. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <microhttpd.h>

struct event_base;
struct proxy_config;
struct limiter;
struct upstream_cap;
struct metrics;
struct forwarder;
struct ws_context;
struct snapshot;
struct snapshot_watch;
struct access_log;
struct rejection_log;
struct pool_trim;
struct request;

struct request_context {
    /* set by the worker before serving */
    struct event_base *base;
    const struct proxy_config *cfg;    /* replaced on a reload, between callbacks */
    struct limiter *limiter;
    struct upstream_cap *upstream_cap; /* upstream_max_inflight: the process's count */
    struct metrics *metrics;
    struct forwarder *forwarder;
    struct ws_context *ws;
    struct snapshot_watch *catalog;
    struct access_log *access_log;     /* NULL when off */
    struct rejection_log *rejection_warnings;
    struct pool_trim *pool_trim;       /* told of each head and each end (pool_trim.h) */
    const char *instance_id;           /* names this process's concurrency leases */
    int worker_index;
    void (*kick_mhd)(void *ctx);       /* gets libmicrohttpd to run soon: the way to move it
                                          after a resume from a curl or hiredis callback */
    void *kick_ctx;

    /* request.c's own */
    bool closing;                      /* past the drain: connections are cut, not suspended */
    unsigned active;                   /* live requests */
    uint64_t lease_seq;
    struct snapshot *snap;             /* the catalog requests are served from */
    uint64_t snap_generation;
    LIST_HEAD(, request) live;
    SLIST_HEAD(, request) pool;        /* freed requests kept for reuse */
    unsigned n_pool;
};

/* Readies ctx's own part (the worker's fields are set before or after). */
void request_context_init(struct request_context *ctx);

/* The snapshot requests are served from, refreshed when the watcher published a new one. */
struct snapshot *request_context_snapshot(struct request_context *ctx);

/* Past the drain: every live request's transfer stops and its suspended connection
 * resumes, so libmicrohttpd can end them as it stops. */
void request_context_close(struct request_context *ctx);

/* Frees what ctx keeps (the pool of requests, the snapshot); no request may be live. */
void request_context_destroy(struct request_context *ctx);

/* libmicrohttpd callbacks, registered by the worker with the request_context as cls. */
/* The first thing MHD calls for a request (its URI log callback): makes the request,
 * keeping the target exactly as sent. */
void *request_begin(void *cls, const char *uri, struct MHD_Connection *conn);
enum MHD_Result request_handle(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **req_cls);
void request_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                       enum MHD_RequestTerminationCode toe);
