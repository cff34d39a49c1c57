/* The snapshot watcher: a background thread that rebuilds the snapshot when the catalog
 * changes, off the serving threads. See snapshot.h.
 *
 * The thread owns a read-only connection and polls PRAGMA data_version through a
 * persistent statement every refresh_ms (a condvar wait with a deadline, so stop is
 * prompt). The number changes after another connection commits, so an idle catalog costs
 * one cheap statement per poll. It also stats the path: a file replaced by rename (a copy
 * pushed from another host) is reopened. Publishing is a pointer swap under the mutex
 * plus an atomic generation bump; readers take a reference under the same mutex.
 *
 * A following proxy's watcher (snapshot_watch_start_following) first lets the follower
 * install a newer published catalog in the file, then polls the file as above; without a
 * file it starts with no snapshot.
 *
 * Failures keep the previous snapshot. healthy goes false when the file cannot be
 * opened or read (and back to true at the next good poll). A catalog locked by another
 * process (SQLITE_BUSY) is retried at the next poll and only counts as unreachable once
 * it has stayed locked for WATCH_LOCKED_UNHEALTHY_MS, so a tierctl write never flaps
 * readiness. */
#include "tiers/snapshot.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/catalog/catalog.h"
#include "store/catalog/catalog_changes.h"
#include "store/catalog/catalog_image.h"
#include "tiers/catalog_follow.h"

/* A poll waits at most this long for a lock, so stop stays prompt. */
#define WATCH_BUSY_TIMEOUT_MS 200
/* How much nicer than the process the thread runs: rebuilds and installs are background
 * work, and on a busy box the workers come first (at 100% CPU a large catalog then takes
 * longer to arrive). */
#define WATCH_NICE 10
/* A lock held longer than this is not a tierctl write: /health reports the catalog. */
#define WATCH_LOCKED_UNHEALTHY_MS 2000

struct snapshot_watch {
    char *path;
    int refresh_ms;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stopping;                     /* under lock */
    struct snapshot *current;          /* under lock */
    char last_error[256];              /* under lock */

    atomic_uint_fast64_t generation;
    atomic_int_fast64_t catalog_version;  /* the current snapshot's; -1 without one */
    atomic_bool healthy;
    atomic_uint_fast64_t last_build_us;

    /* Used by the polling thread only (and by start before the thread exists). */
    struct catalog_follow *follow;     /* NULL: the file is the catalog */
    struct catalog *cat;
    dev_t dev;
    ino_t ino;
    int64_t data_version;
    bool have_version;                 /* false: rebuild at the next poll */
    struct timespec busy_since;        /* first of an unbroken run of SQLITE_BUSY polls */
    bool busy;
};

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Notes one SQLITE_BUSY poll; a long run of them makes the catalog unhealthy. */
static void note_busy(struct snapshot_watch *w)
{
    if (!w->busy) {
        w->busy = true;
        clock_gettime(CLOCK_MONOTONIC, &w->busy_since);
    } else if (ms_since(&w->busy_since) >= WATCH_LOCKED_UNHEALTHY_MS) {
        atomic_store(&w->healthy, false);
    }
}

static void set_error(struct snapshot_watch *w, const char *msg)
{
    pthread_mutex_lock(&w->lock);
    snprintf(w->last_error, sizeof(w->last_error), "%s", msg);
    pthread_mutex_unlock(&w->lock);
}

static void publish(struct snapshot_watch *w, struct snapshot *snap)
{
    pthread_mutex_lock(&w->lock);
    struct snapshot *old = w->current;
    w->current = snap;
    w->last_error[0] = '\0';
    atomic_store(&w->catalog_version, snapshot_catalog_version(snap));
    atomic_fetch_add(&w->generation, 1);
    pthread_mutex_unlock(&w->lock);
    snapshot_unref(old);
}

static void close_catalog(struct snapshot_watch *w)
{
    catalog_close(w->cat);
    w->cat = NULL;
    w->have_version = false;
}

/* Opens the connection when there is none, or when the path now names another file.
 * Returns 0 or a negative errno with the reason in err. */
static int ensure_open(struct snapshot_watch *w, char *err, size_t errlen)
{
    struct stat sb;
    if (stat(w->path, &sb) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot read catalog %s: %s", w->path, strerror(e));
        return -e;
    }
    if (w->cat && (sb.st_dev != w->dev || sb.st_ino != w->ino))
        close_catalog(w);
    if (w->cat)
        return 0;
    int r = catalog_open(w->path, CATALOG_READ_ONLY, &w->cat, err, errlen);
    if (r)
        return r;
    catalog_set_busy_timeout(w->cat, WATCH_BUSY_TIMEOUT_MS);
    w->dev = sb.st_dev;
    w->ino = sb.st_ino;
    w->have_version = false;
    return 0;
}

