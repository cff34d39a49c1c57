/* The fleet's catalog in Redis. See fleet_redis.h. */
#include "store/redis/fleet_redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "store/redis/cluster_slot.h"
#include "store/redis/redis_probe.h"
#include "store/redis/redis_sync.h"
#include "store/redis/redis_url.h"

#define MAX_REDIRECTS 5
#define FLEET_KEY_SUFFIX "{catalog}"

/* The image travels in chunks of this size, each its own string key: no command moves
 * the whole image, so no limit check waits behind one (a 27 MB EVAL held Redis for
 * 400 ms), and a check waits behind one chunk at most (with 1 MiB chunks, requests'
 * p99 rose 1.4x while a 27 MB image went up; with 128 KiB, 1.2-1.3x). */
#define CHUNK_BYTES (128 * 1024)
/* Chunks uploaded but never published (a tierctl that died) go at this TTL. */
#define CHUNK_UPLOAD_TTL_S "3600"
/* The previous publication's chunks stay this long: a follower may be reading them. */
#define CHUNK_RETIRE_TTL_S "60"

/* Publishes when nobody published past the publisher's version (ARGV[1]) or with force
 * (ARGV[2] = "1"), once every chunk of the upload ARGV[3] is there; the version and the
 * time come from Redis, never from a host's clock. Chunk keys share the head's hash tag.
 * A whole image ends the chain of rows published since the last one. */
static const char publish_script[] =
    "redis.replicate_commands()\n"
    "local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0') or 0\n"
    "local base = tonumber(ARGV[1])\n"
    "if ARGV[2] ~= '1' and current > base then return {0, current} end\n"
    "local prefix = KEYS[1] .. ':chunk:'\n"
    "for i = 0, tonumber(ARGV[4]) - 1 do\n"
    "  local k = prefix .. ARGV[3] .. ':' .. i\n"
    "  if redis.call('EXISTS', k) == 0 then return {-1, current} end\n"
    "  redis.call('PERSIST', k)\n"
    "end\n"
    "local old = redis.call('HMGET', KEYS[1], 'upload', 'chunks')\n"
    "if old[1] and old[2] then\n"
    "  for i = 0, tonumber(old[2]) - 1 do redis.call('EXPIRE', prefix .. old[1] .. ':' .. i, " CHUNK_RETIRE_TTL_S ") end\n"
    "end\n"
    "redis.call('DEL', KEYS[1] .. ':rows')\n"
    "redis.call('HDEL', KEYS[1], 'image_version', 'rows_version', 'rows_bytes')\n"
    "local version = math.max(current, base) + 1\n"
    "local now = redis.call('TIME')\n"
    "redis.call('HSET', KEYS[1], 'version', version, 'upload', ARGV[3], 'chunks', ARGV[4], 'size', ARGV[5],\n"
    "           'sha256', ARGV[6], 'schema', ARGV[7], 'published_at', now[1], 'by', ARGV[8])\n"
    "return {version, current}\n";

/* Publishes the rows ARGV[2] (sha256 ARGV[3]) as version base + 1 when the published
 * version is exactly base (ARGV[1]) and its schema ARGV[4]; refused ({0, current}) when
 * somebody published past base; {-2, current} when the whole catalog must go instead:
 * nothing is published at base, another schema is, or the chain since the last image holds
 * ARGV[6] versions or would pass ARGV[7] bytes. The image stays; image_version says which
 * version it is (rows_version = version vouches for it: a head written otherwise ends the
 * chain), and each version past it has its rows and their digest in the hash KEY:rows. */
static const char publish_rows_script[] =
    "redis.replicate_commands()\n"
    "local h = redis.call('HMGET', KEYS[1], 'version', 'schema', 'image_version', 'rows_version', 'rows_bytes')\n"
    "local current = tonumber(h[1] or '0') or 0\n"
    "local base = tonumber(ARGV[1])\n"
    "if current > base then return {0, current} end\n"
    "if current < base or current == 0 or h[2] ~= ARGV[4] then return {-2, current} end\n"
    "local image, bytes = current, 0\n"
    "if h[3] and h[4] and tonumber(h[4]) == current then image, bytes = tonumber(h[3]), tonumber(h[5] or '0') end\n"
    "if current - image >= tonumber(ARGV[6]) or bytes + #ARGV[2] > tonumber(ARGV[7]) then return {-2, current} end\n"
    "local rows = KEYS[1] .. ':rows'\n"
    "if image == current then redis.call('DEL', rows) end\n"
    "local version = current + 1\n"
    "redis.call('HSET', rows, tostring(version), ARGV[2], version .. ':sha256', ARGV[3])\n"
    "local now = redis.call('TIME')\n"
    "redis.call('HSET', KEYS[1], 'version', version, 'image_version', image, 'rows_version', version,\n"
    "           'rows_bytes', bytes + #ARGV[2], 'published_at', now[1], 'by', ARGV[5])\n"
    "return {version, current}\n";

