/* The admin listener: GET /health (whether this proxy serves as configured: health.h) and
 * GET /metrics (Prometheus). Runs on its own thread, apart from the serving workers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limiter.h"

struct admin;
struct metrics;
struct snapshot_watch;

struct admin_sources {
    struct snapshot_watch *catalog;
    struct limiter *const *limiters;   /* one per worker: the store is ok when any answers */
    struct metrics *const *metrics;    /* one per worker */
    size_t n_workers;
    bool store_is_remote;              /* memory: always ok */
    enum limiter_store_error rate_on_store_error;        /* what decides while the store fails */
    enum limiter_store_error concurrency_on_store_error;
};

/* Starts listening on host:port. Returns 0 and sets *padmin, or a negative errno with a
 * reason in err. */
int admin_start(const char *host, uint16_t port, const struct admin_sources *sources, struct admin **padmin,
                char *err, size_t errlen);
/* A reload changed [limits] on_store_error or concurrency_on_store_error. Any thread. */
void admin_set_store_error_modes(struct admin *admin, enum limiter_store_error rate,
                                 enum limiter_store_error concurrency);
void admin_stop(struct admin *admin);
