/* The SQLite catalog: plans, their limits, users and API keys (as SHA-256 hashes).
 *
 * One `struct catalog` is one SQLite connection, used by one thread at a time. The file is
 * in WAL mode, so tierctl can write while proxies read. The schema is versioned with
 * PRAGMA user_version and migrated forward by a table of steps when a writer begins a
 * transaction (catalog_schema.c, `catalog_migrations`; catalog.c runs them).
 *
 * Every call that reads or writes records must run inside catalog_begin()/catalog_commit():
 * a command is one transaction, and a failed command is rolled back as a whole.
 *
 * Return values, everywhere below: 0 success; a positive CATALOG_* code for an expected
 * refusal ("no such plan", "already exists"); a negative errno for a failure (-EBUSY locked
 * by another writer past the busy timeout, -EIO an SQLite error, -ENOMEM, -ENOENT no file).
 * For every non-zero return, catalog_errmsg() holds one line saying why, e.g.
 * `no plan named "gold"`. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/limit.h"

#define CATALOG_SCHEMA_VERSION 3
#define CATALOG_BUSY_TIMEOUT_MS 5000
#define CATALOG_HASH_LEN 32              /* SHA-256 of the key text */
#define CATALOG_ID_MAX (INT64_C(1) << 53) /* plan, limit and key ids: what JSON carries exactly */
#define CATALOG_NAME_MAX 64              /* plan names */
#define CATALOG_USER_ID_MAX 128
#define CATALOG_LABEL_MAX 200
#define CATALOG_METHOD_MAX 15            /* route methods; "*" = any */
#define CATALOG_PREFIX_MAX 1024          /* route prefixes */
#define CATALOG_MAX_CONCURRENCY 1000000
#define CATALOG_MAX_COST 1000000000      /* units one request can count (tierctl cost set) */
#define CATALOG_PRIORITY_MIN 0           /* shed first */
#define CATALOG_PRIORITY_MAX 9           /* shed last */
#define CATALOG_PRIORITY_DEFAULT 5

enum catalog_status {
    CATALOG_NOT_FOUND = 1,   /* no such plan, limit, user or key */
    CATALOG_EXISTS,          /* a plan or user with that name/id already exists */
    CATALOG_IN_USE,          /* a plan that users are on */
    CATALOG_INVALID,         /* a value out of range or badly formed */
    CATALOG_ALREADY,         /* nothing to do: key already revoked */
};

enum catalog_mode {
    CATALOG_READ_ONLY,       /* the file must exist and be at the current schema */
    CATALOG_READ_WRITE,      /* the file must exist; writers migrate older schemas */
    CATALOG_CREATE,          /* creates the file, and the schema on the first write */
    CATALOG_CACHE,           /* read-write in the journal mode the file has: a follower's */
                             /* cache, which a new version may be renamed over */
};

/* A catalog limit's kind: what it bounds (the column `kind`; tierctl --rate,
 * --concurrency, --ws-messages). A rate limit also has an algorithm, which makes its
 * store kind (enum limit_kind, store/limit.h). */
enum catalog_limit_kind {
    CATALOG_LIMIT_RATE = 0,
    CATALOG_LIMIT_CONCURRENCY,
    CATALOG_LIMIT_WS_MESSAGES,
    CATALOG_LIMIT_QUOTA,         /* amount per calendar period (tierctl --quota; schema 2) */
};

/* Records as read and written. String pointers handed to callbacks are only valid during
 * the callback; the catalog never keeps pointers passed in. */
struct catalog_plan {
    int64_t id;                  /* on add: 0 = allocate, > 0 = keep (import) */
    const char *name;
    bool shadow;
    int priority;                /* CATALOG_PRIORITY_MIN..MAX; schema 1 files read as the default */
};

struct catalog_limit {
    int64_t id;                  /* on add: 0 = allocate, > 0 = keep (import) */
    int64_t plan_id;
    enum catalog_limit_kind kind;
    enum limit_kind algorithm;   /* rate only: the rate kind, named after its algorithm (the
                                  * column `algorithm`, tierctl --algorithm); sliding-log for
                                  * the other kinds */
    int64_t amount;              /* requests (rate), connections (concurrency), messages */
    int64_t window_ms;           /* rate and ws_messages; 0 for concurrency */
    int64_t burst;               /* rate only; 0 for the other kinds */
    const char *route_method;    /* NULL = route-less (plan-wide); "*" = any method */
    const char *route_prefix;    /* NULL with route_method */
    enum limit_period period;    /* quota only; LIMIT_PERIOD_NONE for the other kinds */
    const char *user_id;         /* a user's own limit (plan_id 0); NULL = a plan's limit */
};

/* A plan's cost for one route: requests whose method and path match it (the longest
 * matching prefix of the plan's costs wins, like limit routes) count `cost` units against
 * every rate limit and quota they meet. */
struct catalog_cost {
    int64_t plan_id;
    const char *route_method;    /* "*" = any method */
    const char *route_prefix;
    int64_t cost;                /* 1..CATALOG_MAX_COST */
};

