/* The store's faults on stderr (SPEC "Faults keep their promises"): each worker's limiter
 * tells (limiter_set_event_hook) every check the store could not decide and every lost
 * connection, with the reason; this writes one line per reason at most every 10 s, with
 * how many events it stands for, and one line when every worker's store answers again,
 * with how long it was away. One per process, shared by the workers (thread-safe). */
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
