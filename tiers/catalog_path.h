/* Where tierctl finds the catalog, first found wins: --db PATH; $TIERPROXY_PLANS_DB (the
 * variable the proxy reads for [plans] db, so a unit's Environment= serves both);
 * $TIERPROXY_DB (tierctl's own variable before it, still read); [plans] db of the proxy's
 * file named by --config FILE, else by $TIERPROXY_CONFIG; else ./plans.db. A relative path
 * is relative to the working directory, as the proxy reads it. */
#pragma once
#include <stddef.h>

/* db_flag, config_flag: --db and --config as given, or NULL. Sets *ppath to the catalog's
 * path: db_flag, a variable's value, fallback, or buf (the file's value, copied there).
 * Returns 0, or -1 with why in err when the file had to be read and could not be. */
int catalog_path_find(const char *db_flag, const char *config_flag, const char *fallback, const char **ppath,
                      char *buf, size_t buflen, char *err, size_t errlen);
