/* A worker's thread and everything on its loop (worker.h): the loop, its SO_REUSEPORT
 * socket, the libmicrohttpd daemon in external epoll mode, the limiter and the contexts of
 * the request path. Only this thread touches them, except the reload and stop requests,
 * which reach it through the loop. libmicrohttpd is run from the loop's own turn
 * (kick_mhd), never from inside a curl or hiredis callback. */
#include "proxy/worker.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <microhttpd.h>

#include "proxy/client_watch.h"
#include "proxy/config.h"
#include "proxy/forward.h"
#include "proxy/intake.h"
#include "proxy/log.h"
#include "proxy/metrics.h"
#include "proxy/pool_trim.h"
#include "proxy/rejection_log.h"
#include "proxy/request.h"
#include "proxy/store_log.h"
#include "proxy/websocket.h"
#include "store/clock.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"


/* How long SIGTERM waits for in-flight requests. */
#define DRAIN_MS 10000

static void schedule_mhd_timer(struct worker *w)
{
    MHD_UNSIGNED_LONG_LONG timeout_ms;
    if (MHD_get_timeout(w->daemon, &timeout_ms) == MHD_YES) {
        if (timeout_ms > 60000)
            timeout_ms = 60000;
        struct timeval tv = store_ms_to_timeval((int64_t)timeout_ms);
        evtimer_add(w->mhd_timer, &tv);
    } else {
        evtimer_del(w->mhd_timer);
    }
}

static void run_mhd(struct worker *w)
{
    /* A kick asked for before this run is served by it; one asked for during it (from
     * an MHD callback) stays pending. */
    evtimer_del(w->mhd_kick);
    MHD_run(w->daemon);
    schedule_mhd_timer(w);
}

static void on_mhd_io(evutil_socket_t fd, short what, void *arg)
{
    run_mhd(arg);
}

static void on_mhd_timer(evutil_socket_t fd, short what, void *arg)
{
    run_mhd(arg);
}

/* Makes the loop call MHD_run soon: the way to get MHD moving after a connection was
 * resumed from a curl or hiredis callback, where calling MHD_run is not allowed. */
static void kick_mhd(void *arg)
{
    struct worker *w = arg;
    /* Runs MHD from the loop on its next turn, never from inside a curl or hiredis
     * callback. Not mhd_timer: run_mhd re-arms that one from MHD_get_timeout after every
     * run (or deletes it when MHD has no timeout), which would drop a kick asked for from
     * inside that run. */
    static const struct timeval now = { 0, 0 };
    evtimer_add(w->mhd_kick, &now);
}

/* ---- accepting ----------------------------------------------------------------------
 * The listening socket is ours and every accepted connection goes to MHD with
 * MHD_add_connection. libmicrohttpd 0.9.75 in external epoll mode, when it stops accepting
 * (at MHD_OPTION_CONNECTION_LIMIT, or after accept() failed with EMFILE), takes its
 * listening socket out of its epoll set and puts it back only at the start of a later
 * MHD_run; nothing in its epoll set wakes the loop for that run, so clients stayed in the
 * backlog of an idle worker. And an accept() that fails for lack of descriptors while it
 * has no connection leaves the socket in the set, level-triggered: a busy loop.
 *
 * Here: at the limit, stop watching the socket and watch it again when a connection
 * closes; out of descriptors, stop watching it and try again every ACCEPT_RETRY_MS (the
 * descriptors may come back from another worker, curl or Redis, which tell us nothing),
 * and at once when one of our connections closes. Waiting clients stay in the backlog
 * meanwhile and are served as soon as there is room. */

/* At most this many accept()s per wake-up, so one worker's loop also serves the
 * connections it has. The socket is level-triggered: the rest come on the next turn. */
#define ACCEPT_BATCH 32
#define ACCEPT_RETRY_MS 25

static void accept_watch(struct worker *w, bool on)
{
    if (on && !w->accepting && w->serving && !w->stopping && w->listen_fd >= 0)
        w->accepting = event_add(w->accept_event, NULL) == 0;
    else if (!on && w->accepting) {
        event_del(w->accept_event);
        w->accepting = false;
    }
}

static bool accept_error_is_transient(int err)
{
    /* The connection in front of the queue went away, or a signal: the next one may be
     * fine (accept(2): network errors are passed on as errors of accept). */
    switch (err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case ETIMEDOUT:
        return true;
    default:
        return false;
    }
}

