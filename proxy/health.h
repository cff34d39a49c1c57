/* What GET /health answers (SPEC "Day two"): 200 whenever this proxy serves requests as
 * configured, 503 only when its requests would get 503. Pure: admin.c gathers what the
 * workers and the catalog watcher know and renders the verdict.
 *
 * The store's state is taken as the workers meet it: ok when one worker's store answers,
 * error when one's answers with errors, a Redis Cluster partial when some masters answer;
 * the catalog's: ok, unreachable (the last poll or read failed and the snapshot held still
 * serves: 200 "plans":"unreachable") or missing (503). "catalog_version" is there whenever
 * a catalog is served. admin.c holds the two on_store_error settings as atomics that a
 * reload updates. Right after Redis returns, concurrency rules wait for the leases'
 * registration (under 1 s) while /health already says ok.
 */
#pragma once
#include "store/limiter.h"

enum health_store {
    HEALTH_STORE_OK,            /* answering (the memory store always) */
    HEALTH_STORE_PARTIAL,       /* a Redis Cluster with some masters not answering */
    HEALTH_STORE_UNREACHABLE,   /* no worker's store answers */
    HEALTH_STORE_ERROR,         /* a worker's store answers with errors (OOM, WRONGPASS, ...) */
};

enum health_plans {
    HEALTH_PLANS_OK,
    HEALTH_PLANS_UNREACHABLE,   /* the last poll failed; the snapshot held still serves */
    HEALTH_PLANS_MISSING,       /* no catalog at all: every keyed request gets 503 */
};

struct health_input {
    enum health_store store;
    enum health_plans plans;
    enum limiter_store_error rate;          /* [limits] on_store_error */
    enum limiter_store_error concurrency;   /* [limits] concurrency_on_store_error */
};

struct health_verdict {
    unsigned http_status;       /* 200 or 503 */
    const char *status;         /* "ok", "degraded" or "unavailable" */
    const char *store;          /* "ok", "degraded", "error", or what decides while the
                                   store is unreachable: "local", "open", "unreachable"
                                   (closed: refused) */
    const char *plans;          /* "ok", "unreachable", "missing" */
    const char *concurrency;    /* while the store fails and concurrency_on_store_error is
                                   not on_store_error: what decides concurrency rules
                                   ("local", "open", "closed"); else NULL */
};

/* The answer for `in`. The strings are static. */
struct health_verdict health_decide(const struct health_input *in);
