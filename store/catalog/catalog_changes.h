/* The rows a change writes to the tables the fleet shares, as an SQLite changeset (the
 * session extension), and those rows applied to another copy of the catalog: how one
 * change reaches the following proxies without the whole catalog (tiers/catalog_follow.c).
 *
 * A changeset names each row by its primary key and carries its values before and after
 * the change. Applied to a file that holds exactly the catalog the change started from, it
 * makes exactly the catalog the change made; where a row is not what it expects (a
 * conflict), or a table or a row's width is not this catalog's, nothing is applied. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/catalog/catalog.h"

struct catalog_changes;

/* Starts recording what cat's connection writes to the shared tables (plans, limits,
 * users, api_keys, costs). Returns 0, or non-zero with why in catalog_errmsg. */
int catalog_changes_record(struct catalog *cat, struct catalog_changes **pchanges);

/* The changeset of what was recorded, as the rows are now (*plen 0: nothing changed).
 * Free *pbuf with catalog_changes_free. Returns 0 or -ENOMEM/-EIO. */
int catalog_changes_take(struct catalog_changes *changes, unsigned char **pbuf, size_t *plen);
void catalog_changes_free(unsigned char *buf);

/* Stops recording (NULL: nothing); before catalog_close. */
void catalog_changes_stop(struct catalog_changes *changes);

/* The rows that make the catalog in from_path (a file of this schema) into cat's, as
 * catalog_changes_take gives them; cat has no transaction open. Returns 0;
 * CATALOG_INVALID, with why in catalog_errmsg, when a table cannot be compared (another
 * width or key); or another catalog code. */
int catalog_changes_diff(struct catalog *cat, const char *from_path, unsigned char **pbuf, size_t *plen);

/* A key the rows changed, as it is after them. */
struct catalog_key_change {
    uint8_t hash[CATALOG_HASH_LEN];
    bool active;                              /* it admits requests now (not revoked) */
    char user_id[CATALOG_USER_ID_MAX + 1];
};

/* Changes to keys alone are listed up to this many; more are left to a rebuild. */
#define CATALOG_KEY_CHANGES_MAX 4096

struct catalog_changes_summary {
    size_t rows;          /* rows inserted, updated or deleted */
    bool keys_only;       /* every one of them in api_keys */
    struct catalog_key_change *keys;   /* keys_only, at most CATALOG_KEY_CHANGES_MAX rows: each */
    size_t n_keys;                     /* key as it is after them (free()); else NULL */
};

/* Applies buf in cat's write transaction, begun with foreign keys off
 * (catalog_foreign_keys): the cascades of the change are rows of the changeset already.
 * Returns 0 with *sum; CATALOG_INVALID, with why in catalog_errmsg, when buf cannot be
 * read, names a table or a width that is not this catalog's, or does not apply row for
 * row; or another catalog code. On a non-zero return the caller rolls back. */
int catalog_changes_apply(struct catalog *cat, const unsigned char *buf, size_t len,
                          struct catalog_changes_summary *sum);

/* PRAGMA foreign_keys, outside a transaction (SQLite ignores it inside one). */
int catalog_foreign_keys(struct catalog *cat, bool on);
