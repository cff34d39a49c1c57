/* tierctl's side of the fleet's catalog. See tierctl_fleet.h and DESIGN.md, "One catalog
 * for the fleet". */
#include "tiers/tierctl_fleet.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "store/catalog/catalog_changes.h"
#include "store/catalog/catalog_image.h"
#include "store/redis/fleet_redis.h"
#include "store/redis/redis_sigpipe.h"
#include "tiers/catalog_install.h"
#include "tiers/fleet_difference.h"

#define FLEET_TIMEOUT_MS 5000
#define FOLLOWER_PREFIX "tierproxy-follower:"

int fleet_config_read(const char *config_flag, struct proxy_settings *fc, char *err, size_t errlen)
{
    const char *env = getenv("TIERPROXY_CONFIG");
    const char *file = config_flag ? config_flag : env && env[0] ? env : PROXY_SETTINGS_DEFAULT_FILE;
    return proxy_settings_read(file, file != (const char *)PROXY_SETTINGS_DEFAULT_FILE, fc, err, errlen);
}

/* SIGPIPE is ignored from open_redis to close_redis (store/redis/redis_sigpipe.h). */
static int open_redis(const struct proxy_settings *fc, struct fleet_redis **pfr, struct redis_sigpipe *sigpipe,
                      char *msg, size_t msglen)
{
    redis_sigpipe_ignore(sigpipe);
    struct fleet_redis_options o = {
        .redis = fc->redis, .tls_ca_file = fc->redis_ca_file, .cluster = proxy_settings_cluster(fc), .key_prefix = fc->key_prefix,
        .timeout_ms = FLEET_TIMEOUT_MS,
    };
    char err[512];
    if (fleet_redis_create(&o, pfr, err, sizeof(err)) != 0) {
        snprintf(msg, msglen, "%s: [limits] redis: %s", fc->file, err);
        redis_sigpipe_restore(sigpipe);
        return -1;
    }
    return 0;
}

static void close_redis(struct fleet_redis *fr, struct redis_sigpipe *sigpipe)
{
    fleet_redis_destroy(fr);
    redis_sigpipe_restore(sigpipe);
}

static void publisher_name(char *by, size_t len)
{
    char host[128] = "";
    gethostname(host, sizeof(host) - 1);
    snprintf(by, len, "tierctl@%s", host[0] ? host : "?");
}

void fleet_rows_record(struct catalog *cat, struct fleet_rows *rows)
{
    bool changed = true;
    *rows = (struct fleet_rows){0};
    if (catalog_fleet_mark(cat, &rows->base, &changed) != 0 || changed || rows->base < 1 ||
        catalog_changes_record(cat, &rows->recording) != 0)
        rows->recording = NULL;
}

void fleet_rows_committed(struct catalog *cat, struct fleet_rows *rows)
{
    if (rows->recording && catalog_data_version(cat, &rows->data_version) != 0)
        fleet_rows_stop(rows);
}

void fleet_rows_stop(struct fleet_rows *rows)
{
    catalog_changes_stop(rows->recording);
    rows->recording = NULL;
}

/* The rows of the change, when they make this file's catalog from base: nobody else wrote
 * the file since the change (data_version), and its mark is the one the change began at. */
static void take_rows(struct catalog *cat, const struct fleet_rows *rows, int64_t base, unsigned char **pbuf,
                      size_t *plen)
{
    int64_t data_version = -1;
    *pbuf = NULL;
    if (!rows || !rows->recording || rows->base != base || catalog_data_version(cat, &data_version) != 0 ||
        data_version != rows->data_version || catalog_changes_take(rows->recording, pbuf, plen) != 0)
        *pbuf = NULL;
}

/* One publication's state: where, what, and the answer. */
struct publishing {
    struct catalog *cat;
    const char *db_path;
    struct fleet_redis *fr;
    bool force;
    int64_t base, version, current;
    char by[160];
    char *msg;
    size_t msglen;
};

