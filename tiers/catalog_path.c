/* Where tierctl finds the catalog. See catalog_path.h. */
#include "tiers/catalog_path.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

struct plans_db {
    char *buf;
    size_t buflen;
    bool found;
};

static int on_ini(void *ctx, const char *section, const char *name, const char *value)
{
    struct plans_db *db = ctx;
    if (strcmp(section, "plans") == 0 && strcmp(name, "db") == 0 && value[0] != '\0') {
        snprintf(db->buf, db->buflen, "%s", value);
        db->found = true;
    }
    return 1; /* the proxy checks its file; here only [plans] db matters */
}

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
        struct plans_db db = {.buf = buf, .buflen = buflen};
        int line = ini_parse(file, on_ini, &db);
        if (line != 0) {
            if (line < 0)
                snprintf(err, errlen, "cannot read %s: %s", file, strerror(errno));
            else
                snprintf(err, errlen, "%s:%d: cannot read the file there", file, line);
            return -1;
        }
        if (db.found)
            path = buf;
    }
    *ppath = path != NULL ? path : fallback;
    return 0;
}