struct fleet_redis {
    struct redis_url seeds[REDIS_SEEDS_MAX];
    int n_seeds;
    bool cluster;
    int64_t timeout_ms;
    char key[256];
    char name[96];
    char where[640];
    SSL_CTX *tls;                  /* rediss:// seeds: every node is reached over TLS */
    struct redis_sync *conn;
    struct redis_url conn_url;     /* the node conn is logged in to */
};

void fleet_sha256_hex(const unsigned char *data, size_t len, char hex[FLEET_SHA256_HEX])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(data, len, digest);
    for (size_t i = 0; i < sizeof(digest); i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

int fleet_redis_create(const struct fleet_redis_options *o, struct fleet_redis **pfr, char *err, size_t errlen)
{
    struct fleet_redis *fr = calloc(1, sizeof(*fr));
    if (!fr) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    fr->cluster = o->cluster;
    fr->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
    int n = o->cluster ? redis_seed_list_parse(o->redis, fr->seeds, REDIS_SEEDS_MAX, err, errlen)
                       : redis_url_parse(o->redis, &fr->seeds[0], err, errlen) == 0 ? 1 : -EINVAL;
    const char *prefix = o->key_prefix ? o->key_prefix : "tierproxy:";
    if (n > 0 && (size_t)snprintf(fr->key, sizeof(fr->key), "%s" FLEET_KEY_SUFFIX, prefix) >= sizeof(fr->key)) {
        snprintf(err, errlen, "key_prefix is too long");
        n = -EINVAL;
    }
    int rc = 0;
    if (n > 0 && (fr->tls = redis_probe_tls(&fr->seeds[0], o->tls_ca_file, err, errlen, &rc), rc != 0))
        n = rc;
    if (n < 0) {
        fleet_redis_destroy(fr);
        return n;
    }
    fr->n_seeds = n;
    const struct redis_url *u = &fr->seeds[0];
    if (u->is_unix)
        snprintf(fr->where, sizeof(fr->where), "%s key %s", u->path, fr->key);
    else
        snprintf(fr->where, sizeof(fr->where), "%s:%d%s key %s", u->host, u->port, n > 1 ? " (and other seeds)" : "",
                 fr->key);
    *pfr = fr;
    return 0;
}

static void drop_connection(struct fleet_redis *fr)
{
    redis_sync_free(fr->conn);
    fr->conn = NULL;
}

void fleet_redis_destroy(struct fleet_redis *fr)
{
    if (!fr)
        return;
    drop_connection(fr);
    SSL_CTX_free(fr->tls);
    explicit_bzero(fr, sizeof(*fr));
    free(fr);
}

const char *fleet_redis_where(const struct fleet_redis *fr)
{
    return fr->where;
}

/* One command on c; a reply, or NULL with why in err and *pr set. */
static redisReply *ask(struct redis_sync *c, int argc, const char **argv, const size_t *lens, char *err,
                       size_t errlen, int *pr)
{
    redisReply *r = redis_sync_command(c, argc, argv, lens);
    if (!r) {
        const char *e = redis_sync_error(c);
        snprintf(err, errlen, "%s: %s", argv[0], e[0] ? e : "no answer");
        *pr = -EHOSTUNREACH;
    }
    return r;
}

/* A simple command whose answer only matters when it is an error. */
static int ask_ok(struct redis_sync *c, int argc, const char **argv, char *err, size_t errlen)
{
    int rc = 0;
    redisReply *r = ask(c, argc, argv, NULL, err, errlen, &rc);
    if (r && r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s: %.160s", argv[0], r->str);
        rc = redis_reply_refuses_login(r->str) ? -EACCES : -EIO;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

static void set_name(struct fleet_redis *fr, struct redis_sync *c)
{
    char err[64];
    const char *argv[3] = {"CLIENT", "SETNAME", fr->name};
    if (fr->name[0])
        (void)ask_ok(c, 3, argv, err, sizeof(err));   /* a name is for status only */
}

void fleet_redis_set_client_name(struct fleet_redis *fr, const char *name)
{
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < sizeof(fr->name); p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  strchr(".-_:", ch) != NULL;
        fr->name[n++] = ok ? ch : '_';
    }
    fr->name[n] = '\0';
    if (fr->conn)
        set_name(fr, fr->conn);
}

/* Connects and logs in to u: AUTH, SELECT, CLIENT SETNAME. */
static int connect_to(struct fleet_redis *fr, const struct redis_url *u, char *err, size_t errlen)
{
    char why[240] = "";
    int rc = 0;
    struct redis_sync *c = redis_probe_login(u, fr->tls, fr->timeout_ms, why, sizeof(why), &rc);
    if (c && u->db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        rc = ask_ok(c, 2, argv, why, sizeof(why));
    }
    if (!c || rc) {
        redis_sync_free(c);
        snprintf(err, errlen, "%s %s:%d: %s",
                 rc == -EHOSTUNREACH ? "cannot reach" : rc == -EPERM ? "cannot trust" : "refused by",
                 u->is_unix ? u->path : u->host, u->is_unix ? 0 : u->port, why);
        return rc ? rc : -EHOSTUNREACH;
    }
    set_name(fr, c);
    drop_connection(fr);
    fr->conn = c;
    fr->conn_url = *u;
    return 0;
}

/* A connection to a seed, the first that answers; a refused login or an untrusted
 * certificate is said over an unreachable seed. */
static int ensure_connected(struct fleet_redis *fr, char *err, size_t errlen)
{
    if (fr->conn)
        return 0;
    int worst = -EHOSTUNREACH;
    char why[400] = "";
    for (int i = 0; i < fr->n_seeds; i++) {
        char e[400];
        int rc = connect_to(fr, &fr->seeds[i], e, sizeof(e));
        if (rc == 0)
            return 0;
        if (!why[0] || (rc != -EHOSTUNREACH && worst == -EHOSTUNREACH)) {
            snprintf(why, sizeof(why), "%s", e);
            worst = rc;
        }
    }
    snprintf(err, errlen, "%s", why);
    return worst;
}

/* Follows a MOVED or ASK answer: connects to the node it names with the seeds' login. */
static int follow_redirect(struct fleet_redis *fr, const struct cluster_redirect *to, char *err, size_t errlen)
{
    struct redis_url u = fr->seeds[0];
    if (to->host[0])
        snprintf(u.host, sizeof(u.host), "%s", to->host);
    else
        snprintf(u.host, sizeof(u.host), "%s", fr->conn_url.host);
    u.port = to->port;
    u.is_unix = false;
    u.db = 0;
    int rc = connect_to(fr, &u, err, errlen);
    explicit_bzero(&u, sizeof(u));
    return rc;
}

/* Runs one command on the node that holds the catalog's slot. Returns the reply (not an
 * error reply), or NULL with *pr and err set. A connection that failed is made again once. */
static redisReply *run(struct fleet_redis *fr, int argc, const char **argv, const size_t *lens, char *err,
                       size_t errlen, int *pr)
{
    bool asking = false, retried = false;
    for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
        if ((*pr = ensure_connected(fr, err, errlen)) != 0)
            return NULL;
        if (asking) {
            const char *a[1] = {"ASKING"};
            (void)ask_ok(fr->conn, 1, a, err, errlen);
        }
        redisReply *r = ask(fr->conn, argc, argv, lens, err, errlen, pr);
        if (!r) {
            drop_connection(fr);
            if (retried)
                return NULL;
            retried = true;
            continue;
        }
        if (r->type != REDIS_REPLY_ERROR)
            return r;
        struct cluster_redirect to;
        if (fr->cluster && cluster_redirect_parse(r->str, r->len, &to) == 0) {
            freeReplyObject(r);
            asking = to.kind == CLUSTER_REDIRECT_ASK;
            if ((*pr = follow_redirect(fr, &to, err, errlen)) != 0)
                return NULL;
            continue;
        }
        snprintf(err, errlen, "%s: %.200s", argv[0], r->str);
        *pr = redis_reply_refuses_login(r->str) ? -EACCES : -EIO;
        freeReplyObject(r);
        return NULL;
    }
    snprintf(err, errlen, "%s: more than %d cluster redirects", argv[0], MAX_REDIRECTS);
    *pr = -EIO;
    return NULL;
}

static int64_t reply_int(const redisReply *r)
{
    if (!r)
        return 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return (int64_t)r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

int fleet_redis_version(struct fleet_redis *fr, int64_t *pversion, char *err, size_t errlen)
{
    const char *argv[3] = {"HGET", fr->key, "version"};
    int rc = 0;
    redisReply *r = run(fr, 3, argv, NULL, err, errlen, &rc);
    if (!r)
        return rc;
    *pversion = reply_int(r);
    freeReplyObject(r);
    return 0;
}

static void copy_str(char *out, size_t outlen, const redisReply *r)
{
    out[0] = '\0';
    if (r && r->type == REDIS_REPLY_STRING)
        snprintf(out, outlen, "%.*s", (int)r->len, r->str);
}

/* The head: HMGET of its fields; upload and chunks name the image's chunks. */
static int read_head(struct fleet_redis *fr, struct fleet_redis_head *head, int64_t *pchunks, int64_t *psize,
                     char *err, size_t errlen)
{
    const char *argv[12] = {"HMGET", fr->key, "version", "schema", "published_at", "sha256", "by", "upload", "chunks",
                            "size", "image_version", "rows_version"};
    int rc = 0;
    redisReply *r = run(fr, 12, argv, NULL, err, errlen, &rc);
    if (!r)
        return rc;
    memset(head, 0, sizeof(*head));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 10) {
        freeReplyObject(r);
        snprintf(err, errlen, "HMGET %s: an answer that is not a list of 10", fr->key);
        return -EIO;
    }
    head->version = reply_int(r->element[0]);
    head->schema = reply_int(r->element[1]);
    head->published_at = reply_int(r->element[2]);
    copy_str(head->sha256, sizeof(head->sha256), r->element[3]);
    copy_str(head->by, sizeof(head->by), r->element[4]);
    copy_str(head->upload, sizeof(head->upload), r->element[5]);
    *pchunks = reply_int(r->element[6]);
    *psize = reply_int(r->element[7]);
    int64_t image_version = reply_int(r->element[8]), rows_version = reply_int(r->element[9]);
    head->image_version = rows_version == head->version && image_version > 0 && image_version < head->version
                        ? image_version : head->version;
    freeReplyObject(r);
    return 0;
}

static void chunk_key(const struct fleet_redis *fr, const char *upload, int64_t i, char *out, size_t len)
{
    snprintf(out, len, "%s:chunk:%s:%lld", fr->key, upload, (long long)i);
}

struct chunk_io {
    struct fleet_redis *fr;
    const char *upload;
    unsigned char *image;        /* fetch: filled; publish: read */
    size_t len;
    size_t filled;
};

static int take_chunk(void *ctx, int64_t i, const redisReply *r, char *err, size_t errlen)
{
    struct chunk_io *io = ctx;
    if (r->type == REDIS_REPLY_NIL) {
        snprintf(err, errlen, "chunk %lld of the image is gone (a newer publication replaced it)", (long long)i);
        return -EAGAIN;
    }
    if (r->type != REDIS_REPLY_STRING || r->len > io->len - io->filled) {
        snprintf(err, errlen, "chunk %lld of the image is not what the head says",
                 (long long)i);
        return -EIO;
    }
    memcpy(io->image + io->filled, r->str, r->len);
    io->filled += r->len;
    return 0;
}

int fleet_redis_head(struct fleet_redis *fr, struct fleet_redis_head *head, char *err, size_t errlen)
{
    int64_t chunks, size;
    return read_head(fr, head, &chunks, &size, err, errlen);
}

/* Checks version v's rows (element 2i) against their digest (element 2i + 1) and keeps them. */
static int take_rows(const redisReply *r, size_t i, int64_t v, struct fleet_rows_fetched *out, char *err,
                     size_t errlen)
{
    const redisReply *rows = r->element[2 * i], *sha = r->element[2 * i + 1];
    char hex[FLEET_SHA256_HEX];
    if (rows->type == REDIS_REPLY_NIL || sha->type == REDIS_REPLY_NIL) {
        snprintf(err, errlen, "the rows of version %lld are gone (a newer publication replaced them)", (long long)v);
        return -EAGAIN;
    }
    if (rows->type != REDIS_REPLY_STRING || sha->type != REDIS_REPLY_STRING)
        return snprintf(err, errlen, "the rows of version %lld are not strings", (long long)v), -EBADMSG;
    fleet_sha256_hex((const unsigned char *)rows->str, rows->len, hex);
    if (sha->len != FLEET_SHA256_HEX - 1 || memcmp(hex, sha->str, sha->len) != 0)
        return snprintf(err, errlen, "the sha256 of the rows of version %lld does not match them", (long long)v),
               -EBADMSG;
    if (!(out->bufs[i] = malloc(rows->len ? rows->len : 1)))
        return snprintf(err, errlen, "out of memory"), -ENOMEM;
    memcpy(out->bufs[i], rows->str, rows->len);
    out->lens[i] = rows->len;
    out->n = i + 1;
    return 0;
}

int fleet_redis_fetch_rows(struct fleet_redis *fr, int64_t from, int64_t to, struct fleet_rows_fetched *out,
                           char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (from >= to || to - from > FLEET_ROWS_MAX_VERSIONS)
        return snprintf(err, errlen, "no rows from version %lld to %lld", (long long)from, (long long)to), -EINVAL;
    size_t n = (size_t)(to - from), argc = 2 + 2 * n;
    char key[300], (*fields)[32] = calloc(2 * n, 32);
    const char **argv = calloc(argc, sizeof(*argv));
    out->bufs = calloc(n, sizeof(*out->bufs));
    out->lens = calloc(n, sizeof(*out->lens));
    int rc = !fields || !argv || !out->bufs || !out->lens ? -ENOMEM : 0;
    if (rc == 0) {
        snprintf(key, sizeof(key), "%s:rows", fr->key);
        argv[0] = "HMGET";
        argv[1] = key;
        for (size_t i = 0; i < n; i++) {
            snprintf(fields[2 * i], 32, "%lld", (long long)(from + 1 + (int64_t)i));
            snprintf(fields[2 * i + 1], 32, "%lld:sha256", (long long)(from + 1 + (int64_t)i));
            argv[2 + 2 * i] = fields[2 * i];
            argv[3 + 2 * i] = fields[2 * i + 1];
        }
        redisReply *r = run(fr, (int)argc, argv, NULL, err, errlen, &rc);
        if (r && (r->type != REDIS_REPLY_ARRAY || r->elements != 2 * n))
            rc = -EIO, snprintf(err, errlen, "HMGET %s: not a list of %zu", key, 2 * n);
        for (size_t i = 0; r && rc == 0 && i < n; i++)
            rc = take_rows(r, i, from + 1 + (int64_t)i, out, err, errlen);
        if (r)
            freeReplyObject(r);
    } else {
        snprintf(err, errlen, "out of memory");
    }
    free(fields);
    free(argv);
    if (rc)
        fleet_rows_fetched_free(out);
    return rc;
}

void fleet_rows_fetched_free(struct fleet_rows_fetched *rows)
{
    for (size_t i = 0; rows->bufs && i < rows->n; i++)
        free(rows->bufs[i]);
    free(rows->bufs);
    free(rows->lens);
    memset(rows, 0, sizeof(*rows));
}

int fleet_redis_fetch(struct fleet_redis *fr, struct fleet_redis_head *head, unsigned char **pimage, size_t *plen,
                      char *err, size_t errlen)
{
    int64_t chunks = 0, size = 0;
    *pimage = NULL;
    *plen = 0;
    int rc = read_head(fr, head, &chunks, &size, err, errlen);
    const char *upload = head->upload;
    if (rc || head->version == 0)
        return rc;
    if (!upload[0] || chunks < 1 || size < 1 || (size + CHUNK_BYTES - 1) / CHUNK_BYTES != chunks) {
        snprintf(err, errlen, "the head of version %lld names no image (upload \"%s\", %lld chunks, %lld bytes)",
                 (long long)head->version, upload, (long long)chunks, (long long)size);
        return -EBADMSG;
    }
    struct chunk_io io = {.fr = fr, .upload = upload, .image = malloc((size_t)size), .len = (size_t)size};
    if (!io.image) {
        snprintf(err, errlen, "out of memory for a catalog of %lld bytes", (long long)size);
        return -ENOMEM;
    }
    /* One chunk per command, each answered before the next is asked: Redis runs every
     * command a client has sent before it serves another client, so 27 pipelined GETs of
     * 1 MiB held every limit check for tens of milliseconds. */
    for (int64_t i = 0; rc == 0 && i < chunks; i++) {
        char key[512];
        chunk_key(fr, upload, i, key, sizeof(key));
        const char *argv[2] = {"GET", key};
        redisReply *r = run(fr, 2, argv, NULL, err, errlen, &rc);
        if (r) {
            rc = take_chunk(&io, i, r, err, errlen);
            freeReplyObject(r);
        }
    }
    if (rc == 0 && io.filled != io.len) {
        snprintf(err, errlen, "the image has %zu bytes, its head says %zu", io.filled, io.len);
        rc = -EBADMSG;
    }
    if (rc) {
        free(io.image);
        return rc;
    }
    *pimage = io.image;
    *plen = io.len;
    return 0;
}

/* SET of chunk i, with the upload's TTL. */
static int set_chunk(struct fleet_redis *fr, const struct chunk_io *io, int64_t i, char *err, size_t errlen)
{
    char key[512];
    chunk_key(fr, io->upload, i, key, sizeof(key));
    size_t off = (size_t)i * CHUNK_BYTES, n = io->len - off < CHUNK_BYTES ? io->len - off : CHUNK_BYTES;
    const char *argv[5] = {"SET", key, (const char *)io->image + off, "EX", CHUNK_UPLOAD_TTL_S};
    size_t lens[5] = {3, strlen(key), n, 2, strlen(CHUNK_UPLOAD_TTL_S)};
    int rc = 0;
    redisReply *r = run(fr, 5, argv, lens, err, errlen, &rc);
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Uploads image in chunks under a new upload id (written to upload). */
static int upload_image(struct fleet_redis *fr, const unsigned char *image, size_t len, char *upload, size_t uploadlen,
                        int64_t *pchunks, char *err, size_t errlen)
{
    unsigned char raw[8];
    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        snprintf(err, errlen, "no random bytes for an upload id");
        return -EIO;
    }
    for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < uploadlen; i++)
        snprintf(upload + 2 * i, 3, "%02x", raw[i]);
    struct chunk_io io = {.fr = fr, .upload = upload, .image = (unsigned char *)image, .len = len};
    *pchunks = (int64_t)((len + CHUNK_BYTES - 1) / CHUNK_BYTES);
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < *pchunks; i++)
        rc = set_chunk(fr, &io, i, err, errlen);
    return rc;
}

