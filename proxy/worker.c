#include "proxy/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <event2/event.h>
#include <microhttpd.h>

#include "proxy/config.h"
#include "proxy/forward.h"
#include "proxy/metrics.h"
#include "proxy/request.h"
#include "proxy/websocket.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"

/* How long SIGTERM waits for in-flight requests. */
#define DRAIN_MS 10000

int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timeval ms_to_timeval(int64_t ms)
{
    return (struct timeval){ .tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)((ms % 1000) * 1000) };
}

int64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void schedule_mhd_timer(struct worker *w)
{
    MHD_UNSIGNED_LONG_LONG timeout_ms;
    if (MHD_get_timeout(w->daemon, &timeout_ms) == MHD_YES) {
        if (timeout_ms > 60000)
            timeout_ms = 60000;
        struct timeval tv = ms_to_timeval((int64_t)timeout_ms);
        evtimer_add(w->mhd_timer, &tv);
    } else {
        evtimer_del(w->mhd_timer);
    }
}

static void run_mhd(struct worker *w)
{
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

void worker_kick_mhd(struct worker *w)
{
    /* Runs MHD from the loop on its next turn, never from inside a curl or hiredis
     * callback. */
    static const struct timeval now = { 0, 0 };
    evtimer_add(w->mhd_timer, &now);
}

struct snapshot *worker_snapshot(struct worker *w)
{
    uint64_t generation = snapshot_watch_generation(w->shared->catalog);
    if (w->snap == NULL || generation != w->snap_generation) {
        struct snapshot *fresh = snapshot_watch_acquire(w->shared->catalog);
        if (fresh != NULL) {
            if (w->snap != NULL)
                snapshot_unref(w->snap);
            w->snap = fresh;
            w->snap_generation = generation;
        }
    }
    return w->snap;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct worker *w = cls;
    metrics_add_connections(w->metrics, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
    /* After accept() failed for lack of descriptors, MHD takes its listening socket out
     * of epoll and puts it back only in a later MHD_run once a connection has closed:
     * make sure that run happens even if nothing else wakes the loop. */
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED)
        worker_kick_mhd(w);
}

static void on_leases_released(void *arg)
{
    struct worker *w = arg;
    event_base_loopbreak(w->base);
}

static void on_drain_timer(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    if (w->active_requests == 0 || clock_mono_ms() >= w->drain_deadline_ms) {
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
    MHD_socket listen_fd = MHD_quiesce_daemon(w->daemon);
    if (listen_fd != MHD_INVALID_SOCKET)
        close(listen_fd);
    w->drain_deadline_ms = clock_mono_ms() + DRAIN_MS;
    ws_close_all(w);
    on_drain_timer(-1, 0, w);
}

static void on_reload(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    w->cfg = w->next_cfg;
    sem_post(w->reload_done);
}

void worker_reload(struct worker *w, const struct proxy_config *cfg, sem_t *done)
{
    w->next_cfg = cfg;
    w->reload_done = done;
    event_active(w->reload_event, EV_TIMEOUT, 1);
}

int worker_init(struct worker *w, int index, const struct proxy_shared *shared, char *err, size_t errlen)
{
    memset(w, 0, sizeof(*w));
    w->index = index;
    w->shared = shared;
    w->cfg = shared->cfg;
    const struct proxy_config *cfg = w->cfg;

    w->base = event_base_new();
    w->metrics = metrics_create();
    if (w->base == NULL || w->metrics == NULL) {
        snprintf(err, errlen, "cannot create an event loop");
        return -ENOMEM;
    }

    struct sockaddr_storage addr;
    if (sockaddr_from_ip_port(cfg->listen_host, cfg->listen_port, &addr) < 0) {
        snprintf(err, errlen, "listen address \"%s\" is not an IP address", cfg->listen_host);
        return -EINVAL;
    }
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE;
    /* Each worker gets its share of the process's descriptors, each connection counting
     * two (its upstream side too; a WebSocket keeps both). Not MHD's default of 1020, which
     * stops a worker long before they run out; and not more than the share: a worker
     * whose accept() fails for lack of descriptors while it holds no connection of its
     * own never accepts again (MHD clears that state only when one of its own closes). */
    struct rlimit nofile;
    unsigned connection_limit = 1020;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
        rlim_t reserve = 32 + 8 * (rlim_t)cfg->workers; /* loops, MHD, Redis, SQLite, logs */
        rlim_t usable = nofile.rlim_cur > reserve ? nofile.rlim_cur - reserve : 0;
        rlim_t per_worker = usable / 2 / (rlim_t)(cfg->workers > 0 ? cfg->workers : 1);
        connection_limit = per_worker > 4 ? (unsigned)per_worker : 4;
    }
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    w->daemon = MHD_start_daemon(flags, 0, NULL, NULL, request_handle, w,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                                 MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
                                 MHD_OPTION_URI_LOG_CALLBACK, request_uri_logger, (void *)w,
                                 MHD_OPTION_NOTIFY_COMPLETED, request_completed, (void *)w,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, (void *)w,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)75,
                                 MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                                 /* Room for heads past our own limit, so that we answer them
                                    (431, JSON). Not more: MHD zeroes the whole pool after
                                    every request. Heads that overflow it get MHD's own 431. */
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024),
                                 MHD_OPTION_END);
    if (w->daemon == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%u (address in use, or not allowed)", cfg->listen_host,
                 (unsigned)cfg->listen_port);
        return -EADDRINUSE;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(w->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    if (info == NULL) {
        snprintf(err, errlen, "libmicrohttpd has no epoll fd");
        return -EINVAL;
    }
    w->mhd_io = event_new(w->base, info->epoll_fd, EV_READ | EV_PERSIST, on_mhd_io, w);
    w->mhd_timer = evtimer_new(w->base, on_mhd_timer, w);
    w->stop_event = event_new(w->base, -1, 0, on_stop, w);
    w->drain_timer = evtimer_new(w->base, on_drain_timer, w);
    w->reload_event = event_new(w->base, -1, 0, on_reload, w);
    w->start_timer = evtimer_new(w->base, on_start_timer, w);
    if (w->mhd_io == NULL || w->mhd_timer == NULL || w->stop_event == NULL || w->drain_timer == NULL ||
        w->reload_event == NULL || w->start_timer == NULL) {
        snprintf(err, errlen, "cannot register events");
        return -ENOMEM;
    }

    char resolve_err[256] = "";
    if (ws_resolve_upstreams(w, resolve_err, sizeof(resolve_err)) < 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if (resolve_err[0] != '\0' && index == 0)
        fprintf(stderr, "tierproxy: %s\n", resolve_err);
    if (forward_init(w) < 0) {
        snprintf(err, errlen, "cannot set up libcurl");
        return -ENOMEM;
    }

    if (cfg->store == STORE_REDIS) {
        struct redis_store_options opts = {
            .url = cfg->redis_url,
            .key_prefix = cfg->key_prefix,
            /* Only a hung Redis waits this long (a dead one fails at once); short enough
               that its in-flight requests are answered soon, long enough for a busy box. */
            .command_timeout_ms = 500,
            .lease_ttl_ms = cfg->lease_ttl_ms,
        };
        w->limiter = limiter_redis_create(w->base, &opts, err, errlen);
    } else {
        w->limiter = limiter_memory_create(shared->memory);
        if (w->limiter == NULL)
            snprintf(err, errlen, "cannot create the memory limiter");
    }
    if (w->limiter == NULL)
        return -EINVAL;

    worker_snapshot(w);
    return 0;
}

/* Serving starts once the limiter answers (or after STORE_WAIT_MS): until then new
 * connections wait in the listen backlog instead of being decided as "store down". */
#define STORE_WAIT_MS 2000

static void start_serving(struct worker *w)
{
    event_add(w->mhd_io, NULL);
    run_mhd(w);
}

static void on_start_timer(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    if (limiter_available(w->limiter) || clock_mono_ms() >= w->start_deadline_ms || w->stopping) {
        start_serving(w);
        return;
    }
    static const struct timeval tick = { 0, 10 * 1000 };
    evtimer_add(w->start_timer, &tick);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->start_deadline_ms = clock_mono_ms() + STORE_WAIT_MS;
    on_start_timer(-1, 0, w);
    event_base_dispatch(w->base);
    return NULL;
}

int worker_start(struct worker *w)
{
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    return rc == 0 ? 0 : -rc;
}

void worker_request_stop(struct worker *w)
{
    event_active(w->stop_event, EV_TIMEOUT, 1);
}

void worker_join_and_destroy(struct worker *w)
{
    pthread_join(w->thread, NULL);
    /* MHD cannot stop with suspended connections: wake them; their requests see the
     * daemon going away and are freed by the completion callback. */
    w->closing = true;
    for (struct request *r = w->requests; r != NULL; r = r->next) {
        forward_abort(r);
        if (r->suspended) {
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
    }
    if (w->daemon != NULL)
        MHD_run(w->daemon);
    /* Closing the daemon ends the remaining connections; their completion callbacks free
     * requests, which may still hold curl handles and limiter replies. */
    if (w->daemon != NULL)
        MHD_stop_daemon(w->daemon);
    if (w->limiter != NULL)
        limiter_destroy(w->limiter);
    forward_destroy(w);
    ws_free_upstreams(w);
    if (w->snap != NULL)
        snapshot_unref(w->snap);
    if (w->mhd_io != NULL)
        event_free(w->mhd_io);
    if (w->mhd_timer != NULL)
        event_free(w->mhd_timer);
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
