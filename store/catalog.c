/* The SQLite catalog. See catalog.h for the contract.
 *
 * Every statement is prepared with bound parameters (stmt_prepare's format string says
 * what to bind). Those that return no row or one number (stmt_run, query_int) are kept
 * prepared in the connection's statement cache and reset after each run; the rest, and the
 * persistent data_version statement, are finalized by their user and catalog_close. */
#include "store/catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/catalog_impl.h"



#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"

int catalog_set_error(struct catalog *cat, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cat->errmsg, sizeof(cat->errmsg), fmt, ap);
    va_end(ap);
    return 0;
}
#define set_err catalog_set_error
#define sql_fail catalog_sql_fail

int catalog_sql_fail(struct catalog *cat, int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        set_err(cat, "the catalog is locked by another process (%s)", sqlite3_errmsg(cat->db));
        return -EBUSY;
    case SQLITE_NOMEM:
        set_err(cat, "out of memory");
        return -ENOMEM;
    case SQLITE_READONLY:
        set_err(cat, "the catalog is read-only: %s", sqlite3_errmsg(cat->db));
        return -EROFS;
    case SQLITE_NOTADB:
        set_err(cat, "%s is not a SQLite database", sqlite3_db_filename(cat->db, "main"));
        return -EIO;
    default:
        set_err(cat, "catalog error: %s", sqlite3_errmsg(cat->db));
        return -EIO;
    }
}

/* Binds per fmt: 'i' int64_t, 'I' an int64_t id (<= 0 binds NULL), 't' const char * (NULL binds NULL), 'h' a CATALOG_HASH_LEN
 * blob (const uint8_t *). */
static int bind_va(sqlite3_stmt *st, const char *fmt, va_list ap)
{
    int rc = SQLITE_OK;
    for (int i = 0; fmt[i] && rc == SQLITE_OK; i++) {
        int col = i + 1;
        switch (fmt[i]) {
        case 'i':
            rc = sqlite3_bind_int64(st, col, va_arg(ap, int64_t));
            break;
        case 'I': { /* an id: <= 0 binds NULL, so that SQLite allocates one */
            int64_t v = va_arg(ap, int64_t);
            rc = v > 0 ? sqlite3_bind_int64(st, col, v) : sqlite3_bind_null(st, col);
            break;
        }
        case 't': {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(st, col, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(st, col);
            break;
        }
        case 'h':
            rc = sqlite3_bind_blob(st, col, va_arg(ap, const uint8_t *), CATALOG_HASH_LEN,
                                   SQLITE_TRANSIENT);
            break;
        default:
            rc = SQLITE_MISUSE;
        }
    }
    return rc;
}

static int stmt_prepare(struct catalog *cat, sqlite3_stmt **pst, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        va_list ap;
        va_start(ap, fmt);
        rc = bind_va(st, fmt, ap);
        va_end(ap);
    }
    if (rc != SQLITE_OK) {
        int r = sql_fail(cat, rc);
        sqlite3_finalize(st);
        return r;
    }
    *pst = st;
    return 0;
}

/* Runs a statement that returns no rows. *pchanges (if not NULL) gets the rows changed. */
static int stmt_run(struct catalog *cat, int64_t *pchanges, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    int rc = stmt_cache_prepare(&cat->cache, cat->db, sql, &st);
    if (rc == SQLITE_OK) {
        va_list ap;
        va_start(ap, fmt);
        rc = bind_va(st, fmt, ap);
        va_end(ap);
    }
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            ;
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    int r = rc == SQLITE_OK ? 0 : sql_fail(cat, rc);
    if (r == 0 && pchanges)
        *pchanges = sqlite3_changes64(cat->db);
    stmt_cache_done(st);
    return r;
}

/* Runs a query for one integer (first column of the first row). Returns 0 with *pvalue
 * set, CATALOG_NOT_FOUND when there is no row, or a negative errno. */
static int query_int(struct catalog *cat, int64_t *pvalue, const char *sql, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    int rc = stmt_cache_prepare(&cat->cache, cat->db, sql, &st);
    if (rc == SQLITE_OK) {
        va_list ap;
        va_start(ap, fmt);
        rc = bind_va(st, fmt, ap);
        va_end(ap);
    }
    int r = 0;
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *pvalue = sqlite3_column_int64(st, 0);
        else if (rc == SQLITE_DONE)
            r = CATALOG_NOT_FOUND;
        else
            r = sql_fail(cat, rc);
    } else {
        r = sql_fail(cat, rc);
    }
    stmt_cache_done(st);
    return r;
}

static const char *column_text(sqlite3_stmt *st, int col)
{
    return (const char *)sqlite3_column_text(st, col);
}

/* ---- open, close, transactions ---- */