/* One of the publishing scripts: its {version, current}. */
static int eval_publication(struct fleet_redis *fr, int argc, const char **argv, const size_t *lens,
                            int64_t *pversion, int64_t *pcurrent, char *err, size_t errlen)
{
    int rc = 0;
    redisReply *r = run(fr, argc, argv, lens, err, errlen, &rc);
    if (!r)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        snprintf(err, errlen, "EVAL: an answer that is not a list of two");
        return -EIO;
    }
    *pversion = reply_int(r->element[0]);
    *pcurrent = reply_int(r->element[1]);
    freeReplyObject(r);
    return 0;
}

int fleet_redis_publish(struct fleet_redis *fr, int64_t base, bool force, const struct fleet_publication *pub,
                        int64_t *pversion, int64_t *pcurrent, char *err, size_t errlen)
{
    char upload[32] = "", chunks_text[24], size_text[24], base_text[24], schema_text[16], sha[FLEET_SHA256_HEX];
    int64_t chunks = 0;
    int rc = upload_image(fr, pub->image, pub->len, upload, sizeof(upload), &chunks, err, errlen);
    if (rc)
        return rc;
    snprintf(base_text, sizeof(base_text), "%lld", (long long)base);
    snprintf(chunks_text, sizeof(chunks_text), "%lld", (long long)chunks);
    snprintf(size_text, sizeof(size_text), "%zu", pub->len);
    snprintf(schema_text, sizeof(schema_text), "%d", pub->schema);
    fleet_sha256_hex(pub->image, pub->len, sha);
    const char *argv[12] = {"EVAL", publish_script, "1", fr->key, base_text, force ? "1" : "0", upload,
                            chunks_text, size_text, sha, schema_text, pub->by};
    int64_t version = 0;
    rc = eval_publication(fr, 12, argv, NULL, &version, pcurrent, err, errlen);
    if (rc == 0 && version < 0) {
        snprintf(err, errlen, "a chunk of the upload expired before it was published");
        return -EIO;
    }
    if (rc == 0 && version == 0)
        return 1;
    *pversion = version;
    return rc;
}

