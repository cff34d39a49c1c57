/* Starts the catalog the proxy serves from: the db file alone ([plans] follow = none), or
 * the file as the local cache of the fleet's catalog in Redis (follow = redis,
 * tiers/catalog_follow.h). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "proxy/config.h"
#include "tiers/snapshot.h"

/* Returns 0 and sets *pwatch, or a negative errno with why in err. A following proxy
 * starts without its file when Redis has no catalog for it yet (503 until one arrives). */
int catalog_start(const struct proxy_config *cfg, struct snapshot_watch **pwatch, char *err, size_t errlen);

/* True when a start may go on without the db file: it follows the fleet's catalog. */
bool catalog_file_optional(const struct proxy_config *cfg);