/* Says why a publication failed (r < 0) or was refused (r == 1); returns -1 or 1. */
static int publish_failed(struct publishing *p, int r, const char *err)
{
    if (r < 0)
        snprintf(p->msg, p->msglen, "catalog %s not published to %s: %s", p->db_path, fleet_redis_where(p->fr), err);
    else
        snprintf(p->msg, p->msglen, "catalog %s not published: the fleet's catalog at %s is at version %" PRId64
                 ", which %s has not seen (it last published or pulled version %" PRId64 "): another admin"
                 " published meanwhile; `tierctl pull` takes theirs, `tierctl publish --force` replaces it",
                 p->db_path, fleet_redis_where(p->fr), p->current, p->db_path, p->base);
    return r < 0 ? -1 : 1;
}

/* Rows alone: what the change wrote, or what differs. Returns 0 published, 1 refused, 2
 * when the whole catalog must go instead, -1 failed. */
static int publish_rows(struct publishing *p, const unsigned char *rows, size_t len, const char *what)
{
    char err[512];
    int r = fleet_redis_publish_rows(p->fr, p->base, rows, len, CATALOG_SCHEMA_VERSION, p->by, &p->version,
                                     &p->current, err, sizeof(err));
    if (r == 0)
        snprintf(p->msg, p->msglen, "catalog %s published to %s as version %" PRId64 " (the %zu bytes of rows %s)",
                 p->db_path, fleet_redis_where(p->fr), p->version, len, what);
    return r == 2 || r == 0 ? r : publish_failed(p, r, err);
}

/* A file changed apart from the fleet: the rows in which it differs from the fleet's
 * catalog, when that is the version this file last published or pulled. Returns as
 * publish_rows. */
static int publish_difference(struct publishing *p)
{
    unsigned char *rows = NULL;
    size_t len = 0;
    char why[512], what[64];
    if (fleet_difference(p->db_path, p->fr, p->base, &rows, &len, why, sizeof(why)) != 0)
        return 2;
    if (len == 0) {
        p->version = p->base;
        snprintf(p->msg, p->msglen, "catalog %s is the fleet's version %" PRId64 " at %s already: nothing to"
                 " publish", p->db_path, p->base, fleet_redis_where(p->fr));
        catalog_changes_free(rows);
        return 0;
    }
    snprintf(what, sizeof(what), "in which it differs from version %" PRId64, p->base);
    int r = publish_rows(p, rows, len, what);
    catalog_changes_free(rows);
    return r;
}

static int publish_image(struct publishing *p)
{
    char err[512];
    struct fleet_publication pub = {.schema = CATALOG_SCHEMA_VERSION, .by = p->by};
    if (catalog_image_make(p->cat, (unsigned char **)&pub.image, &pub.len)) {
        snprintf(p->msg, p->msglen, "%s", catalog_errmsg(p->cat));
        return -1;
    }
    int r = fleet_redis_publish(p->fr, p->base, p->force, &pub, &p->version, &p->current, err, sizeof(err));
    if (r == 0)
        snprintf(p->msg, p->msglen, "catalog %s published to %s as version %" PRId64 " (%zu bytes)%s", p->db_path,
                 fleet_redis_where(p->fr), p->version, pub.len,
                 p->force && p->current > p->base ? ", replacing the fleet's" : "");
    catalog_image_free((unsigned char *)pub.image);
    return r == 0 ? 0 : publish_failed(p, r, err);
}

int fleet_publish(struct catalog *cat, const char *db_path, const struct proxy_settings *fc, bool force,
                  const struct fleet_rows *rows, char *msg, size_t msglen)
{
    struct publishing p = {.cat = cat, .db_path = db_path, .force = force, .msg = msg, .msglen = msglen};
    bool changed = true;
    unsigned char *changes = NULL;
    size_t changes_len = 0;
    if (catalog_fleet_mark(cat, &p.base, &changed)) {
        snprintf(msg, msglen, "%s", catalog_errmsg(cat));
        return -1;
    }
    if (!force)
        take_rows(cat, rows, p.base, &changes, &changes_len);
    publisher_name(p.by, sizeof(p.by));
    struct redis_sigpipe sigpipe;
    int r = open_redis(fc, &p.fr, &sigpipe, msg, msglen);
    if (r == 0)
        r = changes ? publish_rows(&p, changes, changes_len, "the change wrote")
                    : force ? 2 : publish_difference(&p);
    if (r == 2)   /* the fleet needs the whole catalog */
        r = publish_image(&p);
    if (r == 0 && catalog_fleet_mark_set(cat, p.version) != 0) {
        snprintf(msg, msglen, "published version %" PRId64 ", but cannot mark %s: %s", p.version, db_path,
                 catalog_errmsg(cat));
        r = -1;
    }
    catalog_changes_free(changes);
    close_redis(p.fr, &sigpipe);
    return r;
}

