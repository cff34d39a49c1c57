/* Installing the fleet's catalog. See catalog_install.h. */
#include "tiers/catalog_install.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/catalog/catalog_changes.h"
#include "store/catalog/catalog_image.h"
#include "tiers/limit_bounds.h"

struct check {
    struct catalog *cat;
    char msg[256];
    char *err;
    size_t errlen;
};

/* Records why a record is refused: "plan 3: ...". Returns CATALOG_INVALID. */
__attribute__((format(printf, 2, 3)))
static int refuse(struct check *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return CATALOG_INVALID;
}

static bool id_ok(int64_t id)
{
    return id >= 1 && id <= CATALOG_ID_MAX;
}

static int check_plan(void *ctx, const struct catalog_plan *p)
{
    struct check *c = ctx;
    if (!id_ok(p->id))
        return refuse(c, "plan id %" PRId64 " is out of range", p->id);
    if (catalog_check_plan_name(p->name, c->msg, sizeof(c->msg)))
        return refuse(c, "plan %" PRId64 ": %s", p->id, c->msg);
    return 0;
}

static int check_limit(void *ctx, const struct catalog_limit *l)
{
    struct check *c = ctx;
    if (!id_ok(l->id))
        return refuse(c, "limit id %" PRId64 " is out of range", l->id);
    if (catalog_check_limit(l, c->msg, sizeof(c->msg)) ||
        (l->route_method && (catalog_check_route(l->route_method, l->route_prefix, c->msg, sizeof(c->msg)) ||
                             tier_route_prefix_check(l->route_prefix, c->msg, sizeof(c->msg)))))
        return refuse(c, "limit %" PRId64 ": %s", l->id, c->msg);
    return 0;
}

static int check_cost(void *ctx, const struct catalog_cost *k)
{
    struct check *c = ctx;
    if (catalog_check_cost(k, c->msg, sizeof(c->msg)) ||
        catalog_check_route(k->route_method, k->route_prefix, c->msg, sizeof(c->msg)))
        return refuse(c, "plan %" PRId64 "'s cost: %s", k->plan_id, c->msg);
    return 0;
}

static int check_user(void *ctx, const struct catalog_user *u)
{
    struct check *c = ctx;
    if (catalog_check_user_id(u->id, c->msg, sizeof(c->msg)) || catalog_check_time(u->created, c->msg, sizeof(c->msg)))
        return refuse(c, "a user: %s", c->msg);
    return 0;
}

static int check_key(void *ctx, const struct catalog_key *k)
{
    struct check *c = ctx;
    if (!id_ok(k->id))
        return refuse(c, "key id %" PRId64 " is out of range", k->id);
    if (catalog_check_user_id(k->user_id, c->msg, sizeof(c->msg)) ||
        catalog_check_label(k->label, c->msg, sizeof(c->msg)) ||
        catalog_check_time(k->created, c->msg, sizeof(c->msg)) ||
        (k->revoked && catalog_check_time(k->revoked, c->msg, sizeof(c->msg))))
        return refuse(c, "key %" PRId64 ": %s", k->id, c->msg);
    return 0;
}

