/* The rejection warnings on stderr (SPEC): at most one line per user and limit per 10 s,
 * saying how many rejections it stands for, and a burst's full count within 10 s of its
 * end. The budget is one log_throttle for the process, shared by the workers; each worker
 * has a rejection_log over it, with a timer on the worker's own event loop that writes the
 * held-back counts when they are due: no later rejection is needed, and no thread. */
#pragma once
#include <stdint.h>

struct event_base;
struct log_throttle;
struct rejection_log;

/* One per worker: its loop, and the process's throttle (which it does not own). Returns
 * NULL when out of memory. Use from the loop's thread only. */
struct rejection_log *rejection_log_create(struct event_base *base, struct log_throttle *throttle);
void rejection_log_destroy(struct rejection_log *rl);

/* A warning line for a rejected request or message: user_id, plan, limit_type (a static
 * string), current_count, limit, and "rejections": how many it stands for. At most one
 * line per user and limit (limit_id) per the throttle's interval; the rejections held back
 * are written by the timer when that interval is over, with the values of the latest.
 * rl NULL: a line for each. */
void log_rejection(struct rejection_log *rl, const char *user, const char *plan, const char *limit_type,
                   int64_t limit_id, int64_t current_count, int64_t limit);

/* Writes every line still held back in throttle, due or not (the process stops). */
void rejection_log_flush_all(struct log_throttle *throttle);
