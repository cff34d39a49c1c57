/* Following the fleet's catalog. See catalog_follow.h.
 *
 * A version is fetched once: one that fails its checks is remembered and not fetched
 * again (a large catalog is tens of megabytes), until a newer one is published. Versions
 * only grow, so a published version below the file's (a Redis restored from an older
 * copy) is not installed: the proxy keeps the newer catalog it has and says so once. */
#include "tiers/catalog_follow.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store/catalog/catalog.h"
#include "store/catalog/catalog_changes.h"
#include "store/catalog/catalog_image.h"
#include "tiers/catalog_install.h"

struct catalog_follow {
    char *db_path;
    char *name;
    struct fleet_redis *redis;
    catalog_follow_log_fn *log;
    void *log_ctx;
    struct catalog *cat;               /* read-write, opened when first needed */
    int64_t local_version;             /* the file's fleet mark; -1 = not read yet */
    int64_t refused_version;           /* not fetched again */
    int64_t failed_version;            /* could not be written: said once */
    int64_t older_said;                /* an older published version, said once */
    bool nothing_said;                 /* nothing published, said once */
    bool away;                         /* Redis unreachable, said once */
    atomic_uint_fast64_t refused;
    struct catalog_key_change *keys;   /* the last install's, for the watcher */
    size_t n_keys;
    int64_t keys_version;
};

__attribute__((format(printf, 3, 4)))
static void say(struct catalog_follow *f, enum catalog_follow_level level, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (f->log)
        f->log(f->log_ctx, level, line);
}

