/* The access log: one JSON object per request, written with a single write(2) so lines
 * from several workers never interleave. Never holds an API key: the request path hands
 * it user ids, plan names and the path only.
 *
 * "decision" says why a request went as it did: a refused key is missing_key (no key, and
 * no anonymous_plan) or invalid_key (unknown or revoked); a 401 has no limiter decision to
 * report (tierctl simulate counts either as not checked). "upstream_error"
 * (upstream_error.h) is on a 502 or 504 line, or on the 499 of a client that left before
 * the failure was answered.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* log_line_start and log_line_write, which the rejection warning and other stderr lines
 * use, are in log.h. */
#include "proxy/log.h"

struct access_log;

struct access_entry {
    int64_t time_unix_ms;
    int64_t decision_unix_ms;    /* the limiter's clock when it decided (Unix ms); 0: none did */
    const char *client;
    const char *method;
    const char *path;            /* raw path and query */
    const char *path_key_query;  /* [auth] key_query: the parameter logged without (NULL: off) */
    unsigned status;
    const char *user;            /* NULL when unauthenticated */
    const char *plan;
    const char *decision;        /* "allowed", "rejected", "shadow", "exempt", "missing_key",
                                    "invalid_key", "store_unavailable", "local" (the local
                                    fallback decided, store away), "shed"
                                    (upstream_saturated), "error" */
    bool has_limit;
    int64_t limit, remaining;
    const char *limit_type;      /* for a rejection: "http", "concurrency", ... */
    int64_t current_count;
    int64_t upstream_ms;         /* -1 when not forwarded */
    const char *upstream_error;  /* why the upstream gave no answer (its 502 or 504; a 499 whose
                                    client left first); NULL when it answered */
    int64_t total_ms;
    uint64_t bytes_sent;
};

/* target: "-" for stdout, else a path opened for appending. Returns 0 and sets *plog,
 * or a negative errno with a reason in err. */
int access_log_open(const char *target, struct access_log **plog, char *err, size_t errlen);
void access_log_close(struct access_log *log);

/* Opens the log's path again and writes there from now on (logrotate renamed the file,
 * then sent SIGUSR1). Safe while workers write. Returns 0; 1 when the log is stdout (nothing
 * to reopen); a negative errno with a reason in err, the old file still in use. */
int access_log_reopen(struct access_log *log, char *err, size_t errlen);

void access_log_write(struct access_log *log, const struct access_entry *e);

