/* Giving back idle pools' pages (pool_trim.h says what of libmicrohttpd it relies on). A
 * pool_trim owns its timer and the list of pools idle since a request, oldest first, so the
 * timer looks at the head only; each client_pool lives in its connection's socket context
 * from STARTED to CLOSED, never freed by pool_trim_free. A pool is on the list exactly when
 * queued is set. Only a pool whose start is known goes to madvise, and only its zero pages,
 * but for an upgraded connection's, given back whole once. */
#include "proxy/pool_trim.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "proxy/forward.h"
#include "store/clock.h"

struct client_pool {
    TAILQ_ENTRY(client_pool) dirty; /* in pool_trim.dirty while queued */
    bool queued;
    bool first_head_seen;           /* only the first head is at the pool's start for sure */
    const char *pool;               /* the first head's method: the pool's start; NULL before */
    uintptr_t start;                /* the pool's first byte; 0: not known, left alone */
    int64_t idle_since_ms;
};

struct pool_trim {
    TAILQ_HEAD(, client_pool) dirty; /* the longest idle first */
    struct event timer;              /* set for the first one's POOL_TRIM_IDLE_MS */
    bool armed;
    uintptr_t page;                  /* the system's page size */
};

static struct client_pool *pool_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

static bool page_is_zero(const unsigned char *p, size_t len)
{
    return p[0] == 0 && memcmp(p, p + 1, len - 1) == 0;
}

/* The pool's whole pages: what madvise may give back. */
static uintptr_t pool_pages_bytes(const struct pool_trim *t)
{
    return FORWARD_CLIENT_POOL_BYTES & ~(t->page - 1);
}

/* Drops the pool's pages that are all zeros, in runs: one madvise per run. */
static void give_back(const struct pool_trim *t, const struct client_pool *cp)
{
    uintptr_t page = t->page;
    uintptr_t lo = cp->start, hi = cp->start + pool_pages_bytes(t);
    uintptr_t run = lo; /* start of the current run of zero pages */
    for (uintptr_t p = lo; p < hi; p += page) {
        if (!page_is_zero((const unsigned char *)p, page)) {
            if (p > run)
                (void)madvise((void *)run, p - run, MADV_DONTNEED);
            run = p + page;
        }
    }
    if (hi > run)
        (void)madvise((void *)run, hi - run, MADV_DONTNEED);
}

static void unqueue(struct pool_trim *t, struct client_pool *cp)
{
    if (cp->queued) {
        TAILQ_REMOVE(&t->dirty, cp, dirty);
        cp->queued = false;
    }
}

static void arm(struct pool_trim *t, int64_t now_ms)
{
    struct client_pool *oldest = TAILQ_FIRST(&t->dirty);
    if (oldest == NULL || t->armed)
        return;
    int64_t wait_ms = oldest->idle_since_ms + POOL_TRIM_IDLE_MS - now_ms;
    struct timeval tv = store_ms_to_timeval(wait_ms > 0 ? wait_ms : 0);
    evtimer_add(&t->timer, &tv);
    t->armed = true;
}

static void on_trim_timer(evutil_socket_t fd, short what, void *arg)
{
    struct pool_trim *t = arg;
    t->armed = false;
    int64_t now = store_mono_ms();
    struct client_pool *cp;
    while ((cp = TAILQ_FIRST(&t->dirty)) != NULL && now - cp->idle_since_ms >= POOL_TRIM_IDLE_MS) {
        unqueue(t, cp);
        give_back(t, cp);
    }
    arm(t, now);
}

struct pool_trim *pool_trim_new(struct event_base *base)
{
    struct pool_trim *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    TAILQ_INIT(&t->dirty);
    evtimer_assign(&t->timer, base, on_trim_timer, t);
    long page = sysconf(_SC_PAGESIZE);
    t->page = page > 0 ? (uintptr_t)page : 4096;
    return t;
}

void pool_trim_free(struct pool_trim *t)
{
    if (t == NULL)
        return;
    struct client_pool *cp;
    while ((cp = TAILQ_FIRST(&t->dirty)) != NULL)
        unqueue(t, cp); /* not freed: their CLOSED notifications free them */
    if (t->armed)
        evtimer_del(&t->timer);
    free(t);
}

void pool_trim_connection_started(struct pool_trim *t, void **socket_context)
{
    (void)t;
    *socket_context = calloc(1, sizeof(struct client_pool)); /* NULL: never trimmed */
}

void pool_trim_connection_closed(struct pool_trim *t, void **socket_context)
{
    struct client_pool *cp = *socket_context;
    if (cp == NULL)
        return;
    unqueue(t, cp);
    free(cp);
    *socket_context = NULL;
}

void pool_trim_request_head(struct pool_trim *t, struct MHD_Connection *conn, const char *method)
{
    struct client_pool *cp = pool_of(conn);
    if (cp == NULL)
        return;
    unqueue(t, cp); /* busy: nothing to trim until it is idle again */
    if (!cp->first_head_seen) {
        cp->first_head_seen = true;
        cp->pool = method;
        if (((uintptr_t)method & (t->page - 1)) == 0)
            cp->start = (uintptr_t)method;
    }
}

bool pool_trim_pool_start(struct MHD_Connection *conn, const char **pool)
{
    const struct client_pool *cp = pool_of(conn);
    *pool = cp != NULL ? cp->pool : NULL;
    return cp != NULL;
}

void pool_trim_request_done(struct pool_trim *t, struct MHD_Connection *conn)
{
    struct client_pool *cp = pool_of(conn);
    if (cp == NULL)
        return;
    cp->first_head_seen = true; /* a later head may follow empty lines: never learnt from */
    if (cp->start == 0)
        return;
    unqueue(t, cp);
    cp->idle_since_ms = store_mono_ms();
    TAILQ_INSERT_TAIL(&t->dirty, cp, dirty);
    cp->queued = true;
    arm(t, cp->idle_since_ms);
}

void pool_trim_upgraded(struct pool_trim *t, struct MHD_Connection *conn)
{
    struct client_pool *cp = pool_of(conn);
    if (cp == NULL || cp->start == 0)
        return;
    unqueue(t, cp);
    /* All of it, not only its zero pages: what it holds (the handshake's head and the
     * bytes read past it, the 101's head) is read by no one again (see the header). */
    (void)madvise((void *)cp->start, pool_pages_bytes(t), MADV_DONTNEED);
    cp->start = 0; /* the tunnel's buffers are its own now: nothing more to trim */
}
