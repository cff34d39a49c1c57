/* Installing the fleet's catalog in this file: what a following proxy does with each new
 * version, and what `tierctl pull` does. The published image is refused unless it passes
 * every check an import makes (store/catalog_image.h for the image's own checks; the
 * records' values, routes, users of active keys, id ranges and the limit bounds here);
 * when it passes, its records become the catalog's and the fleet mark its version, in one
 * transaction, so a reader sees the old catalog or the new one whole. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "store/catalog.h"

/* cat is open read-write (or create) with no transaction. Returns 0; CATALOG_INVALID with
 * why in err, the catalog untouched; or another non-zero catalog code (-EBUSY: locked by
 * a writer past the busy timeout, try again). */
int catalog_install_image(struct catalog *cat, const unsigned char *image, size_t len, int64_t version, char *err,
                          size_t errlen);

/* The checks alone, on the records of cat inside the caller's transaction. */
int catalog_install_check(struct catalog *cat, char *err, size_t errlen);
