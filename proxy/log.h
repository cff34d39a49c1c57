/* tierproxy's diagnostics on stderr: one JSON object per line, written with a single
 * write(2) so lines from several threads never interleave:
 *
 *   {"time":"2026-11-28T12:00:00.000Z","level":"warn","msg":"...", ...fields}
 *
 * "time" is UTC with milliseconds, "level" one of error, warn, info, debug, "msg" a
 * sentence for a person; the fields after them (where, store_error, count, ...) are for
 * machines. Lines above the level set by [log] level are not written: error shows only
 * errors, warn adds warnings, info (the default) what the proxy does (start, reload, stop),
 * debug adds what it checks on its own (each setting and where it came from, each catalog
 * poll, the addresses resolved). Any thread may log.
 *
 * Writing: log_say(level, fmt, ...), or log_line_start("warn", msg), fields added with
 * jansson, then log_line_write(line); log_line_start returns NULL for a level not shown and
 * log_line_write(NULL) writes nothing, so a caller does not check the level itself
 * (log_enabled is for work worth skipping). Never a key or a password: user ids, plan
 * names, paths, and URLs through config_quote_url. What each level holds: error: the proxy
 * cannot do what is configured, or a request could not be served as configured
 * (configuration problems, a listener or worker that cannot start, a reload refused, the
 * store unreachable or answering errors, a catalog refused, TLS to an upstream failing);
 * warn: serving, but not as it should (certificates not verified, a rejection, out of
 * descriptors, an upstream name that does not resolve, settings a reload cannot change, the
 * fleet's catalog unreachable or older, --check's warnings); info: configuration ok,
 * listening, reloaded, reopened, draining, the store back, a catalog version installed;
 * debug: every setting and its origin, what a listen name resolved to, each upstream
 * --check reached, each poll of the fleet's catalog. Usage errors and the configuration's
 * problems at start are written before [log] level is known, so always.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

/* "error", "warn", "info" or "debug" (the [log] level words). Returns 0, or -EINVAL. */
int log_level_parse(const char *word, enum log_level *plevel);
const char *log_level_name(enum log_level level);

/* Lines above level are dropped from now on (a reload changes it). Default: info. */
void log_set_level(enum log_level level);
bool log_enabled(enum log_level level);

/* A line with "time", "level" and "msg" set; the caller adds its fields, then
 * log_line_write writes it and frees it. NULL when the level is not shown (or out of
 * memory): log_line_write(NULL) writes nothing. level is a log_level_name word. */
json_t *log_line_start(const char *level, const char *msg);
void log_line_write(json_t *line);

/* One line with msg made from fmt, and no other field. */
void log_say(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One line whose msg is where, ": ", then fmt's text, with a "where" field: where the
 * value in question came from (config_origin's "FILE:LINE: [section] key", "--flag",
 * "TIERPROXY_SECTION_KEY"). where "" (or NULL) adds neither. */
void log_where(enum log_level level, const char *where, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* unix_ms as 2026-11-28T12:00:00.000Z (the access log's times too). buflen >= 25. */
void log_format_time(int64_t unix_ms, char *buf, size_t buflen);
/* Writes obj and a newline on fd in one write(2) (retried on EINTR or when short). */
void log_write_json(int fd, const json_t *obj);
