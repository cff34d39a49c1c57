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
 * poll found.
 *
 * A poll: every refresh_ms one HGET version; a newer version is fetched (the head, then its
 * chunks; a chunk gone means a newer publication replaced it, and the next poll reads that
 * one), its sha256 checked, installed, and the watcher rebuilds at once. Each Redis call is
 * bounded by 2 s. A follower whose file holds a version of the rows chain, unchanged since,
 * fetches the rows of every version it lacks in one HMGET, checks each digest and applies
 * them in order in one transaction with foreign keys off (cascades are rows of the
 * changeset already; PRAGMA foreign_key_check afterwards), every conflict aborting the
 * whole; then the records are checked as an image's are (when the rows touch api_keys
 * alone, only the keys and users they name). A follower not on the chain takes the image
 * and applies the rows since before renaming it into place. Refused versions
 * (tierproxy_catalog_refused_total) are not fetched again until a newer one appears. A
 * published version below the file's is not installed (a Redis restored from an older copy
 * would bring revoked keys back). No file and no Redis: no snapshot, 503
 * catalog_unavailable until a catalog arrives. The connection is named
 * tierproxy-follower:HOST:PID:vN (CLIENT SETNAME), which is how tierctl status lists the
 * proxies following and their versions (CLIENT LIST), with no writes and nothing to expire
 * when a proxy dies. A local tierctl change on a following proxy's file is served until the
 * next publication replaces it.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "store/redis/fleet_redis.h"

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