static void accept_connections(struct worker *w)
{
    if (w->stopping || w->listen_fd < 0)
        return;
    evtimer_del(w->accept_retry);
    unsigned accepted = 0;
    for (;;) {
        if (w->connections + intake_waiting(w->intake) >= w->connection_limit) {
            accept_watch(w, false); /* on_connection watches again when one closes */
            break;
        }
        if (accepted == ACCEPT_BATCH) {
            accept_watch(w, true); /* level-triggered: the rest on the loop's next turn */
            break;
        }
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(w->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK) {
                w->out_of_fds = false;
                accept_watch(w, true);
                break;
            }
            if (accept_error_is_transient(err))
                continue;
            /* EMFILE, ENFILE, ENOBUFS, ENOMEM (or anything unexpected): the client stays in
               the backlog. Never retried in a loop: a timer, or a connection closing. */
            if (!w->out_of_fds)
                log_say(LOG_LEVEL_WARN, "worker %d: cannot accept (%s) with %u connections open; "
                        "clients wait until descriptors free up", w->index, strerror(err), w->connections);
            w->out_of_fds = true;
            accept_watch(w, false);
            struct timeval retry = store_ms_to_timeval(ACCEPT_RETRY_MS);
            evtimer_add(w->accept_retry, &retry);
            break;
        }
        w->out_of_fds = false;
        accepted++;
        intake_take(w->intake, fd, &ss, len);
    }
}

static void connection_closed(void *arg);

static const char *current_key_query(void *arg)
{
    const struct worker *w = arg;
    return w->cfg->key_query;
}

/* A client connection whose first head has passed the intake goes to MHD. */
static void hand_to_mhd(void *arg, int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    struct worker *w = arg;
    /* Its NOTIFY_STARTED callback counts the connection before this returns. When MHD
       cannot take it (out of memory) it closes the socket itself: room again. */
    if (MHD_add_connection(w->daemon, fd, addr, addrlen) != MHD_YES)
        connection_closed(w);
    kick_mhd(w);
}

/* A client connection of this worker has closed: room to accept again. */
static void connection_closed(void *arg)
{
    struct worker *w = arg;
    /* Room again: accept on the loop's next turn (never from inside MHD_run, where
     * MHD_add_connection must not be called). A descriptor is free now too. */
    if (w->out_of_fds) {
        static const struct timeval now = { 0, 0 };
        if (!w->stopping && w->listen_fd >= 0)
            evtimer_add(w->accept_retry, &now);
    } else if (w->connections + intake_waiting(w->intake) < w->connection_limit) {
        accept_watch(w, true);
    }
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    accept_connections(arg);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct worker *w = cls;
    metrics_add_connections(w->metrics, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        w->connections++;
        pool_trim_connection_started(w->pool_trim, socket_context);
        return;
    }
    pool_trim_connection_closed(w->pool_trim, socket_context);
    if (w->connections > 0)
        w->connections--;
    connection_closed(w);
}

static void on_leases_released(void *arg)
{
    struct worker *w = arg;
    event_base_loopbreak(w->base);
}

static void on_drain_timer(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    if (w->requests.active == 0 || store_mono_ms() >= w->drain_deadline_ms) {
        /* Whatever is still held (requests cut off by the deadline) goes back in one call. */
        limiter_release_all(w->limiter, on_leases_released, w);
        return;
    }
    static const struct timeval tick = { 0, 50 * 1000 };
    evtimer_add(w->drain_timer, &tick);
}

static void on_start_timer(evutil_socket_t fd, short what, void *arg);

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    if (w->stopping)
        return;
    w->stopping = true;
    /* Stop accepting; the other workers' sockets keep the port open until they stop too. */
    accept_watch(w, false);
    evtimer_del(w->accept_retry);
    if (w->listen_fd >= 0) {
        close(w->listen_fd);
        w->listen_fd = -1;
    }
    w->drain_deadline_ms = store_mono_ms() + DRAIN_MS;
    intake_close_all(w->intake); /* no request of theirs was accepted yet */
    ws_close_all(w->ws);
    on_drain_timer(-1, 0, w);
}

static struct local_fallback_options local_fallback_of(const struct proxy_config *cfg)
{
    return (struct local_fallback_options){ .rate = cfg->rate_on_store_error,
                                            .concurrency = cfg->concurrency_on_store_error,
                                            .share = cfg->local_share };
}

static void on_reload(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    w->cfg = w->next_cfg;
    w->requests.cfg = w->cfg;
    struct local_fallback_options fallback = local_fallback_of(w->cfg);
    limiter_local_fallback_set(w->limiter, &fallback);
    forwarder_set_config(w->forwarder, w->cfg);
    char resolve_err[256] = "";
    if (ws_context_reload(w->ws, w->cfg, resolve_err, sizeof(resolve_err)) == 0 && resolve_err[0] != '\0' &&
        w->index == 0)
        log_say(LOG_LEVEL_WARN, "SIGHUP: %s", resolve_err);
    sem_post(w->reload_done);
}

