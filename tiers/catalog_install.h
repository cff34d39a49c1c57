/* Installing the fleet's catalog in this file: what a following proxy does with each new
 * version, and what `tierctl pull` does. The published image is refused unless it passes
 * every check an import makes (store/catalog/catalog_image.h for the image's own checks; the
 * records' values, routes, users of active keys, id ranges and the limit bounds here);
 * when it passes, its records become the catalog's and the fleet mark its version, in one
 * transaction, so a reader sees the old catalog or the new one whole.
 *
 * An image is read as SQLite advises for files from elsewhere (SQLITE_DBCONFIG_DEFENSIVE,
 * trusted_schema off, cell_size_check on, quick_check). It is written to a new file beside
 * the cache; when its schema is exactly the one this program's migrations make (every
 * table, index and trigger: sqlite_schema compared with one built in memory from the
 * migrations) it is used as it is, else (an older tierctl's schema) its rows are copied
 * column by column into a new catalog file, so this schema's constraints apply. Then the
 * records are checked (catalog_install_check), the mark set, the file committed and renamed
 * over the cache: readers see the old file or the new one whole, and the watcher reopens on
 * the new inode. Renaming is only safe with no journal beside the cache (SQLite would pair
 * a -wal or hot -journal with the new file), so the cache is kept out of WAL mode
 * (CATALOG_CACHE, a rollback journal); when a journal lies there anyway (a local tierctl
 * wrote the file while something reads it), the records are copied into the file in one
 * transaction instead (catalog_install_image, what tierctl pull does) and the "installed"
 * line says "in place". A refused image leaves the cache untouched.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "store/catalog/catalog.h"

/* cat is open read-write (or create) with no transaction. Returns 0; CATALOG_INVALID with
 * why in err, the catalog untouched; or another non-zero catalog code (-EBUSY: locked by
 * a writer past the busy timeout, try again). */
int catalog_install_image(struct catalog *cat, const unsigned char *image, size_t len, int64_t version, char *err,
                          size_t errlen);

struct catalog_changes_summary;

/* The rows of a chain of versions, each what one change wrote (store/catalog/catalog_changes.h). */
struct catalog_rows {
    unsigned char *const *bufs;
    const size_t *lens;
    size_t n;
};

/* A follower's install of rows, the changes that make version from version base: cat
 * (open read-write, no transaction) must hold exactly version base, unchanged since; the
 * rows applied in order must pass the checks below; then the fleet mark becomes version,
 * all in one transaction. Returns 0 with *sum (its keys: free()); CATALOG_INVALID with
 * why in err, the file untouched; or another catalog code. */
int catalog_install_rows(struct catalog *cat, const struct catalog_rows *rows, int64_t base, int64_t version,
                         struct catalog_changes_summary *sum, char *err, size_t errlen);

/* The checks alone, on the records of cat inside the caller's transaction. */
int catalog_install_check(struct catalog *cat, char *err, size_t errlen);

/* The proxy's install: builds the new catalog in a file beside db_path (the image itself
 * when its schema is exactly this program's, else its records copied into a new catalog),
 * checks it, marks it with image_version, applies rows (NULL or none: nothing) to make
 * version (catalog_install_rows, *sum), and renames it over db_path, so a large catalog
 * costs no copy into the old file. Readers holding the old file keep it until they reopen.
 * Returns 0; 1 when db_path has a journal or WAL beside it (a local tierctl wrote it:
 * renaming over it would pair the new file with that journal) and the caller installs in
 * place (catalog_install_image); CATALOG_INVALID with why in err; or a negative errno. */
int catalog_install_file(const char *db_path, const unsigned char *image, size_t len, int64_t image_version,
                         const struct catalog_rows *rows, int64_t version, struct catalog_changes_summary *sum,
                         char *err, size_t errlen);

/* For `tierctl publish`: the fleet's catalog (image, then rows applied) written to a new
 * file beside db_path, its name in path, to compare the local catalog with
 * (catalog_changes_diff). The records are not checked: what is compared is what the
 * fleet holds. Returns 0; 1 when the image is of another schema; CATALOG_INVALID or a
 * negative errno with why in err (nothing left behind). Remove it with
 * catalog_scratch_remove. */
int catalog_scratch_file(const char *db_path, const unsigned char *image, size_t len, const struct catalog_rows *rows,
                         char *path, size_t pathlen, char *err, size_t errlen);
void catalog_scratch_remove(const char *path);