#define PULL_IMAGE_ONLY 100

/* The image, then the rows of the versions published since it, each in its transaction.
 * Returns 0; PULL_IMAGE_ONLY when the image went in and the rows did not; or the code. */
static int pull_install(struct catalog *cat, struct fleet_redis *fr, const struct fleet_redis_head *head,
                        const unsigned char *image, size_t len, char *err, size_t errlen)
{
    struct fleet_rows_fetched fetched = {0};
    int r = head->image_version < head->version
          ? fleet_redis_fetch_rows(fr, head->image_version, head->version, &fetched, err, errlen) : 0;
    if (r == 0)
        r = catalog_install_image(cat, image, len, head->image_version, err, errlen);
    if (r == 0 && fetched.n > 0) {
        struct catalog_rows rows = {.bufs = fetched.bufs, .lens = fetched.lens, .n = fetched.n};
        struct catalog_changes_summary sum = {0};
        r = catalog_install_rows(cat, &rows, head->image_version, head->version, &sum, err, errlen) ? PULL_IMAGE_ONLY
                                                                                                   : 0;
        free(sum.keys);
    }
    fleet_rows_fetched_free(&fetched);
    return r;
}

int fleet_pull(struct catalog *cat, const char *db_path, const struct proxy_settings *fc, char *msg, size_t msglen)
{
    struct fleet_redis *fr = NULL;
    struct redis_sigpipe sigpipe;
    if (open_redis(fc, &fr, &sigpipe, msg, msglen) != 0)
        return -1;
    struct fleet_redis_head head;
    unsigned char *image = NULL;
    size_t len = 0;
    char err[512], sha[FLEET_SHA256_HEX];
    int status = -1;
    int r = fleet_redis_fetch(fr, &head, &image, &len, err, sizeof(err));
    if (r == 0 && image)
        fleet_sha256_hex(image, len, sha);
    if (r)
        snprintf(msg, msglen, "cannot fetch the fleet's catalog from %s: %s", fleet_redis_where(fr), err);
    else if (!image)
        snprintf(msg, msglen, "no catalog is published at %s", fleet_redis_where(fr));
    else if (strcmp(sha, head.sha256) != 0)
        snprintf(msg, msglen, "the catalog at %s is refused: its sha256 does not match its image", fleet_redis_where(fr));
    else if ((r = pull_install(cat, fr, &head, image, len, err, sizeof(err))) != 0)
        snprintf(msg, msglen, "version %" PRId64 " from %s %s: %s; %s %s", head.version, fleet_redis_where(fr),
                 r == CATALOG_INVALID || r == -EBADMSG ? "is refused" : "cannot be installed", err, db_path,
                 r == PULL_IMAGE_ONLY ? "holds the image it was made from" : "is unchanged");
    else
        status = snprintf(msg, msglen, "catalog %s replaced by version %" PRId64 " from %s", db_path, head.version,
                          fleet_redis_where(fr)) < 0 ? -1 : 0;
    free(image);
    close_redis(fr, &sigpipe);
    return status;
}

/* "tierproxy-follower:HOST:PID:vN" -> name "HOST:PID", version N. */
static json_t *follower_json(const char *line)
{
    const char *rest = line + strlen(FOLLOWER_PREFIX);
    const char *v = strstr(rest, ":v");
    for (const char *p = v; p; p = strstr(p + 1, ":v"))
        v = p;
    if (!v)
        return json_pack("{s:s, s:n}", "name", rest, "version");
    return json_pack("{s:s#, s:I}", "name", rest, (int)(v - rest), "version", (json_int_t)strtoll(v + 2, NULL, 10));
}

static void iso_time(int64_t unix_s, char *out, size_t len)
{
    time_t t = (time_t)unix_s;
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, len, "?");
}

