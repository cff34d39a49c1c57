/* The admin listener: GET /health (readiness of the store and the catalog) and
 * GET /metrics (Prometheus). Runs on its own thread, apart from the serving workers. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct admin;
struct limiter;
struct metrics;
struct snapshot_watch;

struct admin_sources {
    struct snapshot_watch *catalog;
    struct limiter *const *limiters;   /* one per worker: the store is ok when any answers */
    struct metrics *const *metrics;    /* one per worker */
    size_t n_workers;
    bool store_is_remote;              /* memory: always ok */
};

/* Starts listening on host:port. Returns 0 and sets *padmin, or a negative errno with a
 * reason in err. */
int admin_start(const char *host, uint16_t port, const struct admin_sources *sources, struct admin **padmin,
                char *err, size_t errlen);
void admin_stop(struct admin *admin);