int catalog_install_check(struct catalog *cat, char *err, size_t errlen)
{
    struct check c = {.cat = cat, .err = err, .errlen = errlen};
    err[0] = '\0';
    int r = catalog_plan_each(cat, check_plan, &c);
    if (r == 0)
        r = catalog_limit_each(cat, 0, check_limit, &c);
    if (r == 0)
        r = catalog_user_limit_each(cat, NULL, check_limit, &c);
    if (r == 0)
        r = catalog_cost_each(cat, 0, check_cost, &c);
    if (r == 0)
        r = catalog_user_each(cat, 0, check_user, &c);
    if (r == 0)
        r = catalog_key_each(cat, NULL, false, check_key, &c);
    int64_t orphan = 0;
    if (r == 0 && (r = catalog_orphan_active_key(cat, &orphan)) == 0)
        r = refuse(&c, "key %" PRId64 " is active but its user is not in the catalog", orphan);
    else if (r == CATALOG_NOT_FOUND)
        r = 0;
    if (r && !err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    if (r == 0 && (tier_catalog_check_bounds(cat, err, errlen) || tier_catalog_check_costs(cat, err, errlen)))
        r = CATALOG_INVALID;
    return r;
}

/* The checks of catalog_install_check on the keys rows changed, which is all they can
 * change when they touch api_keys alone: each key of each user they name, and the user
 * of each key they left active. */
static int check_changed_keys(struct catalog *cat, const struct catalog_changes_summary *sum, char *err,
                              size_t errlen)
{
    struct check c = {.cat = cat, .err = err, .errlen = errlen};
    int r = 0;
    for (size_t i = 0; r == 0 && i < sum->n_keys; i++) {
        const struct catalog_key_change *k = &sum->keys[i];
        int64_t plan_id = 0;
        r = catalog_key_each(cat, k->user_id, false, check_key, &c);
        if (r == 0 && k->active && catalog_user_find(cat, k->user_id, &plan_id) != 0)
            r = refuse(&c, "a key is active but its user \"%s\" is not in the catalog", k->user_id);
    }
    if (r && !err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    return r;
}

/* Checks the records (those of sum's keys when it lists them, else all), marks them with
 * version and commits. cat holds a write transaction when the records were copied in,
 * none when an image file is used as it is. */
static int finish_records(struct catalog *cat, bool in_transaction, const struct catalog_changes_summary *sum,
                          int64_t version, char *err, size_t errlen)
{
    int r = in_transaction ? 0 : catalog_begin(cat, true);
    if (r == 0)
        r = sum && sum->keys ? check_changed_keys(cat, sum, err, errlen) : catalog_install_check(cat, err, errlen);
    if (r == 0)
        r = catalog_fleet_mark_set(cat, version);
    if (r == 0)
        r = catalog_commit(cat);
    if (r && !err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    return r;
}

/* Rolls back a failed install, its reason in err. */
static void roll_back(struct catalog *cat, char *err, size_t errlen)
{
    if (!err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    catalog_rollback(cat);
}

int catalog_install_image(struct catalog *cat, const unsigned char *image, size_t len, int64_t version, char *err,
                          size_t errlen)
{
    err[0] = '\0';
    int schema = 0;
    int r = catalog_image_attach(cat, image, len, &schema);
    if (r == 0)
        r = catalog_begin(cat, true);
    if (r == 0)
        r = catalog_image_copy(cat);
    if (r == 0)
        r = finish_records(cat, true, NULL, version, err, errlen);
    if (r)
        roll_back(cat, err, errlen);
    catalog_image_detach(cat);
    return r;
}

/* Adds one change's summary to the chain's: its rows, and its keys after the keys before
 * (a key changed twice ends as the later change left it). */
static int add_summary(struct catalog_changes_summary *sum, struct catalog_changes_summary *one)
{
    sum->rows += one->rows;
    sum->keys_only = sum->keys_only && one->keys_only && one->keys;
    if (!sum->keys_only) {
        free(sum->keys);
        free(one->keys);
        sum->keys = NULL;
        sum->n_keys = 0;
        return 0;
    }
    struct catalog_key_change *keys = realloc(sum->keys, (sum->n_keys + one->n_keys + 1) * sizeof(*keys));
    if (!keys) {
        free(one->keys);
        return -ENOMEM;
    }
    memcpy(keys + sum->n_keys, one->keys, one->n_keys * sizeof(*keys));
    sum->keys = keys;
    sum->n_keys += one->n_keys;
    free(one->keys);
    return 0;
}

int catalog_install_rows(struct catalog *cat, const struct catalog_rows *rows, int64_t base, int64_t version,
                         struct catalog_changes_summary *sum, char *err, size_t errlen)
{
    err[0] = '\0';
    *sum = (struct catalog_changes_summary){.keys_only = true};
    int64_t mark = 0;
    bool changed = true;
    int r = catalog_foreign_keys(cat, false);
    if (r == 0)
        r = catalog_begin(cat, true);
    if (r == 0 && (r = catalog_fleet_mark(cat, &mark, &changed)) == 0 && (mark != base || changed)) {
        snprintf(err, errlen, "the file holds version %" PRId64 "%s, not version %" PRId64, mark,
                 changed ? " and a local change" : "", base);
        r = CATALOG_INVALID;
    }
    for (size_t i = 0; r == 0 && i < rows->n; i++) {
        struct catalog_changes_summary one = {0};
        r = catalog_changes_apply(cat, rows->bufs[i], rows->lens[i], &one);
        if (r)
            snprintf(err, errlen, "version %" PRId64 ": %s", base + 1 + (int64_t)i, catalog_errmsg(cat));
        int a = add_summary(sum, &one);
        r = r ? r : a;
    }
    if (r == 0)
        r = finish_records(cat, true, sum, version, err, errlen);
    if (r) {
        roll_back(cat, err, errlen);
        free(sum->keys);
        sum->keys = NULL;
    }
    int fk = catalog_foreign_keys(cat, true);
    return r ? r : fk;
}

/* ---- install by file ---- */

static bool sidecar_exists(const char *db_path, const char *suffix)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof(path), "%s%s", db_path, suffix);
    return stat(path, &sb) == 0;
}

static void remove_with_sidecars(const char *path)
{
    static const char *const suffixes[] = {"", "-journal", "-wal", "-shm"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        char p[4096];
        snprintf(p, sizeof(p), "%s%s", path, suffixes[i]);
        unlink(p);
    }
}

static int write_all(int fd, const unsigned char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -errno;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A new catalog at tmp with the image's records copied in (an image of another schema). */
static int build_by_copy(const char *tmp, const unsigned char *image, size_t len, struct catalog **pcat, char *err,
                         size_t errlen)
{
    unlink(tmp);
    int schema = 0;
    int r = catalog_create_rollback(tmp, pcat, err, errlen);
    if (r == 0 && (r = catalog_image_attach(*pcat, image, len, &schema)) == 0 &&
        (r = catalog_begin(*pcat, true)) == 0 && (r = catalog_image_copy(*pcat)) == 0)
        return 0;
    if (*pcat && !err[0])
        snprintf(err, errlen, "%s", catalog_errmsg(*pcat));
    return r;
}

/* image written to a new file beside db_path (0600), its name in tmp; fsync'd when
 * durable (a file that replaces the cache, not a scratch one). Returns 0, or a negative
 * errno with why in err and nothing left behind. */
static int image_to_temp(const char *db_path, const unsigned char *image, size_t len, bool durable, char *tmp,
                         size_t tmplen, char *err, size_t errlen)
{
    snprintf(tmp, tmplen, "%s.fleet-XXXXXX", db_path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int r = -errno;
        snprintf(err, errlen, "cannot create a file beside %s: %s", db_path, strerror(-r));
        return r;
    }
    int r = write_all(fd, image, len);
    if (r == 0 && durable && fsync(fd) != 0)
        r = -errno;
    close(fd);
    if (r) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(-r));
        unlink(tmp);
    }
    return r;
}

static void sync_directory(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The rows after the image, applied to the new file before it is renamed into place. */
static int then_rows(const char *tmp, const struct catalog_rows *rows, int64_t image_version, int64_t version,
                     struct catalog_changes_summary *sum, char *err, size_t errlen)
{
    struct catalog *cat = NULL;
    int r = catalog_open(tmp, CATALOG_CACHE, &cat, err, errlen);
    if (r == 0)
        r = catalog_install_rows(cat, rows, image_version, version, sum, err, errlen);
    catalog_close(cat);
    return r;
}

int catalog_install_file(const char *db_path, const unsigned char *image, size_t len, int64_t image_version,
                         const struct catalog_rows *rows, int64_t version, struct catalog_changes_summary *sum,
                         char *err, size_t errlen)
{
    err[0] = '\0';
    if (sidecar_exists(db_path, "-wal") || sidecar_exists(db_path, "-journal"))
        return 1;
    char tmp[4096];
    int r = image_to_temp(db_path, image, len, true, tmp, sizeof(tmp), err, errlen);
    if (r)
        return r;
    struct catalog *cat = NULL;
    bool copied = false;
    if ((r = catalog_image_open_file(tmp, &cat, err, errlen)) == 1) {
        copied = true;
        r = build_by_copy(tmp, image, len, &cat, err, errlen);
    }
    if (r == 0)
        r = finish_records(cat, copied, NULL, image_version, err, errlen);
    catalog_close(cat);
    if (r == 0 && rows && rows->n > 0)
        r = then_rows(tmp, rows, image_version, version, sum, err, errlen);
    if (r == 0 && rename(tmp, db_path) != 0) {
        r = -errno;
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, db_path, strerror(errno));
    }
    if (r)
        remove_with_sidecars(tmp);
    else
        sync_directory(db_path);
    return r;
}

/* ---- the fleet's catalog as a file to compare with ---- */

static int apply_each(struct catalog *cat, const struct catalog_rows *rows, char *err, size_t errlen)
{
    int r = rows && rows->n > 0 ? catalog_foreign_keys(cat, false) : 0;
    for (size_t i = 0; r == 0 && rows && i < rows->n; i++) {
        struct catalog_changes_summary one = {0};
        if ((r = catalog_begin(cat, true)) == 0 &&
            (r = catalog_changes_apply(cat, rows->bufs[i], rows->lens[i], &one)) == 0)
            r = catalog_commit(cat);
        else if (r != 0)
            catalog_rollback(cat);
        free(one.keys);
    }
    if (r)
        snprintf(err, errlen, "%s", catalog_errmsg(cat));
    return r;
}

int catalog_scratch_file(const char *db_path, const unsigned char *image, size_t len, const struct catalog_rows *rows,
                         char *path, size_t pathlen, char *err, size_t errlen)
{
    err[0] = '\0';
    int r = image_to_temp(db_path, image, len, false, path, pathlen, err, errlen);
    if (r)
        return r;
    struct catalog *cat = NULL;
    if ((r = catalog_image_open_file(path, &cat, err, errlen)) == 1)
        snprintf(err, errlen, "the image is of another schema");
    else if (r == 0)
        r = apply_each(cat, rows, err, errlen);
    catalog_close(cat);
    if (r)
        catalog_scratch_remove(path);
    return r;
}

void catalog_scratch_remove(const char *path)
{
    remove_with_sidecars(path);
}