/* One poll: rebuild and publish when the catalog changed. Returns 0 when the current
 * snapshot is up to date, non-zero (reason in err) otherwise. */
static int poll_once(struct snapshot_watch *w, char *err, size_t errlen)
{
    int r = ensure_open(w, err, errlen);
    if (r) {
        if (r == -EBUSY)
            note_busy(w);
        else
            atomic_store(&w->healthy, false);
        return r;
    }
    int64_t version = 0;
    r = catalog_data_version(w->cat, &version);
    if (r == -EBUSY) {
        snprintf(err, errlen, "%s", catalog_errmsg(w->cat));
        note_busy(w);
        return r;
    }
    w->busy = false;
    if (r) {
        snprintf(err, errlen, "%s", catalog_errmsg(w->cat));
        atomic_store(&w->healthy, false);
        close_catalog(w);
        return r;
    }
    if (w->have_version && version == w->data_version) {
        atomic_store(&w->healthy, true);
        return 0;
    }
    /* Changed. A commit between the poll and the build is in the build and bumps the
     * version again: at worst one extra rebuild, never a missed change. */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct snapshot *snap = NULL;
    r = snapshot_build(w->cat, &snap, err, errlen);
    if (r) {
        if (r == -EBUSY)
            note_busy(w);
        else if (r != -ENOMEM)
            atomic_store(&w->healthy, false);
        return r;
    }
    atomic_store(&w->last_build_us, (uint_fast64_t)(ms_since(&t0) * 1000.0));
    w->data_version = version;
    w->have_version = true;
    atomic_store(&w->healthy, true);
    publish(w, snap);
    return 0;
}

/* Whether the file now holds exactly catalog version `version` (its fleet mark, unchanged
 * since), and its data version in the same read transaction. */
static bool file_holds(struct snapshot_watch *w, int64_t version, int64_t *pdata_version)
{
    char err[256];
    int64_t mark = -1;
    bool changed = true;
    if (ensure_open(w, err, sizeof(err)) != 0 || catalog_begin(w->cat, false) != 0)
        return false;
    int r = catalog_fleet_mark(w->cat, &mark, &changed);
    if (r == 0)
        r = catalog_data_version(w->cat, pdata_version);
    catalog_rollback(w->cat);
    return r == 0 && mark == version && !changed;
}

/* After the follower installed a change of keys alone: the snapshot served with those
 * keys changed (snapshot_patch_keys), instead of a rebuild, when it is the version the
 * change started from and the file holds the version it made. Else the next poll_once
 * rebuilds, as for any change. */
static void patch_keys(struct snapshot_watch *w)
{
    struct catalog_key_change *keys = NULL;
    size_t n = 0;
    int64_t version = 0, data_version = 0;
    if (!catalog_follow_take_keys(w->follow, &keys, &n, &version))
        return;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct snapshot_key_change *changes = calloc(n ? n : 1, sizeof(*changes));
    struct snapshot *snap = NULL;
    if (changes && w->current && snapshot_catalog_version(w->current) == version - 1 &&
        file_holds(w, version, &data_version)) {
        for (size_t i = 0; i < n; i++) {
            memcpy(changes[i].hash, keys[i].hash, TIER_KEY_HASH_LEN);
            changes[i].user_id = keys[i].active ? keys[i].user_id : NULL;
        }
        if (snapshot_patch_keys(w->current, changes, n, version, &snap) == 0) {
            atomic_store(&w->last_build_us, (uint_fast64_t)(ms_since(&t0) * 1000.0));
            w->data_version = data_version;
            w->have_version = true;
            publish(w, snap);
        }
    }
    free(changes);
    free(keys);
}

