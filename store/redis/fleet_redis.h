/* The fleet's catalog in Redis: a head, the hash `<key_prefix>{catalog}`, that tierctl
 * publishes and following proxies read, and the image in chunks of 128 KiB, the strings
 * `<key_prefix>{catalog}:chunk:UPLOAD:N`. The head's fields: version (grows by one per
 * publication), upload, chunks and size (where the image is), sha256 (hex of the whole
 * image: the catalog's SQLite image, store/catalog/catalog_image.h), schema (its schema version),
 * published_at (Redis' clock, Unix seconds), by (who published). An upload's chunks are
 * written first, then one script checks them and swaps the head: a reader sees the old
 * publication or the new one, and the hash tag puts every key on one slot of a Redis
 * Cluster (DESIGN.md, "One catalog for the fleet").
 *
 * Blocking calls (store/redis/redis_sync.h; over TLS with rediss://), each bounded by the
 * timeout: for tierctl and for the proxy's catalog thread, never a worker's loop. In
 * cluster mode the seeds are tried in turn and MOVED and ASK answers are followed to the
 * node that holds the slot (over TLS too when the seeds are rediss://). A connection that
 * failed is dropped and made again at the next call.
 *
 * Chunks are written with SET ... EX 3600 and read one command at a time: Redis runs each
 * command to its end before serving another, so no command carries the whole image, and a
 * limit check waits behind one chunk at most. The publishing script gives the previous
 * upload's chunks a minute to live (a follower may be reading them). Changes published as
 * rows (store/catalog/catalog_changes.h) go to the hash <key_prefix>{catalog}:rows (same slot), one
 * field per version with its rows and their sha256; the head then says which version the
 * image is (image_version, vouched for by rows_version = version: a head written any other
 * way ends the chain). A chain holds at most 64 versions and 4 MiB; past either, and for
 * --force or a file never published, the whole catalog goes and the script deletes the
 * chain. Every key is on slot 9113 (CLUSTER KEYSLOT {catalog}, whatever the prefix, which
 * in cluster mode holds no "{").
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FLEET_SHA256_HEX 65

struct fleet_redis_options {
    const char *redis;         /* [limits] redis: one URL, or the seeds in cluster mode */
    const char *tls_ca_file;   /* [limits] redis_ca_file, for rediss://: NULL or "": the system's CAs */
    bool cluster;
    const char *key_prefix;    /* [limits] key_prefix */
    int64_t timeout_ms;        /* each connect and command */
};

/* What a publication says of itself (all of it but the image). version 0: none. */
struct fleet_redis_head {
    int64_t version;
    int64_t schema;
    int64_t published_at;
    char sha256[FLEET_SHA256_HEX];
    char by[128];
    /* The version the image is: below version when the versions since were published as
     * the rows each change wrote (store/catalog/catalog_changes.h; fleet_redis_fetch_rows) */
    int64_t image_version;
    char upload[64];                   /* names the image's chunks */
};

/* A chain of rows since the last image holds at most this many versions and bytes; past
 * either, a change publishes the whole catalog again. */
#define FLEET_ROWS_MAX_VERSIONS 64
#define FLEET_ROWS_MAX_BYTES (4 * 1024 * 1024)

/* The rows of versions from + 1 .. to, in order (fleet_rows_fetched_free). */
struct fleet_rows_fetched {
    unsigned char **bufs;
    size_t *lens;
    size_t n;
};

struct fleet_redis;

/* Checks the options and loads the CA certificates for rediss:// (no network I/O).
 * Returns 0, or -EINVAL with why in err (never a password). */
int fleet_redis_create(const struct fleet_redis_options *options, struct fleet_redis **pfr, char *err, size_t errlen);
void fleet_redis_destroy(struct fleet_redis *fr);

/* The name this connection gives itself (CLIENT SETNAME), now and after each reconnect;
 * tierctl status lists the proxies following by it. Letters, digits and ".-_:" only. */
void fleet_redis_set_client_name(struct fleet_redis *fr, const char *name);

/* Where the catalog lives, for messages: "127.0.0.1:6379 key tierproxy:{catalog}". */
const char *fleet_redis_where(const struct fleet_redis *fr);

/* Every call below returns 0, or a negative errno with why in err: -EHOSTUNREACH (no
 * answer), -EPERM (the server's TLS certificate is not trusted), -EACCES (the login is
 * refused), -EIO (another error reply). */

/* The published version alone (one HGET): 0 when nothing is published. */
int fleet_redis_version(struct fleet_redis *fr, int64_t *pversion, char *err, size_t errlen);

/* The publication without its image. */
int fleet_redis_head(struct fleet_redis *fr, struct fleet_redis_head *head, char *err, size_t errlen);

/* The publication with its image: the head, then its chunks. *pimage (free()) is NULL
 * when nothing is published. -EAGAIN: a newer publication replaced the chunks meanwhile
 * (ask again); -EBADMSG: a head or chunks that do not fit together. */
int fleet_redis_fetch(struct fleet_redis *fr, struct fleet_redis_head *head, unsigned char **pimage,
                      size_t *plen, char *err, size_t errlen);

/* The rows of versions from + 1 .. to (at most FLEET_ROWS_MAX_VERSIONS), each checked
 * against its sha256. -EAGAIN: a newer publication replaced them (ask again); -EBADMSG:
 * rows that do not match their digest. */
int fleet_redis_fetch_rows(struct fleet_redis *fr, int64_t from, int64_t to, struct fleet_rows_fetched *rows,
                           char *err, size_t errlen);
void fleet_rows_fetched_free(struct fleet_rows_fetched *rows);

/* Publishes rows, the change that makes version base + 1 from version base, without the
 * image. Returns 0 with *pversion set; 1 when refused (*pcurrent: the version published
 * meanwhile); 2 when the whole catalog must be published instead (nothing published at
 * base, another schema, or the chain since the last image is full); or a negative errno. */
int fleet_redis_publish_rows(struct fleet_redis *fr, int64_t base, const unsigned char *rows, size_t len, int schema,
                             const char *by, int64_t *pversion, int64_t *pcurrent, char *err, size_t errlen);

/* Publishes image when the published version is at most base (the version this file last
 * published or pulled), or whatever it is with force. The new version is one more than the
 * larger of the two, so versions only grow. Returns 0 with *pversion set, 1 when refused
 * (*pcurrent: the version published meanwhile), or a negative errno. */
struct fleet_publication {
    const unsigned char *image;
    size_t len;
    int schema;
    const char *by;
};
int fleet_redis_publish(struct fleet_redis *fr, int64_t base, bool force, const struct fleet_publication *pub,
                        int64_t *pversion, int64_t *pcurrent, char *err, size_t errlen);

/* The names of the connections to the catalog's node that begin with prefix (CLIENT
 * LIST), one per line into out. Returns how many, or a negative errno. */
int fleet_redis_clients(struct fleet_redis *fr, const char *prefix, char *out, size_t outlen, char *err,
                        size_t errlen);

/* Lowercase hex SHA-256 of data, as the sha256 field holds it. */
void fleet_sha256_hex(const unsigned char *data, size_t len, char hex[FLEET_SHA256_HEX]);
