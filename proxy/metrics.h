/* Prometheus counters, gauges and histograms. Each worker owns one `struct metrics` and
 * updates it without contention; the admin thread adds them up when scraped. */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct metrics;

/* The kind of a limit hit: which kind of limit refused what. The label limit_type carries
 * it (as do the access log's and the rejection warning's limit_type): "http" (a rate
 * limit refused a request), "concurrency" (a concurrency limit refused a request),
 * "ws_connection" (... a WebSocket handshake), "ws_message" (a --ws-messages limit closed
 * a tunnel). */
enum limit_hit_kind { LIMIT_HIT_HTTP = 0, LIMIT_HIT_CONCURRENCY, LIMIT_HIT_WS_CONNECTION, LIMIT_HIT_WS_MESSAGE };

/* Returns NULL on allocation failure. */
struct metrics *metrics_create(void);
void metrics_destroy(struct metrics *m);

/* plan may be NULL (unauthenticated, exempt): counted under plan="". */
void metrics_count_request(struct metrics *m, const char *plan, unsigned code);
void metrics_count_limit_hit(struct metrics *m, enum limit_hit_kind kind, const char *plan);
void metrics_count_store_error(struct metrics *m);
/* A request refused 503 upstream_saturated (upstream_max_inflight); plan NULL: exempt. */
void metrics_count_shed(struct metrics *m, const char *plan);
void metrics_observe_store(struct metrics *m, int64_t ns);
void metrics_observe_upstream(struct metrics *m, int64_t ns);
void metrics_add_connections(struct metrics *m, int delta);
void metrics_add_websockets(struct metrics *m, int delta);

/* Renders the sum of all[0..n) in the Prometheus text format. Returns a malloc'd string
 * the caller frees, or NULL. */
char *metrics_render(struct metrics *const *all, size_t n);
