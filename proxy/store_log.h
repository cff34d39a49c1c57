/* The store's outages on stderr (SPEC "Day two"): each worker's limiter tells
 * (limiter_set_event_hook) every check the store could not decide and every lost
 * connection, with the reason, and its return. An outage runs from the first worker's
 * failure until every worker's store answers again; it gets one JSON line when it starts,
 * naming the reason ("store unreachable: ..." or "store error: ..."), one more only if the
 * store then fails the other way (gone, then refusing the password), and one when it ends,
 * with how long it lasted and how many failures it held. One per process, shared by the
 * workers (thread-safe). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "store/limiter.h"

struct store_log;

/* For `workers` workers; log_back: write the line of the store's return (an info line).
 * Returns NULL when out of memory. */
struct store_log *store_log_create(size_t workers, bool log_back);
void store_log_destroy(struct store_log *log);

/* The hook for worker `index`'s limiter: limiter_set_event_hook(limiter, store_log_event,
 * store_log_hook_arg(log, index)). */
void *store_log_hook_arg(struct store_log *log, size_t index);
void store_log_event(void *arg, enum limiter_health health, const char *reason);
