/* A log throttle: at most one line per key per interval, each line saying how many
 * events it stands for. For the rejection warnings: a user hammering a limit at 76k
 * requests a second writes one stderr line per 10 s, not 76k; and the events held back
 * are written when their interval is over (log_throttle_flush, from a timer), not only
 * when another event of the key comes.
 *
 * One table for the process, shared by the worker threads under one mutex, so the
 * budget holds however the kernel spreads a user's connections over workers. The table
 * is bounded: `capacity` keys, set-associative; when a set is full the key whose last
 * line is oldest is forgotten, a key with events held back only when every key of its
 * set has some (its held-back count is then dropped from the log; the metrics count every
 * event), and a forgotten key's next event writes a line at once: a flood of distinct keys
 * costs lines, never memory. Keys are held as 64-bit hashes with a random seed per table:
 * two keys with one hash would share a budget (odds 2^-64). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most a held line (log_throttle_hit's `line`) may hold. */
#define LOG_THROTTLE_LINE_MAX 512

struct log_throttle;

/* capacity: keys remembered, rounded up to a power of two (at least 8). interval_ms:
 * the time between two lines for one key. Returns NULL when out of memory. */
struct log_throttle *log_throttle_create(size_t capacity, int64_t interval_ms);
/* Frees the table and the lines it holds (without writing them: log_throttle_flush first). */
void log_throttle_destroy(struct log_throttle *t);

/* Counts one event for key (len bytes) at now_ms (a monotonic clock). Returns true when
 * a line is due now, with *pcount the events it stands for: this one and those held back
 * since the key's last line. Returns false when the event is held back: the key then
 * keeps a copy of `line` (line_len bytes, at most LOG_THROTTLE_LINE_MAX; NULL for none),
 * what its held line will say (the latest held event's), and *pflush_ms (when not NULL)
 * is when that line is due: its first held event plus the interval (so at most one line
 * per interval, and within one interval of the last held event). Thread-safe. */
bool log_throttle_hit(struct log_throttle *t, const void *key, size_t len, int64_t now_ms, const void *line,
                      size_t line_len, uint64_t *pcount, int64_t *pflush_ms);

/* write(arg, line, line_len, count): one held line, standing for count events. */
typedef void log_throttle_write_fn(void *arg, const void *line, size_t line_len, uint64_t count);

/* Writes each held line due at now_ms (INT64_MAX: every one) through write, outside the
 * lock, and forgets it (the key's next event is held until one interval after this line).
 * Returns when the next held line is due, or -1 when none is held. Thread-safe. */
int64_t log_throttle_flush(struct log_throttle *t, int64_t now_ms, log_throttle_write_fn *write, void *arg);