void worker_reload(struct worker *w, const struct proxy_config *cfg, sem_t *done)
{
    w->next_cfg = cfg;
    w->reload_done = done;
    event_active(w->reload_event, EV_TIMEOUT, 1);
}

/* The worker's listening socket: the port is shared with the other workers through
 * SO_REUSEPORT (the kernel spreads connections over them). Returns the socket or -errno. */
static int open_listener(const struct sockaddr_storage *addr)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int on = 1;
    socklen_t len = addr->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) < 0 ||
        (addr->ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) < 0) ||
        bind(fd, (const struct sockaddr *)addr, len) < 0 || listen(fd, 4096) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* How many client connections one worker holds at most: its share of the process's
 * descriptors, each connection counting two (its upstream side too, in use or idle in
 * curl's cache; a WebSocket keeps both), after what the process needs besides. Counted
 * on a running proxy: 8 + 9 per worker (+1 per worker with Redis, +1 with an access log
 * file), each loop with its libevent and MHD epoll fds, MHD's ITC, the listening socket
 * and curl's wakeup pair; the reserve leaves some room over that for admin clients, Redis
 * reconnects and the catalog. Past the share, clients wait in the backlog. Running out
 * of descriptors all the same (other processes' limits, many admin clients) is handled:
 * accept_connections waits for them, curl answers 502. */
static unsigned connection_share(const struct proxy_config *cfg)
{
    struct rlimit nofile;
    rlim_t workers = (rlim_t)(cfg->workers > 0 ? cfg->workers : 1);
    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY)
        return 1020;
    rlim_t reserve = 16 + 10 * workers;
    rlim_t usable = nofile.rlim_cur > reserve ? nofile.rlim_cur - reserve : 0;
    rlim_t share = usable / 2 / workers;
    if (share > 100000)
        share = 100000;
    return share > 4 ? (unsigned)share : 4;
}

/* The worker's event loop, its metrics and the pool trimmer the loop drives. */
static int create_loop(struct worker *w, char *err, size_t errlen)
{
    w->base = event_base_new();
    w->metrics = metrics_create();
    w->pool_trim = w->base != NULL ? pool_trim_new(w->base) : NULL;
    if (w->base == NULL || w->metrics == NULL || w->pool_trim == NULL) {
        snprintf(err, errlen, "cannot create an event loop");
        return -ENOMEM;
    }
    return 0;
}

/* The worker's own SO_REUSEPORT socket on [proxy] listen. */
static int open_worker_listener(struct worker *w, char *err, size_t errlen)
{
    const struct proxy_config *cfg = w->cfg;
    w->listen_fd = open_listener(&w->shared->listen_addr);
    if (w->listen_fd < 0) {
        snprintf(err, errlen, "cannot listen on %s:%u (%s)", cfg->listen_host, (unsigned)cfg->listen_port,
                 strerror(-w->listen_fd));
        w->listen_fd = -1;
        return -EADDRINUSE;
    }
    w->connection_limit = connection_share(cfg);
    return 0;
}

/* libmicrohttpd, driven from this loop through its epoll descriptor. */
static int start_mhd(struct worker *w, char *err, size_t errlen)
{
    /* No listening socket of MHD's own: accept_connections hands it every connection. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_NO_LISTEN_SOCKET;
    w->daemon = MHD_start_daemon(flags, 0, NULL, NULL, request_handle, &w->requests,
                                 MHD_OPTION_URI_LOG_CALLBACK, request_begin, (void *)&w->requests,
                                 MHD_OPTION_NOTIFY_COMPLETED, request_completed, (void *)&w->requests,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, (void *)w,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)75,
                                 /* Ours is w->connection_limit, checked before accept();
                                    MHD's only backs it up (MHD_add_connection over it
                                    would close the client's socket). */
                                 MHD_OPTION_CONNECTION_LIMIT, w->connection_limit + 64,
                                 /* Sized in forward.h: paid on every request (MHD zeroes it
                                    after each); bigger response heads bypass it. */
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)FORWARD_CLIENT_POOL_BYTES,
                                 MHD_OPTION_END);
    if (w->daemon == NULL) {
        snprintf(err, errlen, "cannot start libmicrohttpd");
        return -ENOMEM;
    }
    return 0;
}