int catalog_open(const char *path, enum catalog_mode mode, struct catalog **pcat,
                 char *err, size_t errlen)
{
    struct stat sb;
    if (mode != CATALOG_CREATE && stat(path, &sb) != 0) {
        int e = errno;
        snprintf(err, errlen, "cannot open catalog %s: %s%s", path, strerror(e),
                 e == ENOENT ? " (run \"tierctl init\" to create it)" : "");
        return -e;
    }
    struct catalog *cat = calloc(1, sizeof(*cat));
    if (!cat) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    cat->mode = mode;
    if (mode == CATALOG_CREATE) {
        /* SQLite would create the file with 0644 less the umask, and its -wal and -shm
         * files with the file's mode: the catalog holds key hashes, so owner only. */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            close(fd);
        } else if (errno != EEXIST) {
            int e = errno;
            snprintf(err, errlen, "cannot create catalog %s: %s", path, strerror(e));
            free(cat);
            return -e;
        }
    }
    int flags = mode == CATALOG_READ_ONLY ? SQLITE_OPEN_READONLY
              : mode == CATALOG_READ_WRITE || mode == CATALOG_CACHE ? SQLITE_OPEN_READWRITE
              : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int r = 0;
    int rc = sqlite3_open_v2(path, &cat->db, flags, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open catalog %s: %s", path,
                 cat->db ? sqlite3_errmsg(cat->db) : sqlite3_errstr(rc));
        r = rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
        goto out;
    }
    sqlite3_extended_result_codes(cat->db, 1);
    sqlite3_busy_timeout(cat->db, CATALOG_BUSY_TIMEOUT_MS);
    r = stmt_run(cat, NULL, "PRAGMA foreign_keys = ON", "");
    if (r == 0 && (mode == CATALOG_READ_WRITE || mode == CATALOG_CREATE)) {
        /* Readers never wait for tierctl, and tierctl never waits for readers. */
        sqlite3_stmt *st = NULL;
        r = stmt_prepare(cat, &st, "PRAGMA journal_mode = WAL", "");
        if (r == 0) {
            rc = sqlite3_step(st);
            if (rc != SQLITE_ROW)
                r = sql_fail(cat, rc);
            else if (strcmp(column_text(st, 0) ? column_text(st, 0) : "", "wal") != 0)
                r = -EIO, set_err(cat, "cannot switch the catalog to WAL mode");
            sqlite3_finalize(st);
        }
    }
    if (r) {
        snprintf(err, errlen, "cannot open catalog %s: %s", path, cat->errmsg);
        goto out;
    }
    *pcat = cat;
    cat = NULL;
out:
    catalog_close(cat);
    return r;
}

