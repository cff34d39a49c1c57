/* The catalog as one SQLite database image, as the fleet shares it: tierctl publishes the
 * image of its file to the fleet's Redis, and a following proxy (or `tierctl pull`) copies
 * the image's records into its own file in one transaction. An image is read as untrusted
 * input: attached read-only in memory, checked by SQLite (quick_check) and copied into
 * this catalog's own tables, whose constraints and schema are this program's; the caller
 * then checks the records as an import does (tiers/catalog_install.c).
 *
 * The fleet mark: the version of the fleet's catalog this file holds (the one it last
 * published or pulled; 0 = never) and whether the catalog changed since (triggers set
 * it on every write, catalog_schema.c). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/catalog/catalog.h"

/* The mark, in the caller's transaction. A file of an older schema reads as version 0,
 * changed. */
int catalog_fleet_mark(struct catalog *cat, int64_t *pversion, bool *pchanged);

/* Sets the mark to version, unchanged; the caller holds a write transaction. */
int catalog_fleet_mark_set(struct catalog *cat, int64_t version);

/* The image of the catalog as of the caller's transaction: the file's pages, marked as a
 * rollback-journal database so that it opens alone. Returns 0 and sets *pimage (free
 * with catalog_image_free) and *plen, or non-zero with the reason in catalog_errmsg. */
int catalog_image_make(struct catalog *cat, unsigned char **pimage, size_t *plen);
void catalog_image_free(unsigned char *image);

/* Attaches a copy of image, read-only, outside any transaction; sets *pschema to its
 * schema version. Refuses (CATALOG_INVALID, why in catalog_errmsg) an image that is not a
 * SQLite database, fails quick_check, or has no catalog schema this program can read
 * (a newer one: "schema 4, newer than this program's 3"). */
int catalog_image_attach(struct catalog *cat, const unsigned char *image, size_t len, int *pschema);

/* Replaces every plan, limit, cost, user and key by the attached image's, ids kept, and
 * raises the id high-water marks to the image's. The caller holds a write transaction
 * and rolls it back on failure; a record that this catalog's constraints refuse gives
 * CATALOG_INVALID naming the table. */
int catalog_image_copy(struct catalog *cat);

/* Detaches the image (after the transaction ended). NULL-safe, idempotent. */
void catalog_image_detach(struct catalog *cat);

/* For an install by file (tiers/catalog_install.c): the catalog file at path, just written
 * from an image, opened read-write with a rollback journal (never WAL: the file is then
 * renamed over a cache that readers reopen) and defensively, as catalog_image_attach
 * reads an image. Returns 0 and sets *pcat when it passes quick_check and its schema is
 * exactly the one this program's migrations make (tables, indexes, triggers); 1 when it
 * is a catalog of another schema (an older tierctl's: its records are copied instead);
 * CATALOG_INVALID with why in err when it is damaged, not a catalog, or of a newer
 * schema. */
int catalog_image_open_file(const char *path, struct catalog **pcat, char *err, size_t errlen);

/* A new, empty catalog file at path (created 0600), read-write with a rollback journal. */
int catalog_create_rollback(const char *path, struct catalog **pcat, char *err, size_t errlen);

/* An active key whose user is not in the catalog (what an import refuses): 0 with its id,
 * or CATALOG_NOT_FOUND when there is none. One query, in the caller's transaction. */
int catalog_orphan_active_key(struct catalog *cat, int64_t *pkey_id);
