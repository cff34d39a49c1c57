/* Following the fleet's catalog ([plans] follow = redis): each poll asks the fleet's Redis
 * for the published version (one HGET) and, when it is newer than the one in the db file,
 * fetches the publication whole, checks it and installs it in the file
 * (tiers/catalog_install.h). The file is the proxy's local cache: what it serves from, at
 * start too, while Redis is away. Driven by the snapshot watcher's thread
 * (snapshot_watch_start_following), never by a worker.
 *
 * It says what happens in one line each, through the log callback: a version installed, a
 * version refused (and the proxy keeps what it has), nothing published, a published
 * version older than the file's, the Redis unreachable and back; and, at DEBUG, what each
 * poll found. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "store/fleet_redis.h"

/* DEBUG: each poll's answer (the version published and the one held) */
enum catalog_follow_level { CATALOG_FOLLOW_DEBUG, CATALOG_FOLLOW_INFO, CATALOG_FOLLOW_WARN, CATALOG_FOLLOW_ERROR };

typedef void catalog_follow_log_fn(void *ctx, enum catalog_follow_level level, const char *message);

struct catalog_follow_options {
    const char *db_path;
    struct fleet_redis_options redis;
    const char *name;                  /* how this proxy shows in `tierctl status` */
    catalog_follow_log_fn *log;
    void *log_ctx;
};

struct catalog_follow;

/* Checks the options (no I/O yet). Returns 0, or -EINVAL with why in err. */
int catalog_follow_create(const struct catalog_follow_options *options, struct catalog_follow **pfollow, char *err,
                          size_t errlen);
void catalog_follow_destroy(struct catalog_follow *follow);

/* One poll. Returns 1 when a new version was installed in the file, 0 otherwise (nothing
 * new, refused, Redis away: the file keeps serving). */
int catalog_follow_poll(struct catalog_follow *follow);

struct catalog_key_change;

/* After a poll that installed a version from the rows of api_keys alone: hands over each
 * key as it is now (*pkeys, free()) and the version, once, so that the snapshot can be
 * patched instead of rebuilt. false after any other poll. */
bool catalog_follow_take_keys(struct catalog_follow *follow, struct catalog_key_change **pkeys, size_t *pn,
                              int64_t *pversion);

/* How many published versions were refused (for /metrics); any thread. */
uint64_t catalog_follow_refused(const struct catalog_follow *follow);
