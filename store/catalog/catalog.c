/* The SQLite catalog: the connection, its transactions and schema. See catalog.h for the
 * contract; the records are in catalog_plans.c, catalog_users.c and catalog_backup.c. */
#include "store/catalog/catalog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/catalog/catalog_impl.h"

/* ---- open, close, transactions ---- */

/* CATALOG_CREATE: the file, owner only. SQLite would create it with 0644 less the umask,
 * and its -wal and -shm files with the file's mode: the catalog holds key hashes. */
static int create_private(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    else if (errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "cannot create catalog %s: %s", path, strerror(e));
        return -e;
    }
    return 0;
}

/* Readers never wait for tierctl, and tierctl never waits for readers. */
static int use_wal(struct catalog *cat)
{
    sqlite3_stmt *st = NULL;
    int r = catalog_stmt_prepare(cat, &st, "PRAGMA journal_mode = WAL", "");
    if (r)
        return r;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        r = catalog_sql_fail(cat, rc);
    else if (strcmp(catalog_column_text(st, 0) ? catalog_column_text(st, 0) : "", "wal") != 0)
        r = -EIO, catalog_set_error(cat, "cannot switch the catalog to WAL mode");
    sqlite3_finalize(st);
    return r;
}

/* The connection, set up: extended codes, the busy timeout, foreign keys, WAL for writers. */
static int connect_db(struct catalog *cat, const char *path, char *err, size_t errlen)
{
    int flags = cat->mode == CATALOG_READ_ONLY ? SQLITE_OPEN_READONLY
              : cat->mode == CATALOG_READ_WRITE || cat->mode == CATALOG_CACHE ? SQLITE_OPEN_READWRITE
              : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int rc = sqlite3_open_v2(path, &cat->db, flags, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open catalog %s: %s", path,
                 cat->db ? sqlite3_errmsg(cat->db) : sqlite3_errstr(rc));
        return rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
    }
    sqlite3_extended_result_codes(cat->db, 1);
    sqlite3_busy_timeout(cat->db, CATALOG_BUSY_TIMEOUT_MS);
    int r = catalog_stmt_run(cat, NULL, "PRAGMA foreign_keys = ON", "");
    if (r == 0 && (cat->mode == CATALOG_READ_WRITE || cat->mode == CATALOG_CREATE))
        r = use_wal(cat);
    if (r)
        snprintf(err, errlen, "cannot open catalog %s: %s", path, cat->errmsg);
    return r;
}

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
    int r = mode == CATALOG_CREATE ? create_private(path, err, errlen) : 0;
    if (r)
        return r;
    struct catalog *cat = calloc(1, sizeof(*cat));
    if (!cat) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    cat->mode = mode;
    if ((r = connect_db(cat, path, err, errlen)) != 0) {
        catalog_close(cat);
        return r;
    }
    *pcat = cat;
    return 0;
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
    int r = catalog_query_int(cat, &v, "PRAGMA user_version", "");
    if (r == 0)
        *pversion = (int)v;
    return r;
}

static int migrate(struct catalog *cat, int version)
{
    if (version == 0) {
        if (cat->mode != CATALOG_CREATE) {
            catalog_set_error(cat, "the catalog %s is not initialized (run \"tierctl init\")",
                    sqlite3_db_filename(cat->db, "main"));
            return -ENODATA;
        }
        /* An empty file, not someone else's database. */
        int64_t n = 0;
        int r = catalog_query_int(cat, &n, "SELECT count(*) FROM sqlite_schema", "");
        if (r)
            return r;
        if (n > 0) {
            catalog_set_error(cat, "%s holds other tables: not a tierproxy catalog",
                    sqlite3_db_filename(cat->db, "main"));
            return -EINVAL;
        }
    }
    for (int v = version; v < CATALOG_SCHEMA_VERSION; v++) {
        char *msg = NULL;
        int rc = sqlite3_exec(cat->db, catalog_migrations[v], NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
            int r = catalog_sql_fail(cat, rc);
            catalog_set_error(cat, "migrating the catalog to version %d failed: %s", v + 1,
                    msg ? msg : sqlite3_errstr(rc));
            sqlite3_free(msg);
            return r;
        }
        /* PRAGMA takes no parameters; v is our own integer. */
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
        int r = catalog_stmt_run(cat, NULL, sql, "");
        if (r)
            return r;
    }
    return 0;
}

int catalog_begin(struct catalog *cat, bool write)
{
    int r = catalog_stmt_run(cat, NULL, write ? "BEGIN IMMEDIATE" : "BEGIN DEFERRED", "");
    if (r)
        return r;
    int version = 0;
    r = catalog_schema_version(cat, &version);
    if (r)
        goto out;
    if (version > CATALOG_SCHEMA_VERSION) {
        catalog_set_error(cat, "the catalog has schema version %d, newer than this program's %d",
                version, CATALOG_SCHEMA_VERSION);
        r = -ENOTSUP;
    } else if (version < CATALOG_SCHEMA_VERSION) {
        if (write) {
            r = migrate(cat, version);
            if (r == 0)
                version = CATALOG_SCHEMA_VERSION;
        } else if (version == 0) {
            catalog_set_error(cat, "the catalog %s is not initialized (run \"tierctl init\")",
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
    int r = catalog_stmt_run(cat, NULL, "COMMIT", "");
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
    return rc == SQLITE_OK ? 0 : catalog_sql_fail(cat, rc);
}