struct catalog_user {
    const char *id;
    int64_t plan_id;
    const char *plan_name;       /* set when read; ignored on add */
    const char *created;         /* "YYYY-MM-DDTHH:MM:SSZ" (UTC); on add NULL = now */
};

struct catalog_key {
    int64_t id;                  /* on add: 0 = allocate, > 0 = keep (import) */
    const char *user_id;
    uint8_t hash[CATALOG_HASH_LEN];
    const char *label;           /* "" when none */
    const char *created;         /* on add NULL = now */
    const char *revoked;         /* NULL = active, else when it was revoked */
};

struct catalog;

/* Opens (CATALOG_CREATE: creates) the catalog at path: busy timeout
 * CATALOG_BUSY_TIMEOUT_MS, foreign keys on, WAL for writers but the cache. A read-only open does no I/O
 * yet; the schema is checked by catalog_begin. Returns 0 and sets *pcat, or a negative
 * errno with a reason in err. Free with catalog_close. */
int catalog_open(const char *path, enum catalog_mode mode, struct catalog **pcat,
                 char *err, size_t errlen);

/* A catalog file that CATALOG_CREATE makes is readable and writable by its owner only
 * (0600, whatever the umask); SQLite gives its -wal and -shm files the same mode. An
 * existing file keeps the mode it has. */

/* Rolls back an open transaction and closes the connection. NULL is allowed. */
void catalog_close(struct catalog *cat);

/* One line saying why the last call failed. Owned by cat. */
const char *catalog_errmsg(const struct catalog *cat);

/* How long a statement waits for another connection's lock before failing with -EBUSY. */
void catalog_set_busy_timeout(struct catalog *cat, int ms);

/* Begins a transaction: a write one takes the write lock at once (BEGIN IMMEDIATE) and
 * migrates an older schema forward (from an empty file only in CATALOG_CREATE mode); a
 * read one sees one consistent state of the current schema or an older one (schema 1
 * reads as plans of priority 5 with no quotas, costs or user limits; the first write
 * migrates it). Returns 0, or non-zero with nothing begun. */
int catalog_begin(struct catalog *cat, bool write);
int catalog_commit(struct catalog *cat);
/* Rolls back the open transaction, if any. */
void catalog_rollback(struct catalog *cat);

/* PRAGMA data_version through a persistent statement: changes after another connection
 * commits a change. For the snapshot watcher; call outside a transaction. */
int catalog_data_version(struct catalog *cat, int64_t *pversion);

/* The schema version of the file (0 = empty). */
int catalog_schema_version(struct catalog *cat, int *pversion);

/* Checks of names and values, shared by tierctl, import and the add calls below.
 * Return 0, or CATALOG_INVALID with one line saying why in err (errlen bytes). */
int catalog_check_plan_name(const char *name, char *err, size_t errlen);
int catalog_check_user_id(const char *id, char *err, size_t errlen);
int catalog_check_label(const char *label, char *err, size_t errlen);
int catalog_check_route(const char *method, const char *prefix, char *err, size_t errlen);
int catalog_check_limit(const struct catalog_limit *limit, char *err, size_t errlen);
int catalog_check_time(const char *text, char *err, size_t errlen);

/* "rate", "concurrency", "ws_messages", "quota" and back. parse returns 0 or CATALOG_INVALID. */
const char *catalog_limit_kind_name(enum catalog_limit_kind kind);
int catalog_limit_kind_parse(const char *text, enum catalog_limit_kind *pkind);

/* Iteration: fn is called once per record in id order (users: in id byte order); a
 * non-zero return from fn stops the walk and is returned. */
typedef int catalog_plan_fn(void *ctx, const struct catalog_plan *plan);
typedef int catalog_limit_fn(void *ctx, const struct catalog_limit *limit);
typedef int catalog_user_fn(void *ctx, const struct catalog_user *user);
typedef int catalog_key_fn(void *ctx, const struct catalog_key *key);
typedef int catalog_cost_fn(void *ctx, const struct catalog_cost *cost);

/* Plans. add returns CATALOG_EXISTS for a taken name; remove returns CATALOG_IN_USE while
 * users are on the plan and removes its limits with it. */
int catalog_plan_add(struct catalog *cat, const struct catalog_plan *plan, int64_t *pid);
int catalog_plan_find(struct catalog *cat, const char *name, int64_t *pid, bool *pshadow);
int catalog_plan_set_shadow(struct catalog *cat, int64_t plan_id, bool shadow);
/* The plan's priority; set returns CATALOG_INVALID outside CATALOG_PRIORITY_MIN..MAX. */
int catalog_plan_priority(struct catalog *cat, int64_t plan_id, int *ppriority);
int catalog_plan_set_priority(struct catalog *cat, int64_t plan_id, int priority);
int catalog_plan_remove(struct catalog *cat, int64_t plan_id);
int catalog_plan_user_count(struct catalog *cat, int64_t plan_id, int64_t *pcount);
int catalog_plan_each(struct catalog *cat, catalog_plan_fn *fn, void *ctx);

