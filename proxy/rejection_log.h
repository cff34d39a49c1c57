/* The rejection warnings on stderr (SPEC): at most one line per user and limit per 10 s,
 * saying how many rejections it stands for, and a burst's full count within 10 s of its
 * end. The budget is one log_throttle for the process, shared by the workers; each worker
 * has a rejection_log over it, with a timer on the worker's own event loop that writes the
 * held-back counts when they are due: no later rejection is needed, and no thread.
 *
 * A key's first rejection after a quiet 10 s writes its line at once; the next ones are
 * counted and the latest one's values kept. A key with rejections held back is on a list in
 * the order they are due (its first held rejection plus 10 s). A worker arms its timer for
 * that time when one of its rejections is the first held back of a key (or earlier than its
 * timer already is); when it fires it writes every held line due (outside the mutex) and
 * arms itself for the next one on the list, whichever worker's it is, so a held line always
 * has a timer at or before its time. At exit, main writes every line still held.
 *
 * A rejection that comes 10 s after the key's last line writes the held count with it.
 */
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
