/* floor_common.h: MHD in external-epoll mode driven by libevent (shared by floor_*.c).
 * libevent watches MHD's epoll fd (level-triggered, EV_PERSIST) and a timer armed from
 * MHD_get_timeout(); each wake-up calls MHD_run(). */
#ifndef FLOOR_COMMON_H
#define FLOOR_COMMON_H
/* libmicrohttpd zeroes a connection's pool after every request: with -DOPT the pool is
 * 4 KiB (enough for the bench's heads), else 32 KiB, as tierproxy's was. */
#ifdef OPT
#define FLOOR_POOL_BYTES (4 * 1024)
#else
#define FLOOR_POOL_BYTES (32 * 1024)
#endif
#include <event2/event.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>

static struct event_base *g_base;
static struct MHD_Daemon *g_mhd;
static struct event *g_mhd_ev, *g_mhd_timer;

static void mhd_rearm(void)
{
    MHD_UNSIGNED_LONG_LONG to;
    if (MHD_get_timeout(g_mhd, &to) == MHD_YES) {
        struct timeval tv = {(time_t)(to / 1000), (suseconds_t)((to % 1000) * 1000)};
        evtimer_add(g_mhd_timer, &tv);
    } else {
        evtimer_del(g_mhd_timer);
    }
}

static void mhd_drive(void)
{
    static int depth; /* never re-enter MHD_run from inside an MHD callback */
    if (depth) return;
    depth++;
    MHD_run(g_mhd);
    mhd_rearm();
    depth--;
}

static void on_mhd_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd; (void)what; (void)arg;
    mhd_drive();
}

static void mhd_start(unsigned port, MHD_AccessHandlerCallback h, MHD_RequestCompletedCallback done)
{
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO;
    /* loopback only, like every server etc/bench.sh starts */
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    g_mhd = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, h, NULL,
                             MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                             MHD_OPTION_NOTIFY_COMPLETED, done, NULL,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)75,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)FLOOR_POOL_BYTES,
                             MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
                             MHD_OPTION_END);
    if (!g_mhd) { fprintf(stderr, "MHD_start_daemon failed\n"); exit(1); }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(g_mhd, MHD_DAEMON_INFO_EPOLL_FD);
    g_mhd_ev = event_new(g_base, di->epoll_fd, EV_READ | EV_PERSIST, on_mhd_event, NULL);
    g_mhd_timer = evtimer_new(g_base, on_mhd_event, NULL);
    event_add(g_mhd_ev, NULL);
    mhd_rearm();
}

/* 96-byte JSON body used by the origin nginx (@BODY@) */
static const char BODY[] =
    "{\"status\":\"ok\",\"service\":\"bench-upstream\",\"message\":\"fixed response body\",\"id\":1234567890,\"v\":1}";
#endif
