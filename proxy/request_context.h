/* What every request of a worker shares (one per worker): the worker's parts the request
 * path uses, its live requests and a pool of freed ones. request.h's functions run it.
 *
 * A finished request goes back to the pool (up to 256) instead of to free, with its
 * scratch's first 2 KiB chunk kept (scratch.h); under AddressSanitizer a pooled request and
 * unused scratch are poisoned (asan_poison.h), so a use after the end is still reported.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct event_base;
struct timeval;
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
    const struct timeval *watch_delay; /* client_watch_delay_for(base) */
    const char *instance_id;           /* names this process's concurrency leases */
    int worker_index;
    void (*kick_mhd)(void *ctx);       /* gets libmicrohttpd to run soon: the way to move it
                                          after a resume from a curl or hiredis callback */
    void *kick_ctx;

    /* the request files' own (request.c, request_slots.c) */
    bool closing;                      /* past the drain: connections are cut, not suspended */
    unsigned active;                   /* live requests */
    uint64_t lease_seq;
    struct snapshot *snap;             /* the catalog requests are served from */
    uint64_t snap_generation;
    LIST_HEAD(, request) live;
    SLIST_HEAD(, request) pool;        /* freed requests kept for reuse */
    unsigned n_pool;
};
