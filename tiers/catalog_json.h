/* The catalog as JSON: `tierctl export`/`import` and tierctl's --json output.
 *
 * Export format (version 2; version 1 lacks priority, costs, quotas and users' limits and
 * still imports); objects in id order, keys in the order shown:
 *   {"format": "tierproxy-catalog", "version": 1,
 *    "last_ids": {"plans": 3, "limits": 6, "api_keys": 2},   high-water marks: ids are
 *                                                              never reused, even after import
 *    "plans": [{"id": 1, "name": "free", "shadow": false, "priority": 5, "limits": [
 *        {"id": 1, "kind": "rate", "amount": 100, "window_ms": 60000, "burst": 0,
 *         "algorithm": "sliding-log"},
 *        {"id": 2, "kind": "concurrency", "amount": 10},
 *        {"id": 7, "kind": "ws_messages", "amount": 10, "window_ms": 1000},
 *        {"id": 8, "kind": "rate", ..., "route": "GET /v1/search"},
 *        {"id": 9, "kind": "quota", "amount": 10000, "period": "month"}],
 *      "costs": [{"route": "POST /batch", "cost": 10}]}],
 *    "users": [{"id": "alice", "plan": "free", "created": "2024-05-01T12:00:00Z",
 *               "limits": [{"id": 10, "kind": "rate", ...}]}],
 *    "api_keys": [{"id": 1, "user": "alice", "label": "ci", "sha256": "<64 hex>",
 *                  "created": "...", "revoked": null}]}
 * Import accepts exactly this (unknown fields are errors; "burst" defaults to 0,
 * "algorithm" to sliding-log, "shadow" to false, "priority" to 5, "costs" and a user's
 * "limits" to [], "label" to "", "revoked" to null,
 * "last_ids" to the largest ids present).
 *
 * Ids end at 2^53 (CATALOG_ID_MAX), what a JSON number carries exactly: import refuses a
 * larger id or last_ids value, naming the field, and the catalog refuses a row whose id
 * would pass it (catalog_inserted_id). A key's label must be UTF-8 (store/catalog/utf8.h); a label
 * an older tierctl took that is not is written with each such byte as "?"
 * (catalog_json_text: the length kept, so it still fits its 200 bytes and the export
 * imports whole), and export names the first such field on stderr.
 */
#pragma once
#include <stddef.h>

#include <jansson.h>

#include "store/catalog/catalog.h"

#define CATALOG_JSON_FORMAT "tierproxy-catalog"
#define CATALOG_JSON_VERSION 2   /* 2: priority, quotas, costs, users' own limits; 1 still imports */

/* What an export wrote otherwise than the catalog holds it: names and labels that are not
 * valid UTF-8 (an older tierctl took such labels), written as catalog_json_text does. */
struct catalog_json_repairs {
    size_t count;
    char first[96];                    /* the first of them: "key 3's label" */
};

/* The whole catalog; the caller holds a transaction. Returns 0 and sets *pdoc (the caller
 * json_decrefs it) and *repairs (may be NULL), or non-zero with the reason in err. */
int catalog_json_export(struct catalog *cat, json_t **pdoc, struct catalog_json_repairs *repairs, char *err,
                        size_t errlen);

/* Checks all of doc, then replaces every plan, limit, user and key with its contents,
 * keeping their ids. The caller holds a write transaction and rolls it back on failure.
 * Returns 0; CATALOG_INVALID with the reason and where (e.g. "plans[1].limits[0]: ...")
 * in err, with the catalog untouched; or another non-zero catalog code. */
int catalog_json_import(struct catalog *cat, json_t *doc, char *err, size_t errlen);

/* A catalog string as JSON text: as it is when it is valid UTF-8, else with '?' for each byte
 * that is not (utf8_repair), so that whatever the catalog holds can be written. Returns a new
 * reference, NULL on allocation failure. */
json_t *catalog_json_text(const char *s);

/* One record as JSON (export form); strings as catalog_json_text writes them. Return a new
 * reference, NULL on allocation failure. */
json_t *catalog_json_limit(const struct catalog_limit *limit);
json_t *catalog_json_user(const struct catalog_user *user);
json_t *catalog_json_cost(const struct catalog_cost *cost);   /* {"route": "POST /batch", "cost": 10} */
json_t *catalog_json_key(const struct catalog_key *key, int with_hash);