/* The loop's events: MHD's descriptor and timers, accepting, stopping, reloading. */
static int create_events(struct worker *w, char *err, size_t errlen)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(w->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (info == NULL) {
        snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        return -EINVAL;
    }
    w->mhd_io = event_new(w->base, info->epoll_fd, EV_READ | EV_PERSIST, on_mhd_io, w);
    w->mhd_timer = evtimer_new(w->base, on_mhd_timer, w);
    w->mhd_kick = evtimer_new(w->base, on_mhd_timer, w);
    w->accept_event = event_new(w->base, w->listen_fd, EV_READ | EV_PERSIST, on_accept, w);
    w->accept_retry = evtimer_new(w->base, on_accept, w);
    w->stop_event = event_new(w->base, -1, 0, on_stop, w);
    w->drain_timer = evtimer_new(w->base, on_drain_timer, w);
    w->reload_event = event_new(w->base, -1, 0, on_reload, w);
    w->start_timer = evtimer_new(w->base, on_start_timer, w);
    if (w->mhd_io == NULL || w->mhd_timer == NULL || w->mhd_kick == NULL || w->accept_event == NULL ||
        w->accept_retry == NULL || w->stop_event == NULL || w->drain_timer == NULL || w->reload_event == NULL ||
        w->start_timer == NULL) {
        snprintf(err, errlen, "cannot register events");
        return -ENOMEM;
    }
    return 0;
}

/* What requests pass through: the rejection log, the connection intake, the WebSocket
 * relay and the upstream forwarder. */