int catalog_follow_create(const struct catalog_follow_options *o, struct catalog_follow **pfollow, char *err,
                          size_t errlen)
{
    struct catalog_follow *f = calloc(1, sizeof(*f));
    if (!f || !(f->db_path = strdup(o->db_path)) || !(f->name = strdup(o->name ? o->name : ""))) {
        catalog_follow_destroy(f);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int r = fleet_redis_create(&o->redis, &f->redis, err, errlen);
    if (r) {
        catalog_follow_destroy(f);
        return r;
    }
    f->log = o->log;
    f->log_ctx = o->log_ctx;
    f->local_version = -1;
    atomic_init(&f->refused, 0);
    *pfollow = f;
    return 0;
}

void catalog_follow_destroy(struct catalog_follow *f)
{
    if (!f)
        return;
    catalog_close(f->cat);
    free(f->keys);
    fleet_redis_destroy(f->redis);
    free(f->db_path);
    free(f->name);
    free(f);
}

uint64_t catalog_follow_refused(const struct catalog_follow *f)
{
    return atomic_load(&((struct catalog_follow *)f)->refused);
}

/* Shows this proxy and the version it holds to `tierctl status`. */
static void show_version(struct catalog_follow *f)
{
    char name[160];
    snprintf(name, sizeof(name), "%s:v%" PRId64, f->name, f->local_version);
    fleet_redis_set_client_name(f->redis, name);
}

/* Opens the file: read-only to read its version, read-write to install in place. */
static int open_file(struct catalog_follow *f, enum catalog_mode mode)
{
    if (f->cat)
        return 0;
    char err[512];
    int r = catalog_open(f->db_path, mode, &f->cat, err, sizeof(err));
    if (r)
        say(f, CATALOG_FOLLOW_ERROR, "catalog: %s", err);
    return r;
}

static void close_file(struct catalog_follow *f)
{
    catalog_close(f->cat);
    f->cat = NULL;
}

/* The version the file holds: 0 for a file that does not exist yet. Read-only: a
 * read-write open would turn the file to WAL, which a rename must not meet. */
static int read_local_version(struct catalog_follow *f)
{
    struct stat sb;
    if (stat(f->db_path, &sb) != 0 && errno == ENOENT) {
        f->local_version = 0;
        return 0;
    }
    int r = open_file(f, CATALOG_READ_ONLY);
    if (r == 0 && (r = catalog_begin(f->cat, false)) == 0) {
        bool changed;
        r = catalog_fleet_mark(f->cat, &f->local_version, &changed);
        catalog_rollback(f->cat);
    }
    close_file(f);
    if (r == 0)
        show_version(f);
    return r;
}

/* Installs the image and the rows after it by a new file renamed over the old one, or in
 * place when a journal or WAL lies beside the file. */
static int install_image(struct catalog_follow *f, const unsigned char *image, size_t len,
                         const struct fleet_redis_head *head, const struct catalog_rows *rows,
                         struct catalog_changes_summary *sum, char *err, size_t errlen, bool *pin_place)
{
    int r = catalog_install_file(f->db_path, image, len, head->image_version, rows, head->version, sum, err, errlen);
    *pin_place = r == 1;
    if (r != 1)
        return r;
    r = open_file(f, CATALOG_CREATE);
    if (r == 0)
        r = catalog_install_image(f->cat, image, len, head->image_version, err, errlen);
    close_file(f);
    if (r == 0 && rows->n > 0 && (r = open_file(f, CATALOG_CACHE)) == 0)
        r = catalog_install_rows(f->cat, rows, head->image_version, head->version, sum, err, errlen);
    close_file(f);
    return r;
}

static void refuse(struct catalog_follow *f, int64_t version, const char *why)
{
    f->refused_version = version;
    atomic_fetch_add(&f->refused, 1);
    say(f, CATALOG_FOLLOW_ERROR, "catalog: version %" PRId64 " from %s refused: %s; serving version %" PRId64 " from %s",
        version, fleet_redis_where(f->redis), why, f->local_version, f->db_path);
}

/* The published version, or 0 when there is nothing to fetch (said once each). */
static int64_t published_version(struct catalog_follow *f)
{
    char err[512];
    int64_t version = 0;
    if (fleet_redis_version(f->redis, &version, err, sizeof(err)) != 0) {
        if (!f->away)
            say(f, CATALOG_FOLLOW_WARN, "catalog: cannot ask %s for the fleet's catalog: %s; serving version %" PRId64
                " from %s", fleet_redis_where(f->redis), err, f->local_version, f->db_path);
        f->away = true;
        return 0;
    }
    if (f->away)
        say(f, CATALOG_FOLLOW_INFO, "catalog: %s answers again", fleet_redis_where(f->redis));
    f->away = false;
    say(f, CATALOG_FOLLOW_DEBUG, "catalog: %s publishes version %" PRId64 "; %s holds version %" PRId64,
        fleet_redis_where(f->redis), version, f->db_path, f->local_version);
    if (version == 0 && !f->nothing_said)
        say(f, CATALOG_FOLLOW_WARN, "catalog: no catalog is published at %s (flushed, or never published); serving"
            " version %" PRId64 " from %s", fleet_redis_where(f->redis), f->local_version, f->db_path);
    f->nothing_said = version == 0;
    if (version > 0 && version < f->local_version && version != f->older_said) {
        say(f, CATALOG_FOLLOW_WARN, "catalog: the published version %" PRId64 " is older than version %" PRId64
            " in %s: keeping it (publish from a host that has it)", version, f->local_version, f->db_path);
        f->older_said = version;
    }
    return version;
}

/* The rows of versions from + 1 .. to into *pfetched (none when from == to). Returns 0;
 * -EAGAIN: replaced meanwhile; else non-zero, said in err. */
static int fetch_rows(struct catalog_follow *f, int64_t from, int64_t to, struct fleet_rows_fetched *pfetched,
                      struct catalog_rows *rows, char *err, size_t errlen)
{
    memset(pfetched, 0, sizeof(*pfetched));
    int r = from < to ? fleet_redis_fetch_rows(f->redis, from, to, pfetched, err, errlen) : 0;
    *rows = (struct catalog_rows){.bufs = pfetched->bufs, .lens = pfetched->lens, .n = pfetched->n};
    return r;
}

/* Checks and installs one fetched publication: its image, and the rows of the versions
 * published since it. Returns 1 when installed. */
static int install(struct catalog_follow *f, const struct fleet_redis_head *head, const unsigned char *image,
                   size_t len)
{
    char sha[FLEET_SHA256_HEX], err[512];
    fleet_sha256_hex(image, len, sha);
    if (strcmp(sha, head->sha256) != 0) {
        refuse(f, head->version, "its sha256 does not match its image (a partial or foreign write)");
        return 0;
    }
    if (head->schema > CATALOG_SCHEMA_VERSION) {
        snprintf(err, sizeof(err), "published by a newer tierctl (catalog schema %" PRId64 "; this proxy reads up to"
                 " %d)", head->schema, CATALOG_SCHEMA_VERSION);
        refuse(f, head->version, err);
        return 0;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct fleet_rows_fetched fetched;
    struct catalog_rows rows;
    struct catalog_changes_summary sum = {0};
    bool in_place = false;
    int r = fetch_rows(f, head->image_version, head->version, &fetched, &rows, err, sizeof(err));
    if (r == 0)
        r = install_image(f, image, len, head, &rows, &sum, err, sizeof(err), &in_place);
    fleet_rows_fetched_free(&fetched);
    free(sum.keys);
    if (r == -EAGAIN)
        return 0;
    if (r == CATALOG_INVALID || r == -EBADMSG) {
        refuse(f, head->version, err);
        return 0;
    }
    if (r) {
        if (r != -EBUSY && head->version != f->failed_version)
            say(f, CATALOG_FOLLOW_ERROR, "catalog: cannot write version %" PRId64 " to %s: %s", head->version,
                f->db_path, err);
        f->failed_version = head->version;
        return 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    f->local_version = head->version;
    show_version(f);
    char chain[96] = "";
    if (rows.n > 0)
        snprintf(chain, sizeof(chain), ": version %" PRId64 "'s image and the rows of %zu versions since",
                 head->image_version, rows.n);
    say(f, CATALOG_FOLLOW_INFO, "catalog: version %" PRId64 " from %s installed in %s%s%s (%zu bytes, %.0f ms)",
        head->version, fleet_redis_where(f->redis), f->db_path,
        in_place ? " in place (a journal lies beside it)" : "", chain, len,
        (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    return 1;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The versions since the file's from the rows of each, when the head's chain reaches back
 * to the file's version. Returns 1 when installed; 0 when the whole catalog is to be taken
 * instead (said why, when rows were there but did not do) or the rows were replaced. */
static int follow_rows(struct catalog_follow *f, const struct fleet_redis_head *head)
{
    char err[512];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct fleet_rows_fetched fetched;
    struct catalog_rows rows;
    struct catalog_changes_summary sum = {0};
    int r = fetch_rows(f, f->local_version, head->version, &fetched, &rows, err, sizeof(err));
    if (r == 0 && (r = open_file(f, CATALOG_CACHE)) == 0)
        r = catalog_install_rows(f->cat, &rows, f->local_version, head->version, &sum, err, sizeof(err));
    close_file(f);
    size_t bytes = 0;
    for (size_t i = 0; i < rows.n; i++)
        bytes += rows.lens[i];
    fleet_rows_fetched_free(&fetched);
    if (r == 0 && sum.keys && sum.n_keys == sum.rows) {
        f->keys = sum.keys;
        f->n_keys = sum.n_keys;
        f->keys_version = head->version;
    } else {
        free(sum.keys);
    }
    if (r == -EAGAIN)
        return 0;
    if (r) {
        say(f, CATALOG_FOLLOW_WARN, "catalog: the rows of versions %" PRId64 "..%" PRId64 " from %s do not apply to"
            " version %" PRId64 " in %s (%s): taking the whole catalog", f->local_version + 1, head->version,
            fleet_redis_where(f->redis), f->local_version, f->db_path, err);
        return 0;
    }
    f->local_version = head->version;
    show_version(f);
    say(f, CATALOG_FOLLOW_INFO, "catalog: version %" PRId64 " from %s applied to %s: %zu changed row%s of %zu"
        " version%s (%zu bytes, %.0f ms)", head->version, fleet_redis_where(f->redis), f->db_path, sum.rows,
        sum.rows == 1 ? "" : "s", rows.n, rows.n == 1 ? "" : "s", bytes, ms_since(&t0));
    return 1;
}

bool catalog_follow_take_keys(struct catalog_follow *f, struct catalog_key_change **pkeys, size_t *pn,
                              int64_t *pversion)
{
    if (!f->keys)
        return false;
    *pkeys = f->keys;
    *pn = f->n_keys;
    *pversion = f->keys_version;
    f->keys = NULL;
    return true;
}

int catalog_follow_poll(struct catalog_follow *f)
{
    free(f->keys);   /* not taken after the last poll: that snapshot was rebuilt */
    f->keys = NULL;
    if (f->local_version < 0 && read_local_version(f) != 0)
        return 0;
    int64_t version = published_version(f);
    if (version <= f->local_version || version == f->refused_version)
        return 0;
    struct fleet_redis_head head;
    char err[512];
    if (fleet_redis_head(f->redis, &head, err, sizeof(err)) != 0)
        return 0;
    if (head.version > f->local_version && head.image_version <= f->local_version &&
        head.schema == CATALOG_SCHEMA_VERSION && follow_rows(f, &head))
        return 1;
    unsigned char *image = NULL;
    size_t len = 0;
    int r = fleet_redis_fetch(f->redis, &head, &image, &len, err, sizeof(err));
    if (r == -EAGAIN)
        return 0;   /* replaced while it was read: the next poll reads the newer one */
    if (r == -EBADMSG) {
        refuse(f, version, err);
        return 0;
    }
    if (r) {
        if (version != f->failed_version)
            say(f, CATALOG_FOLLOW_WARN, "catalog: cannot fetch version %" PRId64 " from %s: %s", version,
                fleet_redis_where(f->redis), err);
        f->failed_version = version;
        return 0;
    }
    int installed = 0;
    if (image && head.version > f->local_version && head.version != f->refused_version)
        installed = install(f, &head, image, len);
    free(image);
    return installed;
}
