/* Starts the catalog the proxy serves from. See catalog_start.h. */
#include "proxy/catalog_start.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy/log.h"
#include "tiers/catalog_follow.h"

/* Each Redis call of the follower waits at most this long: a dead Redis delays the next
 * catalog poll, never a request. */
#define FOLLOW_TIMEOUT_MS 2000

static void follow_log(void *ctx, enum catalog_follow_level level, const char *message)
{
    (void)ctx;
    log_say(level == CATALOG_FOLLOW_ERROR  ? LOG_LEVEL_ERROR
            : level == CATALOG_FOLLOW_WARN ? LOG_LEVEL_WARN
            : level == CATALOG_FOLLOW_INFO ? LOG_LEVEL_INFO
                                           : LOG_LEVEL_DEBUG,
            "%s", message);
}

bool catalog_file_optional(const struct proxy_config *cfg)
{
    return cfg->follow_redis;
}

int catalog_start(const struct proxy_config *cfg, struct snapshot_watch **pwatch, char *err, size_t errlen)
{
    if (!cfg->follow_redis)
        return snapshot_watch_start(cfg->db, (int)cfg->refresh_ms, pwatch, err, errlen);
    char host[128] = "host", name[200];
    gethostname(host, sizeof(host) - 1);
    snprintf(name, sizeof(name), "tierproxy-follower:%s:%ld", host, (long)getpid());
    struct catalog_follow_options options = {
        .db_path = cfg->db,
        .redis = {.redis = cfg->redis_url, .tls_ca_file = cfg->redis_ca_file,
                  .cluster = cfg->redis_mode == REDIS_MODE_CLUSTER,
                  .key_prefix = cfg->key_prefix, .timeout_ms = FOLLOW_TIMEOUT_MS},
        .name = name,
        .log = follow_log,
        .log_ctx = NULL,
    };
    struct catalog_follow *follow = NULL;
    int r = catalog_follow_create(&options, &follow, err, errlen);
    if (r)
        return r;
    return snapshot_watch_start_following(cfg->db, (int)cfg->refresh_ms, follow, pwatch, err, errlen);
}
