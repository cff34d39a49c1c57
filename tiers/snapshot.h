/* An immutable in-memory copy of the catalog (plans, limits, users, keys) that the proxy
 * serves from, and the watcher that rebuilds it off the serving threads when the SQLite
 * file changes. Nothing here runs SQL on the request path. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limit.h"
#include "tiers/tier_limit.h"

#define TIER_KEY_HASH_LEN 32   /* SHA-256 */

/* A plan's cost for requests on one route (tierctl cost set). */
struct tier_cost {
    char route_method[16];         /* "*" = any method */
    const char *route_prefix;      /* owned by the snapshot */
    size_t route_prefix_len;
    int64_t cost;
};

#define TIER_PRIORITY_DEFAULT 5

struct tier_plan {
    int64_t id;
    const char *name;
    bool shadow;
    int priority;                  /* 0 (shed first) .. 9 (shed last), for upstream_max_inflight */
    const struct tier_limit *limits;
    size_t n_limits;
    const struct tier_cost *costs;
    size_t n_costs;
};

/* A user. own_plan, for a user with limits of its own, is the plan as it applies to that
 * user: the same id, name, shadow, priority and costs, with each of the plan's limits that
 * has a user limit of the same kind on the same route (or both route-less) replaced by the
 * user's (all of the user's of that kind and route), which go on with the replaced ones'
 * counts (own_limits.h); NULL when the user has none.
 * tier_user_plan gives the one to select limits from. */
struct tier_user {
    const char *id;
    const struct tier_plan *plan;
    const struct tier_limit *limits;     /* the user's own, in catalog id order */
    size_t n_limits;
    const struct tier_plan *own_plan;
};

static inline const struct tier_plan *tier_user_plan(const struct tier_user *user)
{
    return user->own_plan ? user->own_plan : user->plan;
}

/* The cost of a request on METHOD PATH under plan: the plan's cost whose route matches
 * with the longest prefix (a method-specific one beats "*" on the same prefix), or 1. */
int64_t tier_plan_cost(const struct tier_plan *plan, const char *method, const char *path, size_t path_len,
                       bool ignore_case);

struct snapshot;

/* Looks up an API key as presented by a client (hashes it with SHA-256).
 * Returns the key's user, or NULL for an unknown or revoked key. Pointers stay valid
 * while the caller holds the snapshot. */
const struct tier_user *snapshot_find_key(const struct snapshot *snap, const char *key, size_t key_len);

/* Returns the plan with that name, or NULL. */
const struct tier_plan *snapshot_find_plan(const struct snapshot *snap, const char *name);

size_t snapshot_user_count(const struct snapshot *snap);
size_t snapshot_key_count(const struct snapshot *snap);

/* Selects the limits that apply to METHOD PATH: every route-less limit of the plan, plus
 * the route limits of the longest matching route prefix (a method-specific route beats
 * "* /same-prefix"). Writes up to max pointers into out and returns how many apply
 * (which may exceed max; the caller passes a large enough array). */
size_t tier_plan_select(const struct tier_plan *plan, const char *method, const char *path,
                        size_t path_len, const struct tier_limit **out, size_t max);

/* tier_plan_select, with route prefixes compared ignoring ASCII case when ignore_case
 * ([proxy] path_case = insensitive). */
size_t tier_plan_select_case(const struct tier_plan *plan, const char *method, const char *path,
                             size_t path_len, bool ignore_case, const struct tier_limit **out, size_t max);

/* Loads a snapshot straight from the catalog file (read-only). Returns 0 and sets *psnap
 * (refcount 1), or a negative errno with a reason in err. */
int snapshot_load(const char *db_path, struct snapshot **psnap, char *err, size_t errlen);

/* Reference counting: a snapshot is freed when its last holder releases it. */
struct snapshot *snapshot_ref(struct snapshot *snap);
void snapshot_unref(struct snapshot *snap);

/* The watcher: loads the first snapshot synchronously, then a background thread polls
 * PRAGMA data_version every refresh_ms and publishes a rebuilt snapshot when it changed.
 * A failed rebuild keeps the previous snapshot. */
struct snapshot_watch;

/* Returns 0 and sets *pwatch, or a negative errno with a reason in err. */
int snapshot_watch_start(const char *db_path, int refresh_ms, struct snapshot_watch **pwatch,
                         char *err, size_t errlen);
void snapshot_watch_stop(struct snapshot_watch *watch);

/* Cheap (one atomic load): changes whenever a new snapshot is published. */
uint64_t snapshot_watch_generation(const struct snapshot_watch *watch);

/* Returns a new reference to the current snapshot; the caller unrefs it. */
struct snapshot *snapshot_watch_acquire(struct snapshot_watch *watch);

/* True when the last poll reached the catalog (for /health). */
bool snapshot_watch_healthy(const struct snapshot_watch *watch);

/* Milliseconds the last rebuild took (for logs and the note). */
double snapshot_watch_last_build_ms(const struct snapshot_watch *watch);

/* ---- added by the catalog side ---- */

struct catalog;

/* Builds a snapshot from an open catalog connection in one read transaction (the watcher
 * reuses its connection). Returns 0 and sets *psnap (refcount 1), or non-zero (a
 * catalog.h code; -EBUSY when locked) with a reason in err. */
int snapshot_build(struct catalog *cat, struct snapshot **psnap, char *err, size_t errlen);

/* Returns the user with that id, or NULL. */
const struct tier_user *snapshot_find_user(const struct snapshot *snap, const char *id);

size_t snapshot_plan_count(const struct snapshot *snap);

/* The plan at index i (0 <= i < snapshot_plan_count), in catalog id order. */
const struct tier_plan *snapshot_plan_at(const struct snapshot *snap, size_t i);

/* Copies the reason the last poll or rebuild failed ("" when the last one worked). */
void snapshot_watch_last_error(struct snapshot_watch *watch, char *buf, size_t buflen);

/* The fleet's version of the catalog the snapshot was built from (0: never published or
 * pulled; store/catalog/catalog_image.h). */
int64_t snapshot_catalog_version(const struct snapshot *snap);

/* A key a change created (user_id: its user's) or stopped (user_id NULL: revoked, deleted). */
struct snapshot_key_change {
    uint8_t hash[TIER_KEY_HASH_LEN];
    const char *user_id;
};

/* A new snapshot (refcount 1) of catalog_version: from's plans and users, its keys changed
 * by changes, in order. from is not changed. Returns 0; -ENOENT when a key's user is not
 * in from, -ENOSPC when too many keys changed since from was built (rebuild instead); or
 * -ENOMEM. */
int snapshot_patch_keys(struct snapshot *from, const struct snapshot_key_change *changes, size_t n,
                        int64_t catalog_version, struct snapshot **psnap);

struct catalog_follow;

/* The watcher of a proxy that follows the fleet's catalog (tiers/catalog_follow.h): each
 * poll first lets follow install a newer published version in the file, then rebuilds
 * from the file as above. The first poll runs before this returns; without a file and
 * without Redis it starts with no snapshot (requests get 503) and keeps polling. Takes
 * follow, also on failure. */
int snapshot_watch_start_following(const char *db_path, int refresh_ms, struct catalog_follow *follow,
                                   struct snapshot_watch **pwatch, char *err, size_t errlen);

/* The catalog version of the snapshot served, -1 without one; any thread. */
int64_t snapshot_watch_catalog_version(const struct snapshot_watch *watch);

/* Published versions refused by the follower (0 when not following); any thread. */
uint64_t snapshot_watch_catalog_refused(const struct snapshot_watch *watch);
