/* The proxy's settings tierctl needs, read as the proxy reads them: its INI file, then its
 * TIERPROXY_<SECTION>_<KEY> variables over the file. [limits] says where the counts and the
 * fleet's catalog live (tierctl usage, publish, pull, status); [plans] says whether the
 * catalog follows the fleet's and where the file is (catalog_path.h). The proxy checks the
 * rest of its file; here nothing else is read. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROXY_SETTINGS_DEFAULT_FILE "/etc/tierproxy/tierproxy.ini"

struct proxy_settings {
    bool found;                        /* a file was read */
    char file[1024];                   /* the file read, or that would have been */
    char store[16];                    /* [limits] store: "memory" or "redis" */
    char redis[1024];                  /* [limits] redis (in cluster mode: the seeds) */
    char redis_ca_file[1024];          /* "" verifies rediss:// with the system's CAs */
    char key_prefix[128];
    char redis_mode[16];               /* "single" or "cluster" */
    int64_t lease_ttl_ms;
    bool follow;                       /* [plans] follow = redis */
    char plans_db[1024];               /* [plans] db; "" when the file names none */
};

/* The proxy's defaults, then file (NULL: none; must_exist false: an absent file is no
 * error, found stays false), then TIERPROXY_LIMITS_* and TIERPROXY_PLANS_FOLLOW. Returns
 * 0, or -1 with why in err (the file and line of a value that cannot be read). */
int proxy_settings_read(const char *file, bool must_exist, struct proxy_settings *ps, char *err, size_t errlen);

/* [limits] redis_mode = cluster. */
bool proxy_settings_cluster(const struct proxy_settings *ps);