int fleet_redis_publish_rows(struct fleet_redis *fr, int64_t base, const unsigned char *rows, size_t len, int schema,
                             const char *by, int64_t *pversion, int64_t *pcurrent, char *err, size_t errlen)
{
    char base_text[24], schema_text[16], sha[FLEET_SHA256_HEX], max_versions[16], max_bytes[24];
    snprintf(base_text, sizeof(base_text), "%lld", (long long)base);
    snprintf(schema_text, sizeof(schema_text), "%d", schema);
    snprintf(max_versions, sizeof(max_versions), "%d", FLEET_ROWS_MAX_VERSIONS);
    snprintf(max_bytes, sizeof(max_bytes), "%d", FLEET_ROWS_MAX_BYTES);
    fleet_sha256_hex(rows, len, sha);
    const char *argv[11] = {"EVAL", publish_rows_script, "1", fr->key, base_text, (const char *)rows, sha,
                            schema_text, by, max_versions, max_bytes};
    size_t lens[11];
    for (size_t i = 0; i < 11; i++)
        lens[i] = i == 5 ? len : strlen(argv[i]);
    int64_t version = 0;
    int rc = eval_publication(fr, 11, argv, lens, &version, pcurrent, err, errlen);
    if (rc)
        return rc;
    *pversion = version;
    return version == 0 ? 1 : version < 0 ? 2 : 0;
}

