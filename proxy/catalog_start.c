/* Starts the catalog the proxy serves from. See catalog_start.h. */
#include "proxy/catalog_start.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tiers/catalog_follow.h"

/* Each Redis call of the follower waits at most this long: a dead Redis delays the next
 * catalog poll, never a request. */
#define FOLLOW_TIMEOUT_MS 2000

static void follow_log(void *ctx, enum catalog_follow_level level, const char *message)
{
    const struct proxy_config *cfg = ctx;
    bool quiet_warn = strcmp(cfg->log_level, "error") == 0;
    bool quiet_info = quiet_warn || strcmp(cfg->log_level, "warn") == 0;
    if ((level == CATALOG_FOLLOW_WARN && quiet_warn) || (level == CATALOG_FOLLOW_INFO && quiet_info))
        return;
    fprintf(stderr, "tierproxy: %s\n", message);
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
        .log_ctx = (void *)cfg,
    };
    struct catalog_follow *follow = NULL;
    int r = catalog_follow_create(&options, &follow, err, errlen);
    if (r)
        return r;
    return snapshot_watch_start_following(cfg->db, (int)cfg->refresh_ms, follow, pwatch, err, errlen);
}