static void *watch_main(void *arg)
{
    struct snapshot_watch *w = arg;
    int nice = getpriority(PRIO_PROCESS, 0) + WATCH_NICE;
    setpriority(PRIO_PROCESS, (id_t)gettid(), nice > 19 ? 19 : nice);
    pthread_mutex_lock(&w->lock);
    while (!w->stopping) {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += w->refresh_ms / 1000;
        deadline.tv_nsec += (long)(w->refresh_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        while (!w->stopping && pthread_cond_timedwait(&w->cond, &w->lock, &deadline) != ETIMEDOUT)
            ;
        if (w->stopping)
            break;
        pthread_mutex_unlock(&w->lock);
        char err[256];
        if (w->follow && catalog_follow_poll(w->follow) == 1)
            patch_keys(w);
        if (poll_once(w, err, sizeof(err)) != 0)
            set_error(w, err);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void watch_free(struct snapshot_watch *w)
{
    if (!w)
        return;
    catalog_close(w->cat);
    catalog_follow_destroy(w->follow);
    snapshot_unref(w->current);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w->path);
    free(w);
}

static struct snapshot_watch *watch_new(const char *db_path, int refresh_ms, char *err, size_t errlen)
{
    struct snapshot_watch *w = calloc(1, sizeof(*w));
    if (!w || !(w->path = strdup(db_path))) {
        free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->refresh_ms = refresh_ms;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&w->generation, 0);
    atomic_init(&w->catalog_version, -1);
    atomic_init(&w->healthy, false);
    atomic_init(&w->last_build_us, 0);
    return w;
}

static int watch_run(struct snapshot_watch *w, struct snapshot_watch **pwatch, char *err, size_t errlen)
{
    int r = pthread_create(&w->thread, NULL, watch_main, w);
    if (r) {
        snprintf(err, errlen, "cannot start the catalog watcher: %s", strerror(r));
        watch_free(w);
        return -r;
    }
    w->thread_started = true;
    *pwatch = w;
    return 0;
}

int snapshot_watch_start(const char *db_path, int refresh_ms, struct snapshot_watch **pwatch,
                         char *err, size_t errlen)
{
    if (refresh_ms < 1) {
        snprintf(err, errlen, "refresh_ms must be at least 1");
        return -EINVAL;
    }
    struct snapshot_watch *w = watch_new(db_path, refresh_ms, err, errlen);
    if (!w)
        return -ENOMEM;
    /* The first snapshot loads synchronously: a proxy does not start without one. */
    int r = poll_once(w, err, errlen);
    if (r == 0 && !w->current) {
        snprintf(err, errlen, "no snapshot loaded");
        r = -EIO;
    }
    if (r) {
        watch_free(w);
        return r > 0 ? -EINVAL : r;
    }
    return watch_run(w, pwatch, err, errlen);
}

int snapshot_watch_start_following(const char *db_path, int refresh_ms, struct catalog_follow *follow,
                                   struct snapshot_watch **pwatch, char *err, size_t errlen)
{
    struct snapshot_watch *w = refresh_ms < 1 ? NULL : watch_new(db_path, refresh_ms, err, errlen);
    if (!w) {
        if (refresh_ms < 1)
            snprintf(err, errlen, "refresh_ms must be at least 1");
        catalog_follow_destroy(follow);
        return refresh_ms < 1 ? -EINVAL : -ENOMEM;
    }
    w->follow = follow;
    catalog_follow_poll(follow);
    char why[256];
    if (poll_once(w, why, sizeof(why)) != 0)
        set_error(w, why);   /* serves 503 until a catalog arrives */
    return watch_run(w, pwatch, err, errlen);
}

void snapshot_watch_stop(struct snapshot_watch *watch)
{
    if (!watch)
        return;
    if (watch->thread_started) {
        pthread_mutex_lock(&watch->lock);
        watch->stopping = true;
        pthread_cond_signal(&watch->cond);
        pthread_mutex_unlock(&watch->lock);
        pthread_join(watch->thread, NULL);
    }
    watch_free(watch);
}

uint64_t snapshot_watch_generation(const struct snapshot_watch *watch)
{
    return atomic_load(&((struct snapshot_watch *)watch)->generation);
}

struct snapshot *snapshot_watch_acquire(struct snapshot_watch *watch)
{
    pthread_mutex_lock(&watch->lock);
    struct snapshot *snap = snapshot_ref(watch->current);
    pthread_mutex_unlock(&watch->lock);
    return snap;
}

bool snapshot_watch_healthy(const struct snapshot_watch *watch)
{
    return atomic_load(&((struct snapshot_watch *)watch)->healthy);
}

double snapshot_watch_last_build_ms(const struct snapshot_watch *watch)
{
    return (double)atomic_load(&((struct snapshot_watch *)watch)->last_build_us) / 1000.0;
}

void snapshot_watch_last_error(struct snapshot_watch *watch, char *buf, size_t buflen)
{
    pthread_mutex_lock(&watch->lock);
    snprintf(buf, buflen, "%s", watch->last_error);
    pthread_mutex_unlock(&watch->lock);
}

int64_t snapshot_watch_catalog_version(const struct snapshot_watch *watch)
{
    return atomic_load(&((struct snapshot_watch *)watch)->catalog_version);
}

uint64_t snapshot_watch_catalog_refused(const struct snapshot_watch *watch)
{
    return watch->follow ? catalog_follow_refused(watch->follow) : 0;
}
