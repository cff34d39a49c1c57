/* Where tierctl finds the catalog. See catalog_path.h. */
#include "tiers/catalog_path.h"

#include "tiers/proxy_settings.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static const char *set_variable(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

int catalog_path_find(const char *db_flag, const char *config_flag, const char *fallback, const char **ppath,
                      char *buf, size_t buflen, char *err, size_t errlen)
{
    const char *path = db_flag != NULL && db_flag[0] != '\0' ? db_flag : NULL;
    if (path == NULL)
        path = set_variable("TIERPROXY_PLANS_DB");
    if (path == NULL)
        path = set_variable("TIERPROXY_DB");
    const char *file = config_flag != NULL ? config_flag : set_variable("TIERPROXY_CONFIG");
    if (path == NULL && file != NULL) {
        struct proxy_settings ps;
        if (proxy_settings_read(file, true, &ps, err, errlen) != 0)
            return -1;
        if (ps.plans_db[0]) {
            snprintf(buf, buflen, "%s", ps.plans_db);
            path = buf;
        }
    }
    *ppath = path != NULL ? path : fallback;
    return 0;
}
