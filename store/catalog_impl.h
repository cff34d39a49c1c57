/* What the catalog's files share: the connection and its helpers. Private to store/'s
 * catalog files (catalog.c, catalog_schema.c, catalog_image.c, catalog_verify.c). */
#pragma once
#include <sqlite3.h>

#include "store/catalog.h"
#include "store/stmt_cache.h"

struct catalog {
    sqlite3 *db;
    struct stmt_cache cache;
    enum catalog_mode mode;
    sqlite3_stmt *data_version;   /* persistent; prepared on first use */
    int version;                  /* the schema version of the open transaction */
    char errmsg[512];
};

/* Step i brings PRAGMA user_version from i to i + 1 (CATALOG_SCHEMA_VERSION of them). */
extern const char *const catalog_migrations[];

/* Records why the last call failed (catalog_errmsg). Returns 0. */
__attribute__((format(printf, 2, 3)))
int catalog_set_error(struct catalog *cat, const char *fmt, ...);

/* Maps an SQLite failure to a negative errno and records why. */
int catalog_sql_fail(struct catalog *cat, int rc);
