/* A worker is one event-loop thread: its own libevent base, libmicrohttpd daemon (external
 * epoll mode, sharing the listening port with the other workers through SO_REUSEPORT),
 * curl multi handle and limiter connection. Nothing is shared between workers but the
 * catalog watcher and the memory store, which are thread-safe. */
#pragma once
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

#include <curl/curl.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/time.h>

struct event_base;
struct event;
struct MHD_Daemon;
struct limiter;
struct memory_store;
struct snapshot;
struct snapshot_watch;
struct proxy_config;
struct request;
struct ws_upstreams;
struct upstream_tls;
struct intake_conn;
struct access_log;
struct log_throttle;
struct pool_trim;

/* What every worker shares, owned by main. */
struct proxy_shared {
    const struct proxy_config *cfg;
    struct snapshot_watch *catalog;
    struct memory_store *memory;     /* NULL with the redis store */
    struct access_log *access_log;   /* NULL when off */
    struct log_throttle *rejection_warnings; /* one line per user and limit per 10 s */
    char instance_id[24];            /* names this process's concurrency leases */
    bool log_warnings;               /* [log] level is debug, info or warn */
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
    LIST_HEAD(, intake_conn) intake; /* connections waiting for their first head (intake.c) */
    unsigned intake_waiting;
    unsigned connection_limit;      /* this worker's share of RLIMIT_NOFILE */
    struct event *stop_event;       /* activated from the main thread */
    struct event *drain_timer;
    struct event *reload_event;     /* activated from the main thread */
    struct event *start_timer;      /* waits for the limiter before serving */
    int64_t start_deadline_ms;
    const struct proxy_config *next_cfg;
    sem_t *reload_done;

    CURLM *multi;
    struct event *curl_timer;
    CURLSH *curl_share;             /* DNS cache for the upstream names */
    char curl_error[CURL_ERROR_SIZE]; /* every easy handle's CURLOPT_ERRORBUFFER (forward.c) */
    CURL *easy_pool[256];           /* reset handles kept for reuse: no per-request setup */
    size_t n_easy_pool;
    unsigned upstream_next;         /* round robin over cfg->upstreams */
    struct ws_upstreams *ws_upstreams; /* cfg's upstreams resolved for WebSocket tunnels (websocket.c) */
    struct upstream_tls *ws_tls;    /* TLS settings of tunnels to https upstreams (websocket.c) */
    uint64_t lease_seq;

    struct limiter *limiter;
    struct metrics *metrics;

    struct snapshot *snap;          /* the catalog this worker serves from */
    uint64_t snap_generation;

    bool stopping;
    bool closing;                   /* past the drain: connections are cut, not suspended */
    int64_t drain_deadline_ms;
    unsigned active_requests;
    LIST_HEAD(, request) requests;  /* every live request, for shutdown */
    SLIST_HEAD(, request) request_pool; /* freed requests kept for reuse (request.c) */
    struct pool_trim *pool_trim;    /* idle connections' MHD pools given back (pool_trim.c) */
    unsigned n_request_pool;
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

/* Gives MHD a client connection whose first head has passed the intake. */
void worker_hand_to_mhd(struct worker *w, int fd, const struct sockaddr *addr, socklen_t addrlen);

/* A client connection of this worker has closed: room to accept again. */
void worker_connection_closed(struct worker *w);

/* Makes the loop call MHD_run soon: the way to get MHD moving after a connection was
 * resumed from a curl or hiredis callback, where calling MHD_run is not allowed. */
void worker_kick_mhd(struct worker *w);

/* The snapshot the worker serves from, refreshed when the watcher published a new one. */
struct snapshot *worker_snapshot(struct worker *w);
