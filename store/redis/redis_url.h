/* Redis connection URLs: redis://[[user]:password@]host[:port][/db], the same over TLS as
 * rediss://, and unix://[[user]:password@]/path[?db=N]. Private to store/ (and its unit
 * tests). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct redis_url {
    bool is_unix;
    bool tls;                /* rediss://: TLS, the server's certificate verified for host */
    char host[256];          /* TCP: name or address, without IPv6 brackets */
    int port;                /* TCP: default 6379 */
    char path[108];          /* unix: socket path */
    char username[128];      /* empty: AUTH with the password alone */
    char password[256];
    bool has_password;       /* send AUTH after connecting */
    int db;                  /* SELECT after connecting when not 0 */
};

/* Parses text into *url (percent-escapes are decoded in user, password and path).
 * Returns 0, or -EINVAL with a reason in err that never contains the password. */
int redis_url_parse(const char *text, struct redis_url *url, char *err, size_t errlen);

#define REDIS_SEEDS_MAX 64   /* seed URLs of a Redis Cluster ([limits] redis, cluster mode) */

/* Parses text, the seed nodes of a Redis Cluster as comma-separated redis:// (or rediss://)
 * URLs, into seeds[0 .. n-1] (max_seeds entries, at most REDIS_SEEDS_MAX used). A cluster
 * node is reached over TCP and serves database 0 alone, so unix:// and /N with N > 0 are
 * refused; the nodes the cluster names are reached as the seeds are, so the seeds are all
 * rediss:// or all redis://.
 * A comma inside a password is written %2C. Returns the number of seeds (>= 1), or
 * -EINVAL with a reason naming the seed by position ("seed 2 of 3: ...") in err; err never
 * holds a password, and on failure no password is left in seeds. */
int redis_seed_list_parse(const char *text, struct redis_url *seeds, size_t max_seeds, char *err, size_t errlen);
