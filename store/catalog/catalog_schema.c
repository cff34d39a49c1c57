/* The catalog's schema: the forward migrations that catalog_begin applies. See catalog.h. */
#include "store/catalog/catalog_impl.h"

/* Triggers that mark the catalog changed since it was last published or pulled: every
 * write to a table the fleet shares. WHEN keeps a bulk write (an import) at one cheap
 * lookup per row once the mark is set. */
#define CHANGED_TRIGGER(table, op) \
    "CREATE TRIGGER fleet_changed_" table "_" op " AFTER " op " ON " table \
    "  WHEN (SELECT changed FROM fleet WHERE id = 1) = 0" \
    "  BEGIN UPDATE fleet SET changed = 1 WHERE id = 1; END;"
#define CHANGED_TRIGGERS(table) \
    CHANGED_TRIGGER(table, "INSERT") CHANGED_TRIGGER(table, "UPDATE") CHANGED_TRIGGER(table, "DELETE")

/* Forward migrations: step i brings user_version from i to i + 1. Append, never edit. */
const char *const catalog_migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE plans ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT NOT NULL UNIQUE,"
    "  shadow INTEGER NOT NULL DEFAULT 0 CHECK (shadow IN (0, 1)));"
    /* AUTOINCREMENT: a limit id names limiter state in Redis, so ids are never reused. */
    "CREATE TABLE limits ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  plan_id INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,"
    "  kind TEXT NOT NULL CHECK (kind IN ('rate', 'concurrency', 'ws_messages')),"
    "  algorithm TEXT CHECK (algorithm IN"
    "    ('sliding-log', 'sliding-window', 'token-bucket', 'fixed-window')),"
    "  amount INTEGER NOT NULL CHECK (amount >= 1),"
    "  window_ms INTEGER NOT NULL DEFAULT 0 CHECK (window_ms >= 0),"
    "  burst INTEGER NOT NULL DEFAULT 0 CHECK (burst >= 0),"
    "  route_method TEXT,"
    "  route_prefix TEXT,"
    "  CHECK ((route_method IS NULL) = (route_prefix IS NULL)));"
    "CREATE INDEX limits_plan ON limits(plan_id);"
    "CREATE TABLE users ("
    "  id TEXT PRIMARY KEY NOT NULL,"
    "  plan_id INTEGER NOT NULL REFERENCES plans(id),"
    "  created TEXT NOT NULL);"
    "CREATE INDEX users_plan ON users(plan_id);"
    /* No foreign key on user_id: the revoked keys of a removed user stay on record. */
    "CREATE TABLE api_keys ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  user_id TEXT NOT NULL,"
    "  hash BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),"
    "  label TEXT NOT NULL DEFAULT '',"
    "  created TEXT NOT NULL,"
    "  revoked TEXT);"
    "CREATE INDEX api_keys_user ON api_keys(user_id);",
    /* 1 -> 2: plan priority; quotas (a kind with its period) and users' own limits, in the
     * one limits table so that their ids share its sequence (an id names state in the
     * store); costs per plan and route. SQLite cannot change a CHECK in place: the limits
     * table is rebuilt, its rows and id high-water mark kept. */
    "ALTER TABLE plans ADD COLUMN priority INTEGER NOT NULL DEFAULT 5"
    "  CHECK (priority BETWEEN 0 AND 9);"
    "CREATE TEMP TABLE limits_seq AS SELECT seq FROM sqlite_sequence WHERE name = 'limits';"
    "CREATE TABLE limits_v2 ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  plan_id INTEGER REFERENCES plans(id) ON DELETE CASCADE,"
    "  user_id TEXT REFERENCES users(id) ON DELETE CASCADE,"
    "  kind TEXT NOT NULL CHECK (kind IN ('rate', 'concurrency', 'ws_messages', 'quota')),"
    "  algorithm TEXT CHECK (algorithm IN"
    "    ('sliding-log', 'sliding-window', 'token-bucket', 'fixed-window')),"
    "  amount INTEGER NOT NULL CHECK (amount >= 1),"
    "  window_ms INTEGER NOT NULL DEFAULT 0 CHECK (window_ms >= 0),"
    "  burst INTEGER NOT NULL DEFAULT 0 CHECK (burst >= 0),"
    "  period TEXT CHECK (period IN ('day', 'week', 'month')),"
    "  route_method TEXT,"
    "  route_prefix TEXT,"
    "  CHECK ((route_method IS NULL) = (route_prefix IS NULL)),"
    "  CHECK ((plan_id IS NULL) <> (user_id IS NULL)),"
    "  CHECK ((kind = 'quota') = (period IS NOT NULL)));"
    "INSERT INTO limits_v2 (id, plan_id, kind, algorithm, amount, window_ms, burst, route_method, route_prefix)"
    "  SELECT id, plan_id, kind, algorithm, amount, window_ms, burst, route_method, route_prefix FROM limits;"
    "DROP TABLE limits;"
    "ALTER TABLE limits_v2 RENAME TO limits;"
    "CREATE INDEX limits_plan ON limits(plan_id);"
    "CREATE INDEX limits_user ON limits(user_id);"
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'limits', 0"
    "  WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'limits');"
    "UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT max(seq) FROM temp.limits_seq), 0))"
    "  WHERE name = 'limits';"
    "DROP TABLE temp.limits_seq;"
    "CREATE TABLE costs ("
    "  plan_id INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,"
    "  route_method TEXT NOT NULL,"
    "  route_prefix TEXT NOT NULL,"
    "  cost INTEGER NOT NULL CHECK (cost >= 1),"
    "  PRIMARY KEY (plan_id, route_method, route_prefix));",
    /* 2 -> 3: the fleet's version of this catalog (the one last published or pulled, 0 =
     * never) and whether the catalog changed since (store/catalog/catalog_image.c). */
    "CREATE TABLE fleet ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  version INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),"
    "  changed INTEGER NOT NULL DEFAULT 1 CHECK (changed IN (0, 1)));"
    "INSERT INTO fleet (id) VALUES (1);"
    CHANGED_TRIGGERS("plans") CHANGED_TRIGGERS("limits") CHANGED_TRIGGERS("users")
    CHANGED_TRIGGERS("api_keys") CHANGED_TRIGGERS("costs"),
};
#define N_MIGRATIONS ((int)(sizeof(catalog_migrations) / sizeof(catalog_migrations[0])))
_Static_assert(N_MIGRATIONS == CATALOG_SCHEMA_VERSION, "one migration step per schema version");
