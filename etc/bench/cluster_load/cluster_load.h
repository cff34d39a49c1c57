/* cluster_load's shared state: the options, each master with its counters and latencies,
 * and the load on one libevent loop (cluster_load.c); the blocking Redis side, slots and
 * INFO counters, is cluster_load_redis.c. */
#pragma once
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "store/redis/cluster_slot.h"
#include "store/limiter.h"
#include "store/redis/redis_url.h"

#define MAX_MASTERS 16
#define MAX_REPLICAS_PER_MASTER 4
#define SUBJECT_MAX 64
#define KEY_MAX 512
#define LATENCY_BUCKETS 100001           /* 1 µs each up to 100 ms; the last one: slower */
#define INFO_TIMEOUT_MS 3000
#define CONNECT_WAIT_MS 5000
#define DRAIN_WAIT_MS 3000
#define UNAVAILABLE_RETRY_MS 1

struct options {
    int inflight;            /* checks in flight per master */
    int subjects;            /* subjects per master */
    int duration_s;          /* measured window */
    int warmup_s;            /* unrecorded, before it */
    int timeout_ms;          /* the limiter's command timeout */
    const char *prefix;      /* [limits] key_prefix */
};

/* INFO numbers of one server at one instant. */
struct redis_stats {
    bool ok;
    double cpu_s;                /* used_cpu_user + used_cpu_sys */
    long long evalsha_calls, evalsha_usec, eval_calls;
};

struct node_addr {
    char host[CLUSTER_HOST_MAX];
    int port;
};

struct counters {
    uint64_t done, allowed, rejected, unavailable, send_failed;
};

struct master {
    int index;
    struct redis_url url;        /* parsed from the command line; password wiped at exit */
    char name[CLUSTER_HOST_MAX + 8];   /* host:port, never the password */
    struct limiter *limiter;
    bool cluster;                /* false: not a cluster node, owns every slot */
    uint32_t slots_owned;
    struct node_addr replicas[MAX_REPLICAS_PER_MASTER];
    int replica_count;
    char (*subjects)[SUBJECT_MAX];
    size_t subject_count, next_subject;
    struct counters now, at_start, at_end;
    struct redis_stats before, after;
    struct redis_stats replica_before[MAX_REPLICAS_PER_MASTER], replica_after[MAX_REPLICAS_PER_MASTER];
    uint32_t *latency_us;        /* measured window only */
    uint64_t latency_count;
    int inflight;
};

enum phase { PHASE_CONNECT, PHASE_WARMUP, PHASE_MEASURE, PHASE_DRAIN };

/* One of the K check slots of a master: sends a check, and the next when it is answered. */
struct flight {
    struct master *m;
    struct load *load;
    struct event *retry;
    struct timespec sent;
    bool in_check;               /* inside limiter_check: a done now is synchronous */
    bool answered_in_check;
    bool unavailable_in_check;
};

struct load {
    struct options opt;
    struct event_base *base;
    struct master masters[MAX_MASTERS];
    int master_count;
    struct flight *flights;
    enum phase phase;
    struct event *phase_timer;
    int64_t phase_started_ms;
    struct timespec measure_start, measure_end;
    struct rusage ru_start, ru_end;
    unsigned long long box_busy[2], box_total[2];   /* at the start and end of the window */
    bool box_ok;
    long ncpu;
    bool failed;
};

/* The plan every subject is checked against (cluster_load.c). */
#define PLAN_RULES 2
extern const struct limit_rule PLAN[PLAN_RULES];

/* Whether host:port is master m. */
bool same_node(const char *host, int port, const struct master *m);

/* Reads INFO of every master and of its replicas, before (after = false) or after the window. */
void read_all_stats(struct load *load, bool after);
/* Which master owns each slot (owner[16384], -1: none), from CLUSTER SLOTS; the replicas too. */
int learn_slots(struct load *load, int8_t *owner);
/* Subjects whose keys each master owns. */
int pick_subjects(struct load *load, const int8_t *owner);
