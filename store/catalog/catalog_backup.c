/* The catalog copied whole (tierctl backup) and emptied for an import, with the id
 * sequences an import keeps. See catalog.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/catalog/catalog_impl.h"

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
        catalog_set_error(cat, "backup failed: %s", dst ? sqlite3_errmsg(dst) : sqlite3_errstr(rc));
    /* Closing the last connection checkpoints and removes the copy's own -wal. */
    if (sqlite3_close(dst) != SQLITE_OK && rc == SQLITE_OK) {
        catalog_set_error(cat, "backup failed: cannot close %s", tmp_path);
        rc = SQLITE_IOERR;
    }
    return rc == SQLITE_OK ? 0 : rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

int catalog_backup(struct catalog *cat, const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        catalog_set_error(cat, "%s exists: a backup never overwrites a file (remove it or pick another name)", path);
        return CATALOG_EXISTS;
    }
    size_t n = strlen(path) + sizeof(".tmp-XXXXXX");
    char *tmp = malloc(n);
    if (!tmp) {
        catalog_set_error(cat, "out of memory");
        return -ENOMEM;
    }
    snprintf(tmp, n, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);   /* 0600 */
    if (fd < 0) {
        int e = errno;
        catalog_set_error(cat, "cannot create %s: %s", path, strerror(e));
        free(tmp);
        return -e;
    }
    close(fd);
    int r = backup_into(cat, tmp);
    if (r == 0) {
        int dfd = open(tmp, O_RDONLY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0) {
            catalog_set_error(cat, "cannot write %s: %s", path, strerror(errno));
            r = -EIO;
        }
        if (dfd >= 0)
            close(dfd);
    }
    /* link() refuses an existing path: a file that appeared meanwhile is not replaced. */
    if (r == 0 && link(tmp, path) != 0) {
        int e = errno;
        if (e == EEXIST) {
            catalog_set_error(cat, "%s exists: a backup never overwrites a file (remove it or pick another name)", path);
            r = CATALOG_EXISTS;
        } else {
            catalog_set_error(cat, "cannot create %s: %s", path, strerror(e));
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
    int r = catalog_stmt_run(cat, NULL, "DELETE FROM api_keys", "");
    if (r == 0)
        r = catalog_stmt_run(cat, NULL, "DELETE FROM costs", "");
    if (r == 0)
        r = catalog_stmt_run(cat, NULL, "DELETE FROM limits", "");
    if (r == 0)
        r = catalog_stmt_run(cat, NULL, "DELETE FROM users", "");
    if (r == 0)
        r = catalog_stmt_run(cat, NULL, "DELETE FROM limits", "");
    if (r == 0)
        r = catalog_stmt_run(cat, NULL, "DELETE FROM plans", "");
    return r;
}

static int check_sequence_table(struct catalog *cat, const char *table)
{
    if (strcmp(table, "plans") && strcmp(table, "limits") && strcmp(table, "api_keys")) {
        catalog_set_error(cat, "no id sequence for \"%s\"", table);
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
    r = catalog_query_int(cat, &v, "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = ?", "t", table);
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
        catalog_set_error(cat, "a %s id high-water mark beyond 2^53 (%lld)", table, (long long)CATALOG_ID_MAX);
        return CATALOG_INVALID;
    }
    int64_t n = 0;
    r = catalog_stmt_run(cat, &n, "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", "it", value, table);
    if (r == 0 && n == 0 && value > 0)
        r = catalog_stmt_run(cat, NULL, "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", "ti", table, value);
    return r;
}