void catalog_close(struct catalog *cat)
{
    if (!cat)
        return;
    if (cat->db && !sqlite3_get_autocommit(cat->db))
        sqlite3_exec(cat->db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_finalize(cat->data_version);
    stmt_cache_clear(&cat->cache);
    sqlite3_close(cat->db);
    free(cat);
}

const char *catalog_errmsg(const struct catalog *cat)
{
    return cat->errmsg;
}

void catalog_set_busy_timeout(struct catalog *cat, int ms)
{
    sqlite3_busy_timeout(cat->db, ms);
}

int catalog_schema_version(struct catalog *cat, int *pversion)
{
    int64_t v = 0;
    int r = query_int(cat, &v, "PRAGMA user_version", "");
    if (r == 0)
        *pversion = (int)v;
    return r;
}

static int migrate(struct catalog *cat, int version)
{
    if (version == 0) {
        if (cat->mode != CATALOG_CREATE) {
            set_err(cat, "the catalog %s is not initialized (run \"tierctl init\")",
                    sqlite3_db_filename(cat->db, "main"));
            return -ENODATA;
        }
        /* An empty file, not someone else's database. */
        int64_t n = 0;
        int r = query_int(cat, &n, "SELECT count(*) FROM sqlite_schema", "");
        if (r)
            return r;
        if (n > 0) {
            set_err(cat, "%s holds other tables: not a tierproxy catalog",
                    sqlite3_db_filename(cat->db, "main"));
            return -EINVAL;
        }
    }
    for (int v = version; v < CATALOG_SCHEMA_VERSION; v++) {
        char *msg = NULL;
        int rc = sqlite3_exec(cat->db, catalog_migrations[v], NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
            int r = sql_fail(cat, rc);
            set_err(cat, "migrating the catalog to version %d failed: %s", v + 1,
                    msg ? msg : sqlite3_errstr(rc));
            sqlite3_free(msg);
            return r;
        }
        /* PRAGMA takes no parameters; v is our own integer. */
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
        int r = stmt_run(cat, NULL, sql, "");
        if (r)
            return r;
    }
    return 0;
}

int catalog_begin(struct catalog *cat, bool write)
{
    int r = stmt_run(cat, NULL, write ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED", "");
    if (r)
        return r;
    int version = 0;
    r = catalog_schema_version(cat, &version);
    if (r)
        goto out;
    if (version > CATALOG_SCHEMA_VERSION) {
        set_err(cat, "the catalog has schema version %d, newer than this program's %d",
                version, CATALOG_SCHEMA_VERSION);
        r = -ENOTSUP;
    } else if (version < CATALOG_SCHEMA_VERSION) {
        if (write) {
            r = migrate(cat, version);
            if (r == 0)
                version = CATALOG_SCHEMA_VERSION;
        } else if (version == 0) {
            set_err(cat, "the catalog %s is not initialized (run \"tierctl init\")",
                    sqlite3_db_filename(cat->db, "main"));
            r = -ENODATA;
        }
        /* else: an older schema is read as it is (the queries below know version 1) */
    }
    cat->version = version;
out:
    if (r)
        sqlite3_exec(cat->db, "ROLLBACK", NULL, NULL, NULL);
    return r;
}

int catalog_commit(struct catalog *cat)
{
    int r = stmt_run(cat, NULL, "COMMIT", "");
    if (r)
        catalog_rollback(cat);
    return r;
}

void catalog_rollback(struct catalog *cat)
{
    if (!sqlite3_get_autocommit(cat->db))
        sqlite3_exec(cat->db, "ROLLBACK", NULL, NULL, NULL);
}

int catalog_data_version(struct catalog *cat, int64_t *pversion)
{
    int rc = SQLITE_OK;
    if (!cat->data_version)
        rc = sqlite3_prepare_v3(cat->db, "PRAGMA data_version", -1, SQLITE_PREPARE_PERSISTENT,
                                &cat->data_version, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(cat->data_version);
        if (rc == SQLITE_ROW) {
            *pversion = sqlite3_column_int64(cat->data_version, 0);
            rc = SQLITE_OK;
        }
        sqlite3_reset(cat->data_version);
    }
    return rc == SQLITE_OK ? 0 : sql_fail(cat, rc);
}

static const char *const kind_names[] = {
    [CATALOG_LIMIT_RATE] = "rate",
    [CATALOG_LIMIT_CONCURRENCY] = "concurrency",
    [CATALOG_LIMIT_WS_MESSAGES] = "ws_messages",
    [CATALOG_LIMIT_QUOTA] = "quota",
};

/* A period's name in the catalog (the column `period`), or NULL for none. */
static const char *period_column(enum limit_period period)
{
    return period == LIMIT_PERIOD_NONE ? NULL : limit_period_name(period);
}

static int period_parse(const char *text, enum limit_period *pperiod)
{
    static const enum limit_period all[] = {LIMIT_PERIOD_DAY, LIMIT_PERIOD_WEEK, LIMIT_PERIOD_MONTH};
    *pperiod = LIMIT_PERIOD_NONE;
    if (!text)
        return 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(text, limit_period_name(all[i])) == 0) {
            *pperiod = all[i];
            return 0;
        }
    return -EINVAL;
}

const char *catalog_limit_kind_name(enum catalog_limit_kind kind)
{
    if ((unsigned)kind >= sizeof(kind_names) / sizeof(kind_names[0]))
        return NULL;
    return kind_names[kind];
}

int catalog_limit_kind_parse(const char *text, enum catalog_limit_kind *pkind)
{
    for (size_t i = 0; i < sizeof(kind_names) / sizeof(kind_names[0]); i++) {
        if (strcmp(text, kind_names[i]) == 0) {
            *pkind = (enum catalog_limit_kind)i;
            return 0;
        }
    }
    return CATALOG_INVALID;
}

/* ---- ids ---- */

/* Takes the id SQLite gave the row just inserted. An id beyond CATALOG_ID_MAX is refused
 * (the caller rolls back), so a catalog whose high-water mark reached it takes no more. */
static int inserted_id(struct catalog *cat, const char *what, int64_t *pid)
{
    int64_t id = sqlite3_last_insert_rowid(cat->db);
    if (id > CATALOG_ID_MAX) {
        set_err(cat, "the catalog has used every %s id up to 2^53 (%lld): no %s can be added",
                what, (long long)CATALOG_ID_MAX, what);
        return CATALOG_INVALID;
    }
    if (pid)
        *pid = id;
    return 0;
}

/* ---- plans ---- */

int catalog_plan_add(struct catalog *cat, const struct catalog_plan *plan, int64_t *pid)
{
    if (catalog_check_plan_name(plan->name, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    int64_t id;
    int r = query_int(cat, &id, "SELECT id FROM plans WHERE name = ?", "t", plan->name);
    if (r == 0) {
        set_err(cat, "a plan named \"%s\" already exists", plan->name);
        return CATALOG_EXISTS;
    }
    if (r != CATALOG_NOT_FOUND)
        return r;
    if (plan->id > 0) {
        r = query_int(cat, &id, "SELECT id FROM plans WHERE id = ?", "i", plan->id);
        if (r == 0) {
            set_err(cat, "plan id %lld is taken", (long long)plan->id);
            return CATALOG_EXISTS;
        }
        if (r != CATALOG_NOT_FOUND)
            return r;
    }
    if (plan->priority < CATALOG_PRIORITY_MIN || plan->priority > CATALOG_PRIORITY_MAX) {
        set_err(cat, "a priority is %d to %d", CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
        return CATALOG_INVALID;
    }
    r = stmt_run(cat, NULL, "INSERT INTO plans (id, name, shadow, priority) VALUES (?, ?, ?, ?)", "Itii",
                 plan->id, plan->name, (int64_t)plan->shadow, (int64_t)plan->priority);
    if (r == 0)
        r = inserted_id(cat, "plan", pid);
    return r;
}

int catalog_plan_find(struct catalog *cat, const char *name, int64_t *pid, bool *pshadow)
{
    sqlite3_stmt *st = NULL;
    int r = stmt_prepare(cat, &st, "SELECT id, shadow FROM plans WHERE name = ?", "t", name);
    if (r)
        return r;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (pid)
            *pid = sqlite3_column_int64(st, 0);
        if (pshadow)
            *pshadow = sqlite3_column_int(st, 1) != 0;
    } else if (rc == SQLITE_DONE) {
        set_err(cat, "no plan named \"%s\"", name);
        r = CATALOG_NOT_FOUND;
    } else {
        r = sql_fail(cat, rc);
    }
    sqlite3_finalize(st);
    return r;
}

int catalog_plan_set_shadow(struct catalog *cat, int64_t plan_id, bool shadow)
{
    int64_t n = 0;
    int r = stmt_run(cat, &n, "UPDATE plans SET shadow = ? WHERE id = ?", "ii", (int64_t)shadow, plan_id);
    if (r == 0 && n == 0) {
        set_err(cat, "no plan with id %lld", (long long)plan_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_plan_priority(struct catalog *cat, int64_t plan_id, int *ppriority)
{
    int64_t v = CATALOG_PRIORITY_DEFAULT;
    int r = cat->version < 2 ? query_int(cat, &v, "SELECT 5 FROM plans WHERE id = ?", "i", plan_id)
                             : query_int(cat, &v, "SELECT priority FROM plans WHERE id = ?", "i", plan_id);
    if (r == CATALOG_NOT_FOUND)
        set_err(cat, "no plan with id %lld", (long long)plan_id);
    if (r == 0)
        *ppriority = (int)v;
    return r;
}

int catalog_plan_set_priority(struct catalog *cat, int64_t plan_id, int priority)
{
    if (priority < CATALOG_PRIORITY_MIN || priority > CATALOG_PRIORITY_MAX) {
        set_err(cat, "a priority is %d to %d", CATALOG_PRIORITY_MIN, CATALOG_PRIORITY_MAX);
        return CATALOG_INVALID;
    }
    int64_t n = 0;
    int r = stmt_run(cat, &n, "UPDATE plans SET priority = ? WHERE id = ?", "ii", (int64_t)priority, plan_id);
    if (r == 0 && n == 0) {
        set_err(cat, "no plan with id %lld", (long long)plan_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_plan_user_count(struct catalog *cat, int64_t plan_id, int64_t *pcount)
{
    return query_int(cat, pcount, "SELECT count(*) FROM users WHERE plan_id = ?", "i", plan_id);
}

int catalog_plan_remove(struct catalog *cat, int64_t plan_id)
{
    int64_t users = 0;
    int r = catalog_plan_user_count(cat, plan_id, &users);
    if (r)
        return r;
    if (users > 0) {
        set_err(cat, "%lld user%s still on the plan", (long long)users, users == 1 ? " is" : "s are");
        return CATALOG_IN_USE;
    }
    int64_t n = 0;
    r = stmt_run(cat, NULL, "DELETE FROM limits WHERE plan_id = ?", "i", plan_id);
    if (r == 0)
        r = stmt_run(cat, &n, "DELETE FROM plans WHERE id = ?", "i", plan_id);
    if (r == 0 && n == 0) {
        set_err(cat, "no plan with id %lld", (long long)plan_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_plan_each(struct catalog *cat, catalog_plan_fn *fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int r = stmt_prepare(cat, &st, cat->version < 2 ? "SELECT id, name, shadow, 5 FROM plans ORDER BY id"
                                                    : "SELECT id, name, shadow, priority FROM plans ORDER BY id", "");
    if (r)
        return r;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct catalog_plan plan = {
            .id = sqlite3_column_int64(st, 0),
            .name = column_text(st, 1),
            .shadow = sqlite3_column_int(st, 2) != 0,
            .priority = sqlite3_column_int(st, 3),
        };
        r = fn(ctx, &plan);
        if (r)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

/* ---- limits ---- */

int catalog_limit_add(struct catalog *cat, const struct catalog_limit *limit, int64_t *pid)
{
    if (catalog_check_limit(limit, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    if ((limit->plan_id > 0) == (limit->user_id != NULL)) {
        set_err(cat, "a limit belongs to a plan or to a user");
        return CATALOG_INVALID;
    }
    int64_t v;
    int r;
    if (limit->user_id) {
        r = catalog_user_find(cat, limit->user_id, NULL);
    } else {
        r = query_int(cat, &v, "SELECT id FROM plans WHERE id = ?", "i", limit->plan_id);
        if (r == CATALOG_NOT_FOUND)
            set_err(cat, "no plan with id %lld", (long long)limit->plan_id);
    }
    if (r)
        return r;
    if (limit->id > 0) {
        r = query_int(cat, &v, "SELECT id FROM limits WHERE id = ?", "i", limit->id);
        if (r == 0) {
            set_err(cat, "limit id %lld is taken", (long long)limit->id);
            return CATALOG_EXISTS;
        }
        if (r != CATALOG_NOT_FOUND)
            return r;
    }
    const char *algorithm = limit->kind == CATALOG_LIMIT_RATE ? limit_kind_name(limit->algorithm) : NULL;
    r = stmt_run(cat, NULL,
                 "INSERT INTO limits (id, plan_id, user_id, kind, algorithm, amount, window_ms, burst,"
                 " period, route_method, route_prefix) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 "IItttiiittt", limit->id, limit->plan_id, limit->user_id, catalog_limit_kind_name(limit->kind),
                 algorithm, limit->amount, limit->window_ms, limit->burst, period_column(limit->period),
                 limit->route_method, limit->route_prefix);
    if (r == 0)
        r = inserted_id(cat, "limit", pid);
    return r;
}

int catalog_limit_remove(struct catalog *cat, int64_t plan_id, int64_t limit_id)
{
    int64_t n = 0;
    int r = stmt_run(cat, &n, "DELETE FROM limits WHERE id = ? AND plan_id = ?", "ii", limit_id, plan_id);
    if (r == 0 && n == 0) {
        set_err(cat, "the plan has no limit %lld", (long long)limit_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_limit_update(struct catalog *cat, const struct catalog_limit *limit)
{
    if (catalog_check_limit(limit, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    const char *algorithm = limit->kind == CATALOG_LIMIT_RATE ? limit_kind_name(limit->algorithm) : NULL;
    int64_t n = 0;
    int r = stmt_run(cat, &n,
                     "UPDATE limits SET algorithm = ?, amount = ?, window_ms = ?, burst = ?, period = ?"
                     " WHERE id = ? AND plan_id = ? AND kind = ?",
                     "tiiitiit", algorithm, limit->amount, limit->window_ms, limit->burst,
                     period_column(limit->period), limit->id, limit->plan_id,
                     catalog_limit_kind_name(limit->kind));
    if (r == 0 && n == 0) {
        set_err(cat, "the plan has no %s limit %lld", catalog_limit_kind_name(limit->kind),
                (long long)limit->id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_limit_remove_routeless(struct catalog *cat, int64_t plan_id,
                                   enum catalog_limit_kind kind, int64_t *pcount)
{
    int64_t n = 0;
    int r = stmt_run(cat, &n, "DELETE FROM limits WHERE plan_id = ? AND kind = ? AND route_method IS NULL",
                     "it", plan_id, catalog_limit_kind_name(kind));
    if (r == 0 && pcount)
        *pcount = n;
    return r;
}

/* Steps a limits query (the columns of LIMIT_COLUMNS), calling fn per row, and finalizes it. */
static int limit_walk(struct catalog *cat, sqlite3_stmt *st, catalog_limit_fn *fn, void *ctx)
{
    int r = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct catalog_limit limit = {
            .id = sqlite3_column_int64(st, 0),
            .plan_id = sqlite3_column_int64(st, 1),
            .algorithm = LIMIT_SLIDING_LOG,
            .amount = sqlite3_column_int64(st, 4),
            .window_ms = sqlite3_column_int64(st, 5),
            .burst = sqlite3_column_int64(st, 6),
            .route_method = column_text(st, 7),
            .route_prefix = column_text(st, 8),
            .user_id = column_text(st, 10),
        };
        const char *kind = column_text(st, 2), *algorithm = column_text(st, 3);
        if (!kind || catalog_limit_kind_parse(kind, &limit.kind) != 0 ||
            (algorithm && limit_kind_parse(algorithm, &limit.algorithm) != 0) ||
            period_parse(column_text(st, 9), &limit.period) != 0) {
            set_err(cat, "limit %lld has an unknown kind, algorithm or period", (long long)limit.id);
            r = -EINVAL;
            break;
        }
        r = fn(ctx, &limit);
        if (r)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

#define LIMIT_COLUMNS_V1 \
    "SELECT id, plan_id, kind, algorithm, amount, window_ms, burst, route_method, route_prefix, NULL, NULL FROM limits"
#define LIMIT_COLUMNS \
    "SELECT id, coalesce(plan_id, 0), kind, algorithm, amount, window_ms, burst, route_method, route_prefix," \
    " period, user_id FROM limits"

int catalog_limit_each(struct catalog *cat, int64_t plan_id, catalog_limit_fn *fn, void *ctx)
{
    const char *sql;
    if (cat->version < 2)
        sql = plan_id > 0 ? LIMIT_COLUMNS_V1 " WHERE plan_id = ? ORDER BY id" : LIMIT_COLUMNS_V1 " ORDER BY plan_id, id";
    else
        sql = plan_id > 0 ? LIMIT_COLUMNS " WHERE plan_id = ? ORDER BY id"
                          : LIMIT_COLUMNS " WHERE plan_id IS NOT NULL ORDER BY plan_id, id";
    sqlite3_stmt *st = NULL;
    int r = plan_id > 0 ? stmt_prepare(cat, &st, sql, "i", plan_id) : stmt_prepare(cat, &st, sql, "");
    if (r)
        return r;
    return limit_walk(cat, st, fn, ctx);
}

int catalog_user_limit_each(struct catalog *cat, const char *user_id, catalog_limit_fn *fn, void *ctx)
{
    if (cat->version < 2)
        return 0;   /* schema 1 has no user limits */
    sqlite3_stmt *st = NULL;
    int r = user_id ? stmt_prepare(cat, &st, LIMIT_COLUMNS " WHERE user_id = ? ORDER BY id", "t", user_id)
                    : stmt_prepare(cat, &st, LIMIT_COLUMNS " WHERE user_id IS NOT NULL ORDER BY user_id, id", "");
    if (r)
        return r;
    return limit_walk(cat, st, fn, ctx);
}

int catalog_user_limit_remove(struct catalog *cat, const char *user_id, int64_t limit_id)
{
    int64_t n = 0;
    int r = stmt_run(cat, &n, "DELETE FROM limits WHERE id = ? AND user_id = ?", "it", limit_id, user_id);
    if (r == 0 && n == 0) {
        set_err(cat, "user \"%s\" has no limit %lld", user_id, (long long)limit_id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

/* ---- costs ---- */

int catalog_cost_set(struct catalog *cat, const struct catalog_cost *cost, int64_t *preplaced)
{
    if (catalog_check_cost(cost, cat->errmsg, sizeof(cat->errmsg)))
        return CATALOG_INVALID;
    int64_t old = 0;
    int r = query_int(cat, &old, "SELECT id FROM plans WHERE id = ?", "i", cost->plan_id);
    if (r == CATALOG_NOT_FOUND)
        set_err(cat, "no plan with id %lld", (long long)cost->plan_id);
    if (r)
        return r;
    old = 0;
    r = query_int(cat, &old, "SELECT cost FROM costs WHERE plan_id = ? AND route_method = ? AND route_prefix = ?",
                  "itt", cost->plan_id, cost->route_method, cost->route_prefix);
    if (r != 0 && r != CATALOG_NOT_FOUND)
        return r;
    if (preplaced)
        *preplaced = r == 0 ? old : 0;
    return stmt_run(cat, NULL,
                    "INSERT INTO costs (plan_id, route_method, route_prefix, cost) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (plan_id, route_method, route_prefix) DO UPDATE SET cost = excluded.cost",
                    "itti", cost->plan_id, cost->route_method, cost->route_prefix, cost->cost);
}

int catalog_cost_remove(struct catalog *cat, int64_t plan_id, const char *method, const char *prefix)
{
    int64_t n = 0;
    int r = stmt_run(cat, &n, "DELETE FROM costs WHERE plan_id = ? AND route_method = ? AND route_prefix = ?",
                     "itt", plan_id, method, prefix);
    if (r == 0 && n == 0) {
        set_err(cat, "the plan has no cost for \"%s %s\"", method, prefix);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_cost_each(struct catalog *cat, int64_t plan_id, catalog_cost_fn *fn, void *ctx)
{
    if (cat->version < 2)
        return 0;   /* schema 1 has no costs */
    sqlite3_stmt *st = NULL;
    int r = stmt_prepare(cat, &st,
                         "SELECT plan_id, route_method, route_prefix, cost FROM costs"
                         " WHERE ?1 <= 0 OR plan_id = ?1 ORDER BY plan_id, route_method, route_prefix",
                         "i", plan_id);
    if (r)
        return r;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct catalog_cost cost = {
            .plan_id = sqlite3_column_int64(st, 0),
            .route_method = column_text(st, 1),
            .route_prefix = column_text(st, 2),
            .cost = sqlite3_column_int64(st, 3),
        };
        r = fn(ctx, &cost);
        if (r)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

/* ---- users ---- */

int catalog_user_add(struct catalog *cat, const struct catalog_user *user)
{
    if (catalog_check_user_id(user->id, cat->errmsg, sizeof(cat->errmsg)) ||
        (user->created && catalog_check_time(user->created, cat->errmsg, sizeof(cat->errmsg))))
        return CATALOG_INVALID;
    int64_t v;
    int r = query_int(cat, &v, "SELECT plan_id FROM users WHERE id = ?", "t", user->id);
    if (r == 0) {
        set_err(cat, "a user \"%s\" already exists", user->id);
        return CATALOG_EXISTS;
    }
    if (r != CATALOG_NOT_FOUND)
        return r;
    r = query_int(cat, &v, "SELECT id FROM plans WHERE id = ?", "i", user->plan_id);
    if (r == CATALOG_NOT_FOUND)
        set_err(cat, "no plan with id %lld", (long long)user->plan_id);
    if (r)
        return r;
    return stmt_run(cat, NULL,
                    "INSERT INTO users (id, plan_id, created) VALUES (?, ?, coalesce(?, " NOW_SQL "))",
                    "tit", user->id, user->plan_id, user->created);
}

int catalog_user_find(struct catalog *cat, const char *id, int64_t *pplan_id)
{
    int64_t plan_id = 0;
    int r = query_int(cat, &plan_id, "SELECT plan_id FROM users WHERE id = ?", "t", id);
    if (r == CATALOG_NOT_FOUND)
        set_err(cat, "no user \"%s\"", id);
    if (r == 0 && pplan_id)
        *pplan_id = plan_id;
    return r;
}

int catalog_user_set_plan(struct catalog *cat, const char *id, int64_t plan_id)
{
    int r = catalog_user_find(cat, id, NULL);
    if (r)
        return r;
    int64_t v;
    r = query_int(cat, &v, "SELECT id FROM plans WHERE id = ?", "i", plan_id);
    if (r == CATALOG_NOT_FOUND)
        set_err(cat, "no plan with id %lld", (long long)plan_id);
    if (r)
        return r;
    return stmt_run(cat, NULL, "UPDATE users SET plan_id = ? WHERE id = ?", "it", plan_id, id);
}

int catalog_user_remove(struct catalog *cat, const char *id, int64_t *prevoked)
{
    int r = catalog_user_find(cat, id, NULL);
    if (r)
        return r;
    r = stmt_run(cat, prevoked, "UPDATE api_keys SET revoked = " NOW_SQL
                 " WHERE user_id = ? AND revoked IS NULL", "t", id);
    if (r == 0)
        r = stmt_run(cat, NULL, "DELETE FROM users WHERE id = ?", "t", id);
    return r;
}

#define USER_SELECT "SELECT u.id, u.plan_id, p.name, u.created FROM users u JOIN plans p ON p.id = u.plan_id"

static int user_walk(struct catalog *cat, sqlite3_stmt *st, catalog_user_fn *fn, void *ctx, int *pcount);

int catalog_user_get(struct catalog *cat, const char *id, catalog_user_fn *fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int n = 0;
    int r = stmt_prepare(cat, &st, USER_SELECT " WHERE u.id = ?", "t", id);
    if (r)
        return r;
    r = user_walk(cat, st, fn, ctx, &n);
    if (r == 0 && n == 0) {
        set_err(cat, "no user \"%s\"", id);
        r = CATALOG_NOT_FOUND;
    }
    return r;
}

int catalog_user_each(struct catalog *cat, int64_t plan_id, catalog_user_fn *fn, void *ctx)
{
    sqlite3_stmt *st = NULL;
    int r = plan_id > 0 ? stmt_prepare(cat, &st, USER_SELECT " WHERE u.plan_id = ? ORDER BY u.id", "i", plan_id)
                        : stmt_prepare(cat, &st, USER_SELECT " ORDER BY u.id", "");
    if (r)
        return r;
    return user_walk(cat, st, fn, ctx, NULL);
}

/* Steps st, calling fn per row, and finalizes it. */
static int user_walk(struct catalog *cat, sqlite3_stmt *st, catalog_user_fn *fn, void *ctx, int *pcount)
{
    int r = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (pcount)
            (*pcount)++;
        struct catalog_user user = {
            .id = column_text(st, 0),
            .plan_id = sqlite3_column_int64(st, 1),
            .plan_name = column_text(st, 2),
            .created = column_text(st, 3),
        };
        r = fn(ctx, &user);
        if (r)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

/* ---- keys ---- */

int catalog_key_add(struct catalog *cat, const struct catalog_key *key, int64_t *pid)
{
    if (catalog_check_user_id(key->user_id, cat->errmsg, sizeof(cat->errmsg)) ||
        catalog_check_label(key->label ? key->label : "", cat->errmsg, sizeof(cat->errmsg)) ||
        (key->created && catalog_check_time(key->created, cat->errmsg, sizeof(cat->errmsg))) ||
        (key->revoked && catalog_check_time(key->revoked, cat->errmsg, sizeof(cat->errmsg))))
        return CATALOG_INVALID;
    int64_t v;
    int r;
    if (!key->revoked) {
        r = catalog_user_find(cat, key->user_id, NULL);
        if (r)
            return r;
    }
    r = query_int(cat, &v, "SELECT id FROM api_keys WHERE hash = ?", "h", key->hash);
    if (r == 0) {
        set_err(cat, "that key hash is already in the catalog (key %lld)", (long long)v);
        return CATALOG_EXISTS;
    }
    if (r != CATALOG_NOT_FOUND)
        return r;
    if (key->id > 0) {
        r = query_int(cat, &v, "SELECT id FROM api_keys WHERE id = ?", "i", key->id);
        if (r == 0) {
            set_err(cat, "key id %lld is taken", (long long)key->id);
            return CATALOG_EXISTS;
        }
        if (r != CATALOG_NOT_FOUND)
            return r;
    }
    r = stmt_run(cat, NULL,
                 "INSERT INTO api_keys (id, user_id, hash, label, created, revoked)"
                 " VALUES (?, ?, ?, ?, coalesce(?, " NOW_SQL "), ?)",
                 "Ithttt", key->id, key->user_id, key->hash, key->label ? key->label : "",
                 key->created, key->revoked);
    if (r == 0)
        r = inserted_id(cat, "key", pid);
    return r;
}

int catalog_key_revoke(struct catalog *cat, int64_t key_id)
{
    sqlite3_stmt *st = NULL;
    int r = stmt_prepare(cat, &st, "SELECT revoked FROM api_keys WHERE id = ?", "i", key_id);
    if (r)
        return r;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        set_err(cat, "no key with id %lld", (long long)key_id);
        r = CATALOG_NOT_FOUND;
    } else if (rc != SQLITE_ROW) {
        r = sql_fail(cat, rc);
    } else if (sqlite3_column_type(st, 0) != SQLITE_NULL) {
        set_err(cat, "key %lld was already revoked at %s", (long long)key_id, column_text(st, 0));
        r = CATALOG_ALREADY;
    }
    sqlite3_finalize(st);
    if (r)
        return r;
    return stmt_run(cat, NULL, "UPDATE api_keys SET revoked = " NOW_SQL " WHERE id = ?", "i", key_id);
}

int catalog_key_each(struct catalog *cat, const char *user_id, bool active_only,
                     catalog_key_fn *fn, void *ctx)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT k.id, k.user_id, k.hash, k.label, k.created, k.revoked FROM api_keys k%s"
             " WHERE (?1 IS NULL OR k.user_id = ?1)%s ORDER BY k.id",
             active_only ? " JOIN users u ON u.id = k.user_id" : "",
             active_only ? " AND k.revoked IS NULL" : "");
    sqlite3_stmt *st = NULL;
    int r = stmt_prepare(cat, &st, sql, "t", user_id);
    if (r)
        return r;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct catalog_key key = {
            .id = sqlite3_column_int64(st, 0),
            .user_id = column_text(st, 1),
            .label = column_text(st, 3),
            .created = column_text(st, 4),
            .revoked = column_text(st, 5),
        };
        const void *hash = sqlite3_column_blob(st, 2);
        if (!hash || sqlite3_column_bytes(st, 2) != CATALOG_HASH_LEN || !key.user_id) {
            set_err(cat, "key %lld has a malformed hash", (long long)key.id);
            r = -EINVAL;
            break;
        }
        memcpy(key.hash, hash, CATALOG_HASH_LEN);
        if (!key.label)
            key.label = "";
        r = fn(ctx, &key);
        if (r)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

/* ---- backup ---- */

/* Copies the main database of src into the file at tmp_path (already created, empty). */
static int backup_into(struct catalog *cat, const char *tmp_path)
{
    sqlite3 *dst = NULL;
    int rc = sqlite3_open_v2(tmp_path, &dst, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_backup *b = sqlite3_backup_init(dst, "main", cat->db, "main");
        if (b) {
            /* All pages in one step: one consistent read of the source (our transaction). */
            rc = sqlite3_backup_step(b, -1);
            if (rc == SQLITE_DONE)
                rc = SQLITE_OK;
            int rc2 = sqlite3_backup_finish(b);
            if (rc == SQLITE_OK)
                rc = rc2;
            /* The copy took the source's WAL flag: make it one self-contained file, that a
             * reader opens without leaving -wal/-shm beside it (tierctl's next write turns
             * WAL on again). */
            if (rc == SQLITE_OK)
                rc = sqlite3_exec(dst, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
        } else {
            rc = sqlite3_errcode(dst);
        }
    }
    if (rc != SQLITE_OK)
        set_err(cat, "backup failed: %s", dst ? sqlite3_errmsg(dst) : sqlite3_errstr(rc));
    /* Closing the last connection checkpoints and removes the copy's own -wal. */
    if (sqlite3_close(dst) != SQLITE_OK && rc == SQLITE_OK) {
        set_err(cat, "backup failed: cannot close %s", tmp_path);
        rc = SQLITE_IOERR;
    }
    return rc == SQLITE_OK ? 0 : rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

int catalog_backup(struct catalog *cat, const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        set_err(cat, "%s exists: a backup never overwrites a file (remove it or pick another name)", path);
        return CATALOG_EXISTS;
    }
    size_t n = strlen(path) + sizeof(".tmp-XXXXXX");
    char *tmp = malloc(n);
    if (!tmp) {
        set_err(cat, "out of memory");
        return -ENOMEM;
    }
    snprintf(tmp, n, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);   /* 0600 */
    if (fd < 0) {
        int e = errno;
        set_err(cat, "cannot create %s: %s", path, strerror(e));
        free(tmp);
        return -e;
    }
    close(fd);
    int r = backup_into(cat, tmp);
    if (r == 0) {
        int dfd = open(tmp, O_RDONLY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0) {
            set_err(cat, "cannot write %s: %s", path, strerror(errno));
            r = -EIO;
        }
        if (dfd >= 0)
            close(dfd);
    }
    /* link() refuses an existing path: a file that appeared meanwhile is not replaced. */
    if (r == 0 && link(tmp, path) != 0) {
        int e = errno;
        if (e == EEXIST) {
            set_err(cat, "%s exists: a backup never overwrites a file (remove it or pick another name)", path);
            r = CATALOG_EXISTS;
        } else {
            set_err(cat, "cannot create %s: %s", path, strerror(e));
            r = -e;
        }
    }
    unlink(tmp);
    free(tmp);
    return r;
}

/* ---- import support ---- */

int catalog_clear(struct catalog *cat)
{
    int r = stmt_run(cat, NULL, "DELETE FROM api_keys", "");
    if (r == 0)
        r = stmt_run(cat, NULL, "DELETE FROM costs", "");
    if (r == 0)
        r = stmt_run(cat, NULL, "DELETE FROM limits", "");
    if (r == 0)
        r = stmt_run(cat, NULL, "DELETE FROM users", "");
    if (r == 0)
        r = stmt_run(cat, NULL, "DELETE FROM limits", "");
    if (r == 0)
        r = stmt_run(cat, NULL, "DELETE FROM plans", "");
    return r;
}

static int check_sequence_table(struct catalog *cat, const char *table)
{
    if (strcmp(table, "plans") && strcmp(table, "limits") && strcmp(table, "api_keys")) {
        set_err(cat, "no id sequence for \"%s\"", table);
        return CATALOG_INVALID;
    }
    return 0;
}

int catalog_sequence_get(struct catalog *cat, const char *table, int64_t *pvalue)
{
    int r = check_sequence_table(cat, table);
    if (r)
        return r;
    int64_t v = 0;
    r = query_int(cat, &v, "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = ?", "t", table);
    if (r == 0)
        *pvalue = v;
    return r;
}

int catalog_sequence_raise(struct catalog *cat, const char *table, int64_t value)
{
    int r = check_sequence_table(cat, table);
    if (r)
        return r;
    if (value > CATALOG_ID_MAX) {
        set_err(cat, "a %s id high-water mark beyond 2^53 (%lld)", table, (long long)CATALOG_ID_MAX);
        return CATALOG_INVALID;
    }
    int64_t n = 0;
    r = stmt_run(cat, &n, "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", "it", value, table);
    if (r == 0 && n == 0 && value > 0)
        r = stmt_run(cat, NULL, "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", "ti", table, value);
    return r;
}