/* Limits. plan_id 0 in catalog_limit_each walks every plan's limits (ordered by plan id,
 * then limit id). remove returns CATALOG_NOT_FOUND unless the limit belongs to the plan.
 * remove_routeless deletes the plan's route-less limits of one kind and sets *pcount. */
int catalog_limit_add(struct catalog *cat, const struct catalog_limit *limit, int64_t *pid);
int catalog_limit_remove(struct catalog *cat, int64_t plan_id, int64_t limit_id);
/* Changes the numbers (algorithm, amount, window, burst) of limit->id in place, so that it
 * keeps its id and the limiter state the stores hold under it. Its plan, kind and route
 * must be those on record (they are not changed); CATALOG_NOT_FOUND when the plan has no
 * such limit of that kind, CATALOG_INVALID when the numbers are out of range. */
int catalog_limit_update(struct catalog *cat, const struct catalog_limit *limit);
int catalog_limit_remove_routeless(struct catalog *cat, int64_t plan_id,
                                   enum catalog_limit_kind kind, int64_t *pcount);
int catalog_limit_each(struct catalog *cat, int64_t plan_id, catalog_limit_fn *fn, void *ctx);

/* A user's own limits (catalog_limit.user_id set, plan_id 0): catalog_limit_add adds one
 * (the user must exist); they go with the user when it is removed. user_limit_each walks
 * one user's (user_id NULL: every user's, ordered by user id, then limit id);
 * catalog_limit_each never shows them. remove returns CATALOG_NOT_FOUND unless the limit
 * is that user's. */
int catalog_user_limit_each(struct catalog *cat, const char *user_id, catalog_limit_fn *fn, void *ctx);
int catalog_user_limit_remove(struct catalog *cat, const char *user_id, int64_t limit_id);

/* Costs. set adds or replaces the plan's cost for the route (*preplaced: the cost it had,
 * 0 = none); remove returns CATALOG_NOT_FOUND when the plan has none for it. each walks
 * one plan's costs (plan_id 0: every plan's), ordered by plan id, method, prefix. */
int catalog_check_cost(const struct catalog_cost *cost, char *err, size_t errlen);
int catalog_cost_set(struct catalog *cat, const struct catalog_cost *cost, int64_t *preplaced);
int catalog_cost_remove(struct catalog *cat, int64_t plan_id, const char *method, const char *prefix);
int catalog_cost_each(struct catalog *cat, int64_t plan_id, catalog_cost_fn *fn, void *ctx);

/* Users. remove revokes the user's active keys (the key rows stay, revoked, for the
 * record) and deletes the user. plan_id 0 in catalog_user_each walks every user. */
int catalog_user_add(struct catalog *cat, const struct catalog_user *user);
int catalog_user_find(struct catalog *cat, const char *id, int64_t *pplan_id);
/* Calls fn once with the user's record, or returns CATALOG_NOT_FOUND. */
int catalog_user_get(struct catalog *cat, const char *id, catalog_user_fn *fn, void *ctx);
int catalog_user_set_plan(struct catalog *cat, const char *id, int64_t plan_id);
int catalog_user_remove(struct catalog *cat, const char *id, int64_t *prevoked);
int catalog_user_each(struct catalog *cat, int64_t plan_id, catalog_user_fn *fn, void *ctx);

/* API keys, stored as hashes only. add requires an existing user (unless the key is
 * added already revoked, as import does for keys of removed users). revoke returns
 * CATALOG_ALREADY for a revoked key.
 * catalog_key_each: user_id NULL = every user; active_only skips revoked keys and keys
 * whose user is gone (what a proxy may accept). */
int catalog_key_add(struct catalog *cat, const struct catalog_key *key, int64_t *pid);
int catalog_key_revoke(struct catalog *cat, int64_t key_id);
int catalog_key_each(struct catalog *cat, const char *user_id, bool active_only,
                     catalog_key_fn *fn, void *ctx);

/* Writes a consistent copy of the catalog, as of the caller's transaction, to a new file
 * at path (SQLite's online backup API: committed changes still in the WAL are in it,
 * other connections' uncommitted ones are not, and nobody is blocked). The copy is created
 * 0600 and appears whole or not at all: it is written to a temporary file beside path and
 * linked to path only when complete. Returns CATALOG_EXISTS when path exists (nothing is
 * ever overwritten), a negative errno otherwise; the reason in catalog_errmsg. */
int catalog_backup(struct catalog *cat, const char *path);

/* Import support. clear deletes every record but keeps the id high-water marks, so ids
 * are never reused. table is "plans", "limits" or "api_keys". sequence_raise sets the
 * high-water mark to at least value. */
int catalog_clear(struct catalog *cat);
int catalog_sequence_get(struct catalog *cat, const char *table, int64_t *pvalue);
int catalog_sequence_raise(struct catalog *cat, const char *table, int64_t value);
