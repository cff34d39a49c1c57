/* The proxy's settings as tierctl reads them. See proxy_settings.h. */
#include "tiers/proxy_settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#define COPY(field, value) snprintf((field), sizeof(field), "%s", (value))

static bool parse_ms(const char *text, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < 1 || v > INT64_MAX / 4)
        return false;
    *out = v;
    return true;
}

/* One [limits] or [plans] key; false when its value cannot be read. */
static bool take(struct proxy_settings *ps, const char *section, const char *name, const char *value)
{
    if (strcmp(section, "plans") == 0) {
        if (strcmp(name, "follow") == 0)
            ps->follow = strcasecmp(value, "redis") == 0;
        else if (strcmp(name, "db") == 0)
            COPY(ps->plans_db, value);
        return true;
    }
    if (strcmp(section, "limits") != 0)
        return true;
    if (strcmp(name, "store") == 0)
        COPY(ps->store, value);
    else if (strcmp(name, "redis") == 0)
        COPY(ps->redis, value);
    else if (strcmp(name, "redis_ca_file") == 0)
        COPY(ps->redis_ca_file, value);
    else if (strcmp(name, "key_prefix") == 0)
        COPY(ps->key_prefix, value);
    else if (strcmp(name, "redis_mode") == 0)
        COPY(ps->redis_mode, value);
    else if (strcmp(name, "lease_ttl_ms") == 0)
        return parse_ms(value, &ps->lease_ttl_ms);
    return true;
}

static int on_ini(void *ctx, const char *section, const char *name, const char *value)
{
    return take(ctx, section, name, value) ? 1 : 0;
}

/* A variable as the proxy reads it: set and not empty. */
static const char *variable(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

static int override_from_environment(struct proxy_settings *ps, char *err, size_t errlen)
{
    static const struct { const char *variable, *section, *name; } vars[] = {
        {"TIERPROXY_LIMITS_STORE", "limits", "store"},
        {"TIERPROXY_LIMITS_REDIS", "limits", "redis"},
        {"TIERPROXY_LIMITS_REDIS_CA_FILE", "limits", "redis_ca_file"},
        {"TIERPROXY_LIMITS_KEY_PREFIX", "limits", "key_prefix"},
        {"TIERPROXY_LIMITS_REDIS_MODE", "limits", "redis_mode"},
        {"TIERPROXY_LIMITS_LEASE_TTL_MS", "limits", "lease_ttl_ms"},
        {"TIERPROXY_PLANS_FOLLOW", "plans", "follow"},
    };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = variable(vars[i].variable);
        if (v && !take(ps, vars[i].section, vars[i].name, v)) {
            snprintf(err, errlen, "%s: cannot read \"%s\"", vars[i].variable, v);
            return -1;
        }
    }
    return 0;
}

int proxy_settings_read(const char *file, bool must_exist, struct proxy_settings *ps, char *err, size_t errlen)
{
    *ps = (struct proxy_settings){.store = "memory", .redis = "redis://127.0.0.1:6379/0",
                                  .key_prefix = "tierproxy:", .redis_mode = "single", .lease_ttl_ms = 30000};
    if (file)
        COPY(ps->file, file);
    if (file && (must_exist || access(file, F_OK) == 0)) {
        int line = ini_parse(file, on_ini, ps);
        if (line < 0) {
            snprintf(err, errlen, "cannot read %s: %s", file, strerror(errno));
            return -1;
        }
        if (line > 0) {
            snprintf(err, errlen, "%s:%d: cannot read the line there (`tierproxy -c %s --check` says why)", file,
                     line, file);
            return -1;
        }
        ps->found = true;
    }
    return override_from_environment(ps, err, errlen);
}

bool proxy_settings_cluster(const struct proxy_settings *ps)
{
    return strcasecmp(ps->redis_mode, "cluster") == 0;
}
