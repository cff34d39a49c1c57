/* A log throttle: at most one line per key per interval, each line saying how many
 * events it stands for. For the rejection warnings: a user hammering a limit at 76k
 * requests a second writes one stderr line per 10 s, not 76k.
 *
 * One table for the process, shared by the worker threads under one mutex, so the
 * budget holds however the kernel spreads a user's connections over workers. The table
 * is bounded: `capacity` keys, set-associative; when a set is full the key whose last
 * line is oldest is forgotten. A forgotten key's held-back count is dropped from the
 * log (the metrics count every event), and its next event writes a line at once: a
 * flood of distinct keys costs lines, never memory. Keys are held as 64-bit hashes with
 * a random seed per table: two keys with one hash would share a budget (odds 2^-64). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct log_throttle;

/* capacity: keys remembered, rounded up to a power of two (at least 8). interval_ms:
 * the time between two lines for one key. Returns NULL when out of memory. */
struct log_throttle *log_throttle_create(size_t capacity, int64_t interval_ms);
void log_throttle_destroy(struct log_throttle *t);

/* Counts one event for key (len bytes) at now_ms (a monotonic clock). Returns true when
 * a line is due, with *pcount the events it stands for: this one and those held back
 * since the key's last line; false when the event is held back. Thread-safe. */
bool log_throttle_hit(struct log_throttle *t, const void *key, size_t len, int64_t now_ms, uint64_t *pcount);
