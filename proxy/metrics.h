/* Prometheus counters, gauges and histograms. Each worker owns one `struct metrics` and
 * updates it without contention; the admin thread adds them up when scraped. */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct metrics;

enum limit_type { LIMIT_TYPE_HTTP = 0, LIMIT_TYPE_CONCURRENCY, LIMIT_TYPE_WS_CONNECTION, LIMIT_TYPE_WS_MESSAGE };

/* Returns NULL on allocation failure. */
struct metrics *metrics_create(void);
void metrics_destroy(struct metrics *m);

/* plan may be NULL (unauthenticated, exempt): counted under plan="". */
void metrics_count_request(struct metrics *m, const char *plan, unsigned code);
void metrics_count_limit_hit(struct metrics *m, enum limit_type type, const char *plan);
void metrics_count_store_error(struct metrics *m);
void metrics_observe_store(struct metrics *m, int64_t ns);
void metrics_observe_upstream(struct metrics *m, int64_t ns);
void metrics_add_connections(struct metrics *m, int delta);
void metrics_add_websockets(struct metrics *m, int delta);

/* Renders the sum of all[0..n) in the Prometheus text format. Returns a malloc'd string
 * the caller frees, or NULL. */
char *metrics_render(struct metrics *const *all, size_t n);