static int create_request_path(struct worker *w, char *err, size_t errlen)
{
    w->rejections = rejection_log_create(w->base, w->shared->rejection_warnings);
    if (w->rejections == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct intake_hooks intake_hooks = { .hand_over = hand_to_mhd, .closed = connection_closed,
                                         .key_query = current_key_query, .ctx = w };
    w->intake = intake_create(w->base, w->metrics, w->shared->access_log, &intake_hooks);
    char resolve_err[256] = "";
    struct ws_context_params ws_params = {
        .base = w->base,
        .cfg = w->cfg,
        .metrics = w->metrics,
        .rejection_warnings = w->rejections,
        .pool_trim = w->pool_trim,
        .kick_mhd = kick_mhd,
        .kick_ctx = w,
    };
    w->ws = ws_context_create(&ws_params, resolve_err, sizeof(resolve_err));
    if (w->intake == NULL || w->ws == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if (resolve_err[0] != '\0' && w->index == 0)
        log_say(LOG_LEVEL_WARN, "%s", resolve_err);
    w->forwarder = forwarder_create(w->base, w->cfg, w->metrics);
    if (w->forwarder == NULL) {
        snprintf(err, errlen, "cannot set up libcurl");
        return -ENOMEM;
    }
    return 0;
}

/* The Redis limiter, wrapped in the local fallback; NULL with err set when it fails. */
static struct limiter *create_redis_limiter(struct worker *w, char *err, size_t errlen)
{
    const struct proxy_config *cfg = w->cfg;
    struct redis_store_options opts = {
        .url = cfg->redis_url,
        .tls_ca_file = cfg->redis_ca_file,
        .key_prefix = cfg->key_prefix,
        /* Only a hung Redis waits this long (a dead one fails at once); short enough
           that its in-flight requests are answered soon, long enough for a busy box. */
        .command_timeout_ms = 500,
        .lease_ttl_ms = cfg->lease_ttl_ms,
    };
    /* cluster mode: redis_url holds the seeds; one connection per master */
    struct limiter *redis = cfg->redis_mode == REDIS_MODE_CLUSTER
                                ? limiter_redis_cluster_create(w->base, &opts, err, errlen)
                                : limiter_redis_create(w->base, &opts, err, errlen);
    if (redis == NULL)
        return NULL;
    /* on_store_error = local: the process's memory store decides while Redis is away */
    struct local_fallback_options fallback = local_fallback_of(cfg);
    struct limiter *limiter =
        limiter_local_fallback_create(redis, limiter_memory_create(w->shared->memory), &fallback);
    if (limiter == NULL)
        snprintf(err, errlen, "out of memory");
    return limiter;
}

/* The worker's limiter over [proxy] store, reporting its faults to the store log. */
static int create_limiter(struct worker *w, char *err, size_t errlen)
{
    if (w->cfg->store == STORE_REDIS) {
        w->limiter = create_redis_limiter(w, err, errlen);
    } else {
        w->limiter = limiter_memory_create(w->shared->memory);
        if (w->limiter == NULL)
            snprintf(err, errlen, "cannot create the memory limiter");
    }
    if (w->limiter == NULL)
        return -EINVAL;
    limiter_set_event_hook(w->limiter, store_log_event, store_log_hook_arg(w->shared->store_log, (size_t)w->index));
    return 0;
}

/* Everything request_handle reads, gathered where MHD's callbacks find it. */
static void wire_requests(struct worker *w)
{
    const struct proxy_shared *shared = w->shared;
    struct request_context *rc = &w->requests;
    rc->base = w->base;
    rc->cfg = w->cfg;
    rc->limiter = w->limiter;
    rc->upstream_cap = shared->upstream_cap;
    rc->metrics = w->metrics;
    rc->forwarder = w->forwarder;
    rc->ws = w->ws;
    rc->catalog = shared->catalog;
    rc->access_log = shared->access_log;
    rc->rejection_warnings = w->rejections;
    rc->pool_trim = w->pool_trim;
    rc->watch_delay = client_watch_delay_for(w->base);
    rc->instance_id = shared->instance_id;
    rc->worker_index = w->index;
    rc->kick_mhd = kick_mhd;
    rc->kick_ctx = w;
    request_context_snapshot(rc);
}

int worker_init(struct worker *w, int index, const struct proxy_shared *shared, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    request_context_init(&w->requests);
    w->listen_fd = -1;
    w->index = index;
    w->shared = shared;
    w->cfg = shared->cfg;

    int rc = create_loop(w, err, errlen);
    if (rc == 0)
        rc = open_worker_listener(w, err, errlen);
    if (rc == 0)
        rc = start_mhd(w, err, errlen);
    if (rc == 0)
        rc = create_events(w, err, errlen);
    if (rc == 0)
        rc = create_request_path(w, err, errlen);
    if (rc == 0)
        rc = create_limiter(w, err, errlen);
    if (rc == 0)
        wire_requests(w);
    return rc;
}

/* Serving starts once the limiter answers (or after STORE_WAIT_MS): until then new
 * connections wait in the listen backlog instead of being decided as "store down". */
#define STORE_WAIT_MS 2000

static void start_serving(struct worker *w)
{
    event_add(w->mhd_io, NULL);
    w->serving = true;
    accept_watch(w, true);
    run_mhd(w);
}

static void on_start_timer(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    if (limiter_available(w->limiter) || store_mono_ms() >= w->start_deadline_ms || w->stopping) {
        start_serving(w);
        return;
    }
    static const struct timeval tick = { 0, 10 * 1000 };
    evtimer_add(w->start_timer, &tick);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->start_deadline_ms = store_mono_ms() + STORE_WAIT_MS;
    on_start_timer(-1, 0, w);
    event_base_dispatch(w->base);
    return NULL;
}

int worker_start(struct worker *w)
{
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    w->thread_started = rc == 0;
    return rc == 0 ? 0 : -rc;
}

void worker_request_stop(struct worker *w)
{
    event_active(w->stop_event, EV_TIMEOUT, 1);
}

void worker_join_and_destroy(struct worker *w)
{
    if (w->thread_started)
        pthread_join(w->thread, NULL);
    w->thread_started = false;
    /* MHD cannot stop with suspended connections: wake them; their requests see the
     * daemon going away and are freed by the completion callback. */
    request_context_close(&w->requests);
    if (w->daemon != NULL)
        MHD_run(w->daemon);
    if (w->intake != NULL)
        intake_close_all(w->intake);
    /* Closing the daemon ends the remaining connections; their completion callbacks free
     * requests, which may still hold curl handles and limiter replies. */
    if (w->daemon != NULL)
        MHD_stop_daemon(w->daemon);
    pool_trim_free(w->pool_trim);
    if (w->limiter != NULL)
        limiter_destroy(w->limiter);
    intake_destroy(w->intake); /* after MHD_stop_daemon, whose closing notifications read its count */
    forwarder_destroy(w->forwarder);
    request_context_destroy(&w->requests);
    ws_context_destroy(w->ws);
    rejection_log_destroy(w->rejections);
    if (w->mhd_io != NULL)
        event_free(w->mhd_io);
    if (w->mhd_timer != NULL)
        event_free(w->mhd_timer);
    if (w->mhd_kick != NULL)
        event_free(w->mhd_kick);
    if (w->accept_event != NULL)
        event_free(w->accept_event);
    if (w->accept_retry != NULL)
        event_free(w->accept_retry);
    if (w->listen_fd >= 0)
        close(w->listen_fd);
    if (w->stop_event != NULL)
        event_free(w->stop_event);
    if (w->drain_timer != NULL)
        event_free(w->drain_timer);
    if (w->reload_event != NULL)
        event_free(w->reload_event);
    if (w->start_timer != NULL)
        event_free(w->start_timer);
    if (w->base != NULL)
        event_base_free(w->base);
    metrics_destroy(w->metrics);
}
