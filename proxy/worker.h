/* A worker is one event-loop thread: its own libevent base, libmicrohttpd daemon (external
 * epoll mode, sharing the listening port with the other workers through SO_REUSEPORT) and
 * limiter connection, and one context per part of the request path: the intake
 * (intake.c), the requests (request.c), the forwarder (forward.c) and the tunnels
 * (websocket.c). worker.c owns the loop, accepting, the daemon and the start, reload and
 * stop of all of them. Nothing is shared between workers but the catalog watcher and the
 * memory store, which are thread-safe.
 *
 * Accepting: each worker accepts on its own SO_REUSEPORT socket and hands every connection
 * to libmicrohttpd (MHD_add_connection; the daemon has no listening socket), holding at
 * most its share of the process's descriptors (two per connection: the upstream side counts
 * too). It stops watching its socket at that share and watches it again when a connection
 * closes; out of descriptors, it retries every 25 ms only while that lasts, and at once
 * when one of its connections closes. Waiting clients stay in the backlog meanwhile.
 */
#pragma once
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

#include <sys/socket.h>
#include <sys/time.h>

#include "proxy/request.h"

struct event_base;
struct event;
struct MHD_Daemon;
struct limiter;
struct memory_store;
struct snapshot;
struct snapshot_watch;
struct proxy_config;
struct intake;
struct forwarder;
struct ws_context;
struct access_log;
struct log_throttle;
struct rejection_log;
struct store_log;
struct pool_trim;
struct upstream_cap;

/* What every worker shares, owned by main. */
struct proxy_shared {
    const struct proxy_config *cfg;
    struct snapshot_watch *catalog;
    struct memory_store *memory;     /* the memory store; with redis, the local fallback's */
    struct upstream_cap *upstream_cap; /* [proxy] upstream_max_inflight, one count per process */
    struct access_log *access_log;   /* NULL when off */
    struct log_throttle *rejection_warnings; /* one line per user and limit per 10 s */
    struct store_log *store_log;     /* the store's faults on stderr */
    char instance_id[24];            /* names this process's concurrency leases */
    struct sockaddr_storage listen_addr; /* [proxy] listen, a host name resolved at start */
};

struct worker {
    int index;
    const struct proxy_shared *shared;
    const struct proxy_config *cfg;
    pthread_t thread;
    bool thread_started;            /* worker_start succeeded: there is a thread to join */

    struct event_base *base;
    struct MHD_Daemon *daemon;
    struct event *mhd_io;           /* MHD's epoll fd readable */
    struct event *mhd_timer;        /* MHD's own timeouts (MHD_get_timeout) */
    struct event *mhd_kick;         /* "run MHD soon": apart, so a timeout set never cancels it */

    /* Connections are accepted here and handed to MHD (MHD_add_connection): MHD 0.9.75,
     * driven from outside, leaves connections in the backlog with nothing to wake it when
     * it stops accepting (at its limit, or out of descriptors). */
    int listen_fd;                  /* SO_REUSEPORT, one per worker; -1 once stopped */
    struct event *accept_event;     /* listen_fd readable, while accepting */
    struct event *accept_retry;     /* armed only while accept() fails for lack of descriptors */
    bool serving;                   /* past the start (the limiter answered or STORE_WAIT_MS) */
    bool accepting;                 /* accept_event added */
    bool out_of_fds;                /* the last accept() failed for lack of descriptors */
    /* Open MHD connections (upgraded ones included), counted from MHD's notifications:
     * MHD_DAEMON_INFO_CURRENT_CONNECTIONS still counts a connection when its CLOSED
     * notification comes, which is when accepting resumes. */
    unsigned connections;
    unsigned connection_limit;      /* this worker's share of RLIMIT_NOFILE */
    struct event *stop_event;       /* activated from the main thread */
    struct event *drain_timer;
    struct event *reload_event;     /* activated from the main thread */
    struct event *start_timer;      /* waits for the limiter before serving */
    int64_t start_deadline_ms;
    const struct proxy_config *next_cfg;
    sem_t *reload_done;

    struct limiter *limiter;
    struct metrics *metrics;

    struct intake *intake;          /* connections waiting for their first head */
    struct request_context requests;
    struct forwarder *forwarder;    /* curl transfers */
    struct ws_context *ws;          /* WebSocket tunnels */
    struct pool_trim *pool_trim;    /* idle connections' MHD pools given back (pool_trim.c) */
    struct rejection_log *rejections; /* the rejection warnings' timer on this loop */

    bool stopping;
    int64_t drain_deadline_ms;
};

/* Creates the worker's loop, daemon, curl multi and limiter (not yet running).
 * Returns 0, or a negative errno with a reason in err. */
int worker_init(struct worker *w, int index, const struct proxy_shared *shared, char *err, size_t errlen);

/* Runs the loop on a new thread. Returns 0 or a negative errno. */
int worker_start(struct worker *w);

/* Asks the worker to stop accepting, finish in-flight requests (up to drain_ms) and
 * leave its loop. Thread-safe; returns at once. */
void worker_request_stop(struct worker *w);

/* Hands the worker a new configuration: it switches on its own loop, between callbacks,
 * then posts `done`. Thread-safe; returns at once. cfg must live until done is posted. */
void worker_reload(struct worker *w, const struct proxy_config *cfg, sem_t *done);

/* Joins the thread and frees everything worker_init made. */
void worker_join_and_destroy(struct worker *w);


