/* The Redis Cluster limiter's parts, shared by its two files and private to them:
 * store/cluster/limiter_cluster.c (checks, leases, the limiter) and store/cluster/limiter_cluster_map.c
 * (its nodes and the slot map it learns). */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <openssl/ssl.h>

#include "store/redis/cluster_slot.h"
#include "store/limiter_impl.h"
#include "store/redis/redis_url.h"

#define CLUSTER_MAX_NODES 1024  /* node limiters one cluster limiter makes at most */
#define REFRESH_MS 10000        /* the map is asked for again this often */
#define REFRESH_FAST_MS 250     /* ... while a master of the map is not connected, or no map */
#define REFRESH_GAP_MS 100      /* at least this between two refreshes a MOVED asks for */

struct cluster_node {
    char host[CLUSTER_HOST_MAX];
    int port;
    struct limiter *redis;       /* limiter_redis_node_create */
    _Atomic bool master;         /* serves slots in the current map */
    _Atomic uint64_t errors;     /* checks sent here answered LIMITER_UNAVAILABLE (metrics) */
    bool released;               /* a release went here since the last sync */
    char name[CLUSTER_HOST_MAX + 8];   /* "host:port" */
};

/* One check or peek on its way: its arguments, for a resend after MOVED or ASK. */
struct cluster_check {
    struct cluster_check *next;
    struct cluster_limiter *cl;
    limiter_done_fn *done;
    void *arg;
    bool peek;
    int redirects, tries;
    size_t node;                 /* where it was sent last */
    struct event *retry;         /* after TRYAGAIN; made when first needed, kept for reuse */
    struct cluster_check *wprev, *wnext;   /* on the waiting list while retry is armed */
    int64_t now_ms;
    size_t n, subject_len, lease_id_len;
    bool leased;
    struct limit_rule rules[LIMITER_MAX_RULES];
    char lease_id[LEASE_ID_MAX];
    char subject[LIMITER_MAX_SUBJECT];
};

struct cluster_limiter {
    struct limiter base;         /* its lease table stays empty: the nodes' hold the leases */
    struct event_base *evbase;
    struct redis_store_options options;
    char *prefix;
    size_t prefix_len;
    struct redis_url *seeds;
    size_t n_seeds;
    SSL_CTX *tls;                /* rediss:// seeds: every node is reached over TLS (NULL: plain) */
    /* made on the loop thread, never freed before destroy; /health reads them from the
       admin thread: an entry is set before n_nodes counts it */
    struct cluster_node *nodes[CLUSTER_MAX_NODES];
    _Atomic size_t n_nodes;
    _Atomic bool have_map;       /* read by /health too */
    uint16_t owner[CLUSTER_SLOT_COUNT];   /* node index + 1; 0: no master */
    /* the map refresh: one CLUSTER SLOTS at a time, candidates tried in turn */
    bool probing, probe_again;
    redisAsyncContext *probe;
    char probe_host[CLUSTER_HOST_MAX];
    size_t probe_tried, probe_start;   /* the refresh starts with the candidate that answered last */
    int64_t probe_started_ms, probe_timeout_ms;
    struct event *probe_timer;   /* the probe's deadline, or (armed at 0) its next candidate */
    struct event *refresh_timer;
    char last_error[200];        /* for a debugger */
    struct cluster_check *waiting;   /* checks waiting to be sent again after TRYAGAIN */
    bool destroying;
    struct cluster_check *spare;
    size_t n_spare;
    limiter_event_fn *event_fn;  /* limiter_set_event_hook: given to every node */
    void *event_arg;
    void (*ready_fn)(void *arg); /* limiter_set_ready_hook: given to every node */
    void *ready_arg;
};

/* ---- limiter_cluster_map.c ---- */

/* Notes what failed last, for a debugger and for /health when no master answers. */
void cluster_note_error(struct cluster_limiter *cl, const char *what, const char *detail);
/* The index of the node at host:port, made (and connecting) when new; -1 past the cap or
 * out of memory. */
int cluster_node_find_or_add(struct cluster_limiter *cl, const char *host, int port);
/* Every master of the map connected (false without a map). */
bool cluster_masters_all_up(const struct cluster_limiter *cl);
/* Asks for the map at once (the first time) or soon (a MOVED, a node that failed a check). */
void cluster_refresh_start(struct cluster_limiter *cl);
void cluster_refresh_request(struct cluster_limiter *cl);
/* Ends the map's probe connection (graceful: let its last reply come). */
void cluster_probe_drop(struct cluster_limiter *cl, bool graceful);
void cluster_on_refresh_timer(evutil_socket_t fd, short what, void *arg);
void cluster_on_probe_timer(evutil_socket_t fd, short what, void *arg);