/* The published head and followers as JSON members of doc; -1 with why when Redis could not tell. */
static int fleet_side(const struct proxy_settings *fc, json_t *doc, char *err, size_t errlen)
{
    struct fleet_redis *fr = NULL;
    struct redis_sigpipe sigpipe;
    if (open_redis(fc, &fr, &sigpipe, err, errlen) != 0)
        return -1;
    json_object_set_new(doc, "redis", json_string(fleet_redis_where(fr)));
    struct fleet_redis_head head;
    char why[512], names[8192], when[32];
    int r = fleet_redis_head(fr, &head, why, sizeof(why));
    if (r == 0 && head.version > 0) {
        iso_time(head.published_at, when, sizeof(when));
        json_object_set_new(doc, "published", json_pack("{s:I, s:s, s:s, s:I}", "version", (json_int_t)head.version,
                                                        "published_at", when, "by", head.by, "schema",
                                                        (json_int_t)head.schema));
    } else if (r == 0) {
        json_object_set_new(doc, "published", json_null());
    }
    int n = r == 0 ? fleet_redis_clients(fr, FOLLOWER_PREFIX, names, sizeof(names), why, sizeof(why)) : r;
    json_t *followers = json_array();
    for (const char *line = names; n > 0 && *line; line = strchr(line, '\n') + 1) {
        char one[256];
        snprintf(one, sizeof(one), "%.*s", (int)strcspn(line, "\n"), line);
        json_array_append_new(followers, follower_json(one));
    }
    json_object_set_new(doc, n >= 0 ? "followers" : "followers_error", n >= 0 ? followers : json_string(why));
    if (n < 0)
        json_decref(followers);
    if (r)
        snprintf(err, errlen, "cannot ask %s: %s", fleet_redis_where(fr), why);
    close_redis(fr, &sigpipe);
    return r ? -1 : 0;
}

static void print_text(json_t *doc, FILE *out)
{
    json_t *local = json_object_get(doc, "local"), *pub = json_object_get(doc, "published");
    fprintf(out, "local      %s: version %" JSON_INTEGER_FORMAT "%s\n", json_string_value(json_object_get(local, "db")),
            json_integer_value(json_object_get(local, "version")),
            json_is_true(json_object_get(local, "changed")) ? ", changed since" : "");
    if (json_object_get(doc, "redis"))
        fprintf(out, "fleet      %s\n", json_string_value(json_object_get(doc, "redis")));
    if (json_is_object(pub))
        fprintf(out, "published  version %" JSON_INTEGER_FORMAT " at %s by %s\n",
                json_integer_value(json_object_get(pub, "version")), json_string_value(json_object_get(pub, "published_at")),
                json_string_value(json_object_get(pub, "by")));
    else if (json_is_null(pub))
        fprintf(out, "published  nothing\n");
    json_t *followers = json_object_get(doc, "followers"), *f;
    size_t i;
    if (followers)
        fprintf(out, "following  %zu %s\n", json_array_size(followers), json_array_size(followers) == 1 ? "proxy" : "proxies");
    json_array_foreach(followers, i, f)
        fprintf(out, "  %s  version %" JSON_INTEGER_FORMAT "\n", json_string_value(json_object_get(f, "name")),
                json_integer_value(json_object_get(f, "version")));
    if (json_object_get(doc, "followers_error"))
        fprintf(out, "following  unknown (%s)\n", json_string_value(json_object_get(doc, "followers_error")));
}

int fleet_status(struct catalog *cat, const char *db_path, const struct proxy_settings *fc, bool json, FILE *out,
                 char *err, size_t errlen)
{
    int64_t version = 0;
    bool changed = false;
    if (cat && catalog_fleet_mark(cat, &version, &changed) != 0) {
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
        return -1;
    }
    json_t *doc = json_pack("{s:{s:s, s:I, s:b, s:b}}", "local", "db", db_path, "version", (json_int_t)version,
                            "changed", changed, "exists", cat != NULL);
    if (!doc) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int r = fleet_side(fc, doc, err, errlen);
    if (json)
        r |= json_dumpf(doc, out, JSON_INDENT(2)) != 0 || fputc('\n', out) == EOF ? -1 : 0;
    else
        print_text(doc, out);
    json_decref(doc);
    return r;
}
