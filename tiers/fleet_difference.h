/* `tierctl publish` of a catalog changed apart from the fleet (a change made without
 * `follow = redis`, an import of an edited export): what it sends is the rows in which the
 * file differs from the catalog the fleet holds, so that each follower applies them
 * (store/catalog/catalog_changes.h) instead of fetching, checking and loading the whole catalog.
 * The fleet's catalog is fetched once, by tierctl, and compared with the file.
 *
 * It is used when the fleet is at the version the file last published or pulled: tierctl
 * fetches that catalog (the image and the rows since), writes it to a scratch file beside
 * its own, and sqlite3session_diff compares each shared table with it by primary key; the
 * changeset goes as a change's does. The same catalog (a change made and undone) publishes
 * nothing. When the fleet's catalog cannot be read that way (another version or schema,
 * rows that do not apply, an image that does not match its digest) the whole catalog goes,
 * which is also how publish repairs a fleet whose published rows are bad.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct fleet_redis;

/* The rows that make the fleet's catalog, when it is at version base, into db_path's
 * (committed) catalog. Returns 0 with *pbuf (catalog_changes_free; *plen 0: they are the
 * same); non-zero when they cannot be had (the fleet is at another version or holds a
 * catalog that does not read, or another schema), with why in why: then the whole
 * catalog goes. */
int fleet_difference(const char *db_path, struct fleet_redis *fr, int64_t base, unsigned char **pbuf, size_t *plen,
                     char *why, size_t whylen);
