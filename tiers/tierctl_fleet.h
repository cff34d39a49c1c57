/* tierctl's side of the fleet's catalog: `publish`, `pull`, `status`, and the publication
 * that follows every change when the proxy's file says `[plans] follow = redis`.
 * tierctl finds the fleet's Redis as `usage` does: --config FILE, else $TIERPROXY_CONFIG,
 * else the default path (proxy_settings.h).
 *
 * The fleet mark (the fleet table, schema 3) says which version the file last published or
 * pulled and whether it changed since: triggers set changed on every write to the five
 * catalog tables (WHEN keeps a bulk write at one lookup per row). tierctl publishes inside
 * a write transaction of its own, after the change's commit: the image or rows, the upload,
 * the script and the new mark, so nothing written between them is marked published. It
 * records a change's rows only when its file holds exactly the published version it starts
 * from (the mark's version, changed clear) and nobody else wrote the file between the
 * change's commit and the publication (PRAGMA data_version); otherwise the publication is
 * the difference (fleet_difference.h) or the whole catalog.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "store/catalog/catalog.h"
#include "tiers/proxy_settings.h"

/* Reads the settings. config_flag: --config, or NULL. A file named by --config or the
 * variable must be readable; the default path may be absent (found false). Returns 0, or
 * -1 with why in err. */
int fleet_config_read(const char *config_flag, struct proxy_settings *fc, char *err, size_t errlen);

struct catalog_changes;

/* The rows a change writes, recorded only when the file holds exactly the fleet's version
 * base (published or pulled, and unchanged since): then they make version base + 1, and a
 * follower at base takes them instead of the whole catalog. */
struct fleet_rows {
    struct catalog_changes *recording;   /* NULL: not recorded */
    int64_t base;
    int64_t data_version;                /* the file's PRAGMA data_version after the commit */
};

/* In the change's write transaction, before it writes. Never fails the change: rows that
 * cannot be recorded are not published, and followers take the whole catalog. */
void fleet_rows_record(struct catalog *cat, struct fleet_rows *rows);
/* After the change's commit: what tells another writer's commit since. */
void fleet_rows_committed(struct catalog *cat, struct fleet_rows *rows);
void fleet_rows_stop(struct fleet_rows *rows);

/* Publishes the catalog of cat, which holds a write transaction, and marks it published
 * in that transaction (the caller commits), with the change's rows when they make it from
 * the version published (rows NULL: none). Returns 0 with what was done in msg; 1 when
 * refused (the fleet's catalog changed since this file last published or pulled; force
 * overrides); -1 when it could not be published; why in msg. */
int fleet_publish(struct catalog *cat, const char *db_path, const struct proxy_settings *fc, bool force,
                  const struct fleet_rows *rows, char *msg, size_t msglen);

/* Replaces the catalog of cat (open read-write, no transaction) by the fleet's. Returns 0
 * with what was done in msg, or -1 with why. */
int fleet_pull(struct catalog *cat, const char *db_path, const struct proxy_settings *fc, char *msg, size_t msglen);

/* Writes the local version (cat NULL: no file yet; else in a read transaction), the
 * published one and the proxies following to out. Returns 0, or -1 with why in err
 * (what could be said is written). */
int fleet_status(struct catalog *cat, const char *db_path, const struct proxy_settings *fc, bool json, FILE *out,
                 char *err, size_t errlen);
