/* The rows in which a catalog file differs from the fleet's. See fleet_difference.h. */
#include "tiers/fleet_difference.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog/catalog.h"
#include "store/catalog/catalog_changes.h"
#include "store/redis/fleet_redis.h"
#include "tiers/catalog_install.h"

/* The fleet's catalog at base, whole (image and rows since), written to scratch. */
static int fleet_catalog_file(const char *db_path, struct fleet_redis *fr, int64_t base, char *scratch,
                              size_t scratchlen, char *why, size_t whylen)
{
    struct fleet_redis_head head;
    struct fleet_rows_fetched fetched = {0};
    unsigned char *image = NULL;
    size_t len = 0;
    char sha[FLEET_SHA256_HEX];
    int r = fleet_redis_fetch(fr, &head, &image, &len, why, whylen);
    if (r == 0 && (!image || head.version != base))
        r = 1, snprintf(why, whylen, "the fleet's catalog is not at version %lld", (long long)base);
    if (r == 0)
        fleet_sha256_hex(image, len, sha);
    if (r == 0 && strcmp(sha, head.sha256) != 0)
        r = 1, snprintf(why, whylen, "the fleet's image does not match its sha256");
    if (r == 0 && head.image_version < head.version)
        r = fleet_redis_fetch_rows(fr, head.image_version, head.version, &fetched, why, whylen);
    if (r == 0) {
        struct catalog_rows rows = {.bufs = fetched.bufs, .lens = fetched.lens, .n = fetched.n};
        r = catalog_scratch_file(db_path, image, len, &rows, scratch, scratchlen, why, whylen);
    }
    fleet_rows_fetched_free(&fetched);
    free(image);
    return r;
}

int fleet_difference(const char *db_path, struct fleet_redis *fr, int64_t base, unsigned char **pbuf, size_t *plen,
                     char *why, size_t whylen)
{
    int64_t published = 0;
    char scratch[4096];
    *pbuf = NULL;
    int r = fleet_redis_version(fr, &published, why, whylen);
    if (r == 0 && (base < 1 || published != base))
        return snprintf(why, whylen, "the fleet's catalog is at version %lld", (long long)published), 1;
    if (r || (r = fleet_catalog_file(db_path, fr, base, scratch, sizeof(scratch), why, whylen)) != 0)
        return r;
    struct catalog *local = NULL;
    r = catalog_open(db_path, CATALOG_READ_ONLY, &local, why, whylen);
    if (r == 0 && (r = catalog_changes_diff(local, scratch, pbuf, plen)) != 0)
        snprintf(why, whylen, "%s", catalog_errmsg(local));
    catalog_close(local);
    catalog_scratch_remove(scratch);
    return r;
}