/* Appends the value of "name=" in one CLIENT LIST line when it begins with prefix. */
static bool take_name(const char *line, size_t linelen, const char *prefix, char *out, size_t outlen)
{
    const char *p = NULL;
    for (size_t i = 0; i + 6 <= linelen && !p; i++)
        if ((i == 0 || line[i - 1] == ' ') && memcmp(line + i, "name=", 5) == 0)
            p = line + i + 5;
    if (!p)
        return false;
    size_t n = 0;
    while (p + n < line + linelen && p[n] != ' ')
        n++;
    size_t plen = strlen(prefix);
    if (n < plen || memcmp(p, prefix, plen) != 0)
        return false;
    size_t used = strlen(out);
    if (used + n + 2 <= outlen)
        snprintf(out + used, outlen - used, "%.*s\n", (int)n, p);
    return true;
}

int fleet_redis_clients(struct fleet_redis *fr, const char *prefix, char *out, size_t outlen, char *err,
                        size_t errlen)
{
    /* the catalog's node: a read of the key first (cluster: follows redirects there) */
    int64_t version = 0;
    int rc = fleet_redis_version(fr, &version, err, errlen);
    if (rc)
        return rc;
    const char *argv[2] = {"CLIENT", "LIST"};
    redisReply *r = ask(fr->conn, 2, argv, NULL, err, errlen, &rc);
    if (!r)
        return rc;
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) {
        snprintf(err, errlen, "CLIENT LIST: %.160s", r->type == REDIS_REPLY_ERROR ? r->str : "an odd answer");
        freeReplyObject(r);
        return -EIO;
    }
    out[0] = '\0';
    int count = 0;
    for (const char *line = r->str; line < r->str + r->len;) {
        const char *end = memchr(line, '\n', (size_t)(r->str + r->len - line));
        size_t n = end ? (size_t)(end - line) : (size_t)(r->str + r->len - line);
        count += take_name(line, n, prefix, out, outlen);
        line += n + 1;
    }
    freeReplyObject(r);
    return count;
}
