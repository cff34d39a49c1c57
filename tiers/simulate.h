/* `tierctl simulate`: replays a tierproxy access log against limits and says which
 * requests and users those limits would have rejected. It changes nothing.
 *
 * The replay drives the memory store (store/limiter.h, limiter_memory_create) with an
 * explicit clock, so it runs the very algorithm code the proxy's memory store runs; the
 * limits of a request are selected by tier_plan_rules (tiers/plan_rules.h), as the proxy
 * selects them.
 *
 * What is replayed: the lines whose decision says the proxy took the request to its
 * limiter ("allowed", "rejected", "shadow", "store_unavailable", "local") for a known
 * user. Lines with another decision ("exempt", "unauthenticated", "malformed",
 * "client_closed", "error") are counted as not checked. A line that is not an access-log
 * line (not JSON, no "decision" or "status", a bad time, longer than SIMULATE_MAX_LINE
 * bytes, a rotated log's partial last line) is skipped and counted, never fatal.
 *
 * When: each request is checked at its "decision_time" (the limiter's clock when the
 * proxy asked it), or, in a log without that field, at its start ("time", when it ended,
 * minus "total_ms"); requests are replayed in that order (ties in log order). A
 * concurrency slot is held from the check until the request ended ("time"); a request
 * that ended gives its slot back before one checked in the same millisecond.
 *
 * Whose limits: the given rules (LIMIT-FLAGS), else every request against one plan
 * (--plan), else each request against the current plan of its user in the catalog, or,
 * for a user no longer in the catalog, the plan the line names (counted as "no plan" when
 * that is gone too). Requests of the user "anonymous" (not a catalog user) count per
 * client address, as the proxy counts its anonymous plan. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "store/limit.h"
#include "tiers/snapshot.h"

#define SIMULATE_MAX_LINE 65536       /* longer lines are skipped */
#define SIMULATE_MAX_GIVEN 5          /* rules given on the command line: 4 rates, a concurrency */
#define SIMULATE_TOP_USERS 10

/* What a replay runs against. Exactly one of: n_given > 0 (given rules: rate rules and at
 * most one LIMIT_CONCURRENCY rule, ids distinct), plan != NULL, or neither (each user's
 * plan). snap is required unless rules are given. Nothing here is owned by the
 * simulation; it must outlive it. */
struct simulate_options {
    const struct snapshot *snap;
    const struct tier_plan *plan;
    struct limit_rule given[SIMULATE_MAX_GIVEN];
    size_t n_given;
};

/* One parsed access-log line. Strings point into the JSON document it came from. */
struct simulate_line {
    bool checked;            /* the proxy took it to the limiter */
    bool logged_rejected;    /* the proxy rejected it (decision "rejected" or "shadow") */
    int64_t decided_ms;      /* Unix ms it is replayed at */
    int64_t ended_ms;        /* Unix ms it ended: its concurrency slot is free from then */
    const char *user, *plan, *client, *method, *path, *decision;
};

/* Parses one line (len bytes, no newline). Returns 0 with *line filled and *pdoc set to
 * the document its strings live in (the caller json_decrefs it), or -EINVAL with the
 * reason in err (nothing to free). */
int simulate_parse_line(const char *text, size_t len, struct simulate_line *line, json_t **pdoc,
                        char *err, size_t errlen);

/* Parses "2026-11-25T12:00:00.123Z" (the access log's time format) into Unix ms.
 * Returns 0 or -EINVAL. */
int simulate_parse_time(const char *text, int64_t *pms);

struct simulate_user {
    const char *user;        /* the user id ("anonymous" for an anonymous client) */
    const char *client;      /* the client address of an anonymous one, else NULL */
    uint64_t requests, rejected;
};

struct simulate_report {
    uint64_t lines;               /* lines read */
    uint64_t requests;            /* replayed */
    uint64_t not_checked;         /* lines the proxy did not take to the limiter */
    uint64_t skipped;             /* not access-log lines */
    uint64_t no_plan;             /* checked lines whose user and plan are both gone */
    uint64_t rejected;            /* replayed requests the limits reject */
    uint64_t users, users_rejected;
    uint64_t logged_rejected, newly_rejected, no_longer_rejected;
    struct simulate_user top[SIMULATE_TOP_USERS];  /* most rejections first */
    size_t n_top;
    const uint64_t *rejected_lines;               /* line numbers, ascending */
    size_t n_rejected_lines;
};

struct simulation;

/* Returns 0 and sets *psim, -EINVAL for options that break the rules above, or -ENOMEM. */
int simulation_create(const struct simulate_options *options, struct simulation **psim);
void simulation_destroy(struct simulation *sim);

/* Adds line number lineno (from 1, ascending) of the log. Returns 0 when it was taken
 * (replayed or counted), 1 when it was skipped as no access-log line (the reason in err),
 * or -ENOMEM. */
int simulation_add(struct simulation *sim, uint64_t lineno, const char *text, size_t len, char *err,
                   size_t errlen);

/* Counts a line that was never parsed (longer than SIMULATE_MAX_LINE). */
void simulation_skip(struct simulation *sim);

/* The counts so far (lines, skipped); the whole report once simulation_run returned.
 * Valid until simulation_destroy. */
const struct simulate_report *simulation_counts(const struct simulation *sim);

/* Replays what was added. Returns 0 with the report (valid until simulation_destroy),
 * -EINVAL when called twice, or -ENOMEM. */
int simulation_run(struct simulation *sim, const struct simulate_report **preport);

/* The report as one JSON object (the caller decrefs it), NULL when out of memory.
 * log_path and against describe the run. */
json_t *simulate_report_json(const struct simulate_report *report, const char *log_path, const char *against);

/* The report as text. Returns 0, or -EIO when out could not be written. */
int simulate_report_print(const struct simulate_report *report, const char *log_path, const char *against,
                          FILE *out);

/* Reads the log at log_path, replays it and writes the report (JSON when json) on out;
 * each skipped line is named on diag ("tierctl: LOG:N: skipped: why", the first 10).
 * Returns 0; or -errno with one line in err: the log cannot be read, it has lines but no
 * access-log line, or out of memory. */
int simulate_file(const char *log_path, const struct simulate_options *options, const char *against, bool json,
                  FILE *out, FILE *diag, char *err, size_t errlen);
