/* The data of tierproxy's configuration: struct proxy_config and its enums. The
 * functions that build it are in config.h. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/netaddr.h"
#include "proxy/ratelimit_headers.h"
#include "store/limiter.h"

enum store_kind { STORE_MEMORY = 0, STORE_REDIS };
/* [limits] redis_mode: one Redis, or a Redis Cluster reached through seed nodes */
enum redis_mode { REDIS_MODE_SINGLE = 0, REDIS_MODE_CLUSTER };

struct proxy_config {
    /* [proxy] */
    char *listen_host;             /* "127.0.0.1" */
    uint16_t listen_port;          /* 8080 */
    char **upstreams;              /* "http://127.0.0.1:3000" or "https://...", without trailing slash */
    size_t n_upstreams;
    char *upstream_ca_file;        /* NULL: the system's CAs verify https upstreams */
    bool upstream_tls_verify;      /* no: https upstreams' certificates are not checked */
    int workers;                   /* resolved: 0 in the file becomes the number of cores */
    int64_t connect_timeout_ms;
    int64_t upstream_timeout_ms;
    int64_t websocket_idle_timeout_ms; /* a tunnel with no frames either way this long closes; 0 = never */
    int64_t max_body_bytes;
    int64_t upstream_max_inflight; /* requests in flight to the upstream per process; 0 = no cap */
    struct cidr *trusted_proxies;
    size_t n_trusted_proxies;
    char **exempt_paths;
    size_t n_exempt_paths;
    bool path_case_insensitive;    /* path_case = insensitive: exempt and route prefixes ignore ASCII case */
    bool underscores_forward;      /* underscores_in_headers = forward; drop (the default) removes them */
    /* [admin] */
    char *admin_host;              /* NULL when the admin listener is off */
    uint16_t admin_port;
    /* [auth] */
    char *key_header;              /* "Authorization" */
    char *anonymous_plan;          /* NULL when keyless requests get 401 */
    bool forward_key;
    char *key_query;               /* the query parameter that may carry the key; NULL = off */
    bool ws_refusal_close;         /* ws_refusal = close: a refused handshake gets a 101 and a
                                      close code (ws_refusal.h); status (false) answers 401/429/503 */
    /* [plans] */
    char *db;
    int64_t refresh_ms;
    bool follow_redis;             /* follow = redis: db caches the catalog published in [limits] redis */
    /* [limits] */
    enum store_kind store;
    enum redis_mode redis_mode;
    char *redis_url;               /* cluster mode: the seed URLs, comma-separated */
    char *redis_ca_file;           /* rediss://: NULL verifies with the system's CAs */
    char *key_prefix;
    enum limiter_store_error rate_on_store_error;        /* on_store_error: open | closed | local */
    enum limiter_store_error concurrency_on_store_error; /* concurrency_on_store_error */
    double local_share;            /* the share of each limit one proxy admits alone in local mode */
    int64_t lease_ttl_ms;
    int64_t memory_max_subjects;   /* store = memory: subjects held before the LRU one is evicted */
    unsigned headers;              /* HEADERS_* bits; 0 = off */
    /* [log] */
    char *access_log;              /* NULL = off, "-" = stdout, else a path */
    char *log_level;               /* "debug" | "info" | "warn" | "error" */
    /* where it came from, for reload */
    char *config_path;             /* NULL when no -c */
    int file_settings;             /* key = value lines read from it: none in a file that is
                                      empty, or only comments and [section] lines */
    struct config_origin *origins; /* where each value came from, for config_origin() */
};

enum config_action {
    CONFIG_RUN = 0,
    CONFIG_CHECK,      /* --check */
    CONFIG_VERSION,    /* --version */
    CONFIG_HELP,       /* --help */
};

/* One problem of a configuration: where the value came from ("FILE:LINE: [section] key",
 * "FILE:LINE" for a line that is no setting, "--flag", "TIERPROXY_SECTION_KEY", or ""
 * when nothing names it: a usage error, a file that cannot be opened) and why, the value
 * refused quoted (a URL's password as ***). */
typedef void config_problem_fn(void *ctx, const char *where, const char *why);
