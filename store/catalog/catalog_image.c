/* The catalog as one SQLite database image. See catalog_image.h.
 *
 * The image is attached as schema IMAGE_SCHEMA, deserialized from a private copy into
 * memory, with the connection in defensive mode and cells checked, as
 * SQLite's advice for files from elsewhere has it. Nothing of the image's schema runs:
 * it is only read, column by column, into this catalog's tables. */
#include "store/catalog/catalog_image.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/catalog/catalog_impl.h"

#define IMAGE_SCHEMA "fleet_image"
#define IMAGE_MIN_SCHEMA 2   /* the first schema with every column the copy reads */
/* Bytes 18 and 19 of a database header: 1 for a rollback journal, 2 for WAL. */
#define HEADER_WRITE_VERSION 18
#define HEADER_READ_VERSION 19

static int exec_sql(struct catalog *cat, const char *sql)
{
    int rc = sqlite3_exec(cat->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : catalog_sql_fail(cat, rc);
}

/* The first column of the first row of sql as an integer; CATALOG_NOT_FOUND without a row. */
static int query_one(struct catalog *cat, const char *sql, int64_t *pvalue)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, sql, -1, &st, NULL);
    int r = 0;
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        *pvalue = sqlite3_column_int64(st, 0);
    else if (rc == SQLITE_DONE)
        r = CATALOG_NOT_FOUND;
    else
        r = catalog_sql_fail(cat, rc);
    sqlite3_finalize(st);
    return r;
}

/* SQLite's advice for a database from elsewhere: defensive mode, nothing of its schema
 * trusted to run, every cell's size checked as it is read. */
static int guard(struct catalog *cat)
{
    sqlite3_db_config(cat->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    sqlite3_db_config(cat->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    return exec_sql(cat, "PRAGMA cell_size_check = ON");
}

int catalog_fleet_mark(struct catalog *cat, int64_t *pversion, bool *pchanged)
{
    *pversion = 0;
    *pchanged = true;
    if (cat->version < 3)
        return 0;
    int64_t version = 0, changed = 1;
    int r = query_one(cat, "SELECT version FROM fleet WHERE id = 1", &version);
    if (r == 0)
        r = query_one(cat, "SELECT changed FROM fleet WHERE id = 1", &changed);
    if (r == CATALOG_NOT_FOUND)
        return 0;
    if (r == 0) {
        *pversion = version;
        *pchanged = changed != 0;
    }
    return r;
}

int catalog_fleet_mark_set(struct catalog *cat, int64_t version)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO fleet (id, version, changed) VALUES (1, %lld, 0)",
             (long long)version);
    return exec_sql(cat, sql);
}

int catalog_image_make(struct catalog *cat, unsigned char **pimage, size_t *plen)
{
    sqlite3_int64 len = 0;
    unsigned char *image = sqlite3_serialize(cat->db, "main", &len, 0);
    if (!image || len < 100) {
        sqlite3_free(image);
        catalog_set_error(cat, "cannot make an image of the catalog: %s", sqlite3_errmsg(cat->db));
        return -EIO;
    }
    image[HEADER_WRITE_VERSION] = 1;
    image[HEADER_READ_VERSION] = 1;
    *pimage = image;
    *plen = (size_t)len;
    return 0;
}

void catalog_image_free(unsigned char *image)
{
    sqlite3_free(image);
}

static int refuse(struct catalog *cat, int r, const char *what)
{
    if (r < 0)
        catalog_set_error(cat, "the published catalog %s: %s", what, catalog_errmsg(cat));
    else
        catalog_set_error(cat, "the published catalog %s", what);
    catalog_image_detach(cat);
    return CATALOG_INVALID;
}

/* quick_check: one row "ok", or rows naming what is wrong. */
static int image_quick_check(struct catalog *cat)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(cat->db, "PRAGMA " IMAGE_SCHEMA ".quick_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    int r = 0;
    if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
        catalog_set_error(cat, "%s", (const char *)sqlite3_column_text(st, 0));
        r = CATALOG_INVALID;
    } else if (rc != SQLITE_ROW) {
        r = catalog_sql_fail(cat, rc);
    }
    sqlite3_finalize(st);
    return r;
}

int catalog_image_attach(struct catalog *cat, const unsigned char *image, size_t len, int *pschema)
{
    catalog_image_detach(cat);
    if (len < 100 || memcmp(image, "SQLite format 3", 16) != 0)
        return refuse(cat, 0, "is not a SQLite database image");
    int r = guard(cat);
    if (r == 0)
        r = exec_sql(cat, "ATTACH DATABASE ':memory:' AS " IMAGE_SCHEMA);
    if (r)
        return r;
    unsigned char *copy = sqlite3_malloc64(len);
    if (!copy) {
        catalog_image_detach(cat);
        catalog_set_error(cat, "out of memory");
        return -ENOMEM;
    }
    memcpy(copy, image, len);
    copy[HEADER_WRITE_VERSION] = 1;   /* an image in memory has no WAL */
    copy[HEADER_READ_VERSION] = 1;
    /* Not SQLITE_DESERIALIZE_READONLY: BEGIN IMMEDIATE locks every attached database for
     * writing, and fails on a read-only one. Nothing writes to the image. */
    int rc = sqlite3_deserialize(cat->db, IMAGE_SCHEMA, copy, (sqlite3_int64)len, (sqlite3_int64)len,
                                 SQLITE_DESERIALIZE_FREEONCLOSE);
    if (rc != SQLITE_OK)
        return refuse(cat, catalog_sql_fail(cat, rc), "cannot be read");
    int64_t schema = 0;
    r = query_one(cat, "PRAGMA " IMAGE_SCHEMA ".user_version", &schema);
    if (r)
        return refuse(cat, r < 0 ? r : -EIO, "cannot be read");
    if (schema > CATALOG_SCHEMA_VERSION) {
        char what[96];
        snprintf(what, sizeof(what), "has schema %lld, newer than this program's %d", (long long)schema,
                 CATALOG_SCHEMA_VERSION);
        return refuse(cat, 0, what);
    }
    if (schema < IMAGE_MIN_SCHEMA)
        return refuse(cat, 0, "has no catalog schema");
    if ((r = image_quick_check(cat)) != 0)
        return refuse(cat, r < 0 ? r : -EIO, "is damaged");
    *pschema = (int)schema;
    return 0;
}

static const struct {
    const char *table;
    const char *sql;
} copy_steps[] = {
    {"plans", "INSERT INTO plans (id, name, shadow, priority)"
              " SELECT id, name, shadow, priority FROM " IMAGE_SCHEMA ".plans"},
    {"users", "INSERT INTO users (id, plan_id, created) SELECT id, plan_id, created FROM " IMAGE_SCHEMA ".users"},
    {"limits", "INSERT INTO limits (id, plan_id, user_id, kind, algorithm, amount, window_ms, burst, period,"
               " route_method, route_prefix) SELECT id, plan_id, user_id, kind, algorithm, amount, window_ms, burst,"
               " period, route_method, route_prefix FROM " IMAGE_SCHEMA ".limits"},
    {"costs", "INSERT INTO costs (plan_id, route_method, route_prefix, cost)"
              " SELECT plan_id, route_method, route_prefix, cost FROM " IMAGE_SCHEMA ".costs"},
    {"api_keys", "INSERT INTO api_keys (id, user_id, hash, label, created, revoked)"
                 " SELECT id, user_id, hash, label, created, revoked FROM " IMAGE_SCHEMA ".api_keys"},
};

/* Raises this catalog's id high-water marks to the image's. */
static int copy_sequences(struct catalog *cat)
{
    static const char *const tables[] = {"plans", "limits", "api_keys"};
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        char sql[160];
        snprintf(sql, sizeof(sql), "SELECT seq FROM " IMAGE_SCHEMA ".sqlite_sequence WHERE name = '%s'", tables[i]);
        int64_t seq = 0;
        int r = query_one(cat, sql, &seq);
        if (r == CATALOG_NOT_FOUND)
            continue;
        if (r == 0)
            r = catalog_sequence_raise(cat, tables[i], seq);
        if (r)
            return r;
    }
    return 0;
}

int catalog_image_copy(struct catalog *cat)
{
    int r = catalog_clear(cat);
    for (size_t i = 0; r == 0 && i < sizeof(copy_steps) / sizeof(copy_steps[0]); i++) {
        int rc = sqlite3_exec(cat->db, copy_steps[i].sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            continue;
        r = catalog_sql_fail(cat, rc);
        if ((rc & 0xff) == SQLITE_CONSTRAINT || (rc & 0xff) == SQLITE_MISMATCH || (rc & 0xff) == SQLITE_ERROR) {
            catalog_set_error(cat, "the published catalog's %s break this catalog's rules: %s", copy_steps[i].table,
                              sqlite3_errmsg(cat->db));
            r = CATALOG_INVALID;
        }
    }
    if (r == 0)
        r = copy_sequences(cat);
    return r;
}

void catalog_image_detach(struct catalog *cat)
{
    if (!cat || !cat->db)
        return;
    if (sqlite3_db_filename(cat->db, IMAGE_SCHEMA) != NULL)
        sqlite3_exec(cat->db, "DETACH DATABASE " IMAGE_SCHEMA, NULL, NULL, NULL);
}

/* ---- install by file ---- */

#define SCHEMA_QUERY "SELECT type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, '') FROM sqlite_schema" \
                     " ORDER BY type, name"

/* The schema this program's migrations make, as SCHEMA_QUERY lists it; built once. */
static char *reference_schema;
static pthread_once_t reference_once = PTHREAD_ONCE_INIT;

/* SCHEMA_QUERY's rows, one per line; NULL on failure. */
static char *schema_text(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, SCHEMA_QUERY, -1, &st, NULL) != SQLITE_OK)
        return NULL;
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    int rc;
    while (out && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *row = (const char *)sqlite3_column_text(st, 0);
        size_t n = row ? strlen(row) : 0;
        if (len + n + 2 > cap) {
            char *grown = realloc(out, cap = 2 * (len + n + 2));
            if (!grown) {
                free(out);
                out = NULL;
                break;
            }
            out = grown;
        }
        memcpy(out + len, row ? row : "", n);
        len += n;
        out[len++] = '\n';
        out[len] = '\0';
    }
    sqlite3_finalize(st);
    if (out && len == 0)
        out[0] = '\0';
    return out;
}

static void build_reference(void)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
        int ok = 1;
        for (int v = 0; ok && v < CATALOG_SCHEMA_VERSION; v++)
            ok = sqlite3_exec(db, catalog_migrations[v], NULL, NULL, NULL) == SQLITE_OK;
        if (ok)
            reference_schema = schema_text(db);
    }
    sqlite3_close(db);
}

static int open_plain(const char *path, struct catalog **pcat, char *err, size_t errlen)
{
    struct catalog *cat = calloc(1, sizeof(*cat));
    if (!cat) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    cat->mode = CATALOG_READ_WRITE;
    int rc = sqlite3_open_v2(path, &cat->db, SQLITE_OPEN_READWRITE, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", path, cat->db ? sqlite3_errmsg(cat->db) : sqlite3_errstr(rc));
        catalog_close(cat);
        return -EIO;
    }
    sqlite3_extended_result_codes(cat->db, 1);
    sqlite3_busy_timeout(cat->db, CATALOG_BUSY_TIMEOUT_MS);
    int r = guard(cat);
    if (r) {
        snprintf(err, errlen, "cannot open %s: %s", path, sqlite3_errmsg(cat->db));
        catalog_close(cat);
        return r;
    }
    *pcat = cat;
    return 0;
}

/* What catalog_image_open_file finds: 0 exact, 1 another schema, CATALOG_INVALID, < 0. */
static int check_file(struct catalog *cat, char *err, size_t errlen)
{
    int64_t schema = 0;
    int r = exec_sql(cat, "PRAGMA foreign_keys = ON");
    if (r == 0)
        r = query_one(cat, "PRAGMA user_version", &schema);
    if (r == 0 && schema > CATALOG_SCHEMA_VERSION) {
        snprintf(err, errlen, "the published catalog has schema %lld, newer than this program's %d", (long long)schema,
                 CATALOG_SCHEMA_VERSION);
        return CATALOG_INVALID;
    }
    sqlite3_stmt *st = NULL;
    int rc = r ? SQLITE_ERROR : sqlite3_prepare_v2(cat->db, "PRAGMA quick_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
        snprintf(err, errlen, "the published catalog is damaged: %s",
                 rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : sqlite3_errmsg(cat->db));
        sqlite3_finalize(st);
        return CATALOG_INVALID;
    }
    sqlite3_finalize(st);
    if (schema != CATALOG_SCHEMA_VERSION)
        return 1;
    pthread_once(&reference_once, build_reference);
    char *text = schema_text(cat->db);
    int same = text && reference_schema && strcmp(text, reference_schema) == 0;
    free(text);
    cat->version = CATALOG_SCHEMA_VERSION;
    return same ? 0 : 1;
}

int catalog_image_open_file(const char *path, struct catalog **pcat, char *err, size_t errlen)
{
    struct catalog *cat = NULL;
    int r = open_plain(path, &cat, err, errlen);
    if (r)
        return r;
    char mode[16] = "";
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(cat->db, "PRAGMA journal_mode", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        snprintf(mode, sizeof(mode), "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (strcmp(mode, "delete") != 0) {
        snprintf(err, errlen, "the published catalog cannot be read (%s)", mode[0] ? mode : sqlite3_errmsg(cat->db));
        r = CATALOG_INVALID;
    } else {
        r = check_file(cat, err, errlen);
    }
    if (r)
        catalog_close(cat);
    else
        *pcat = cat;
    return r;
}

int catalog_create_rollback(const char *path, struct catalog **pcat, char *err, size_t errlen)
{
    int r = catalog_open(path, CATALOG_CREATE, pcat, err, errlen);
    if (r == 0 && (r = exec_sql(*pcat, "PRAGMA journal_mode = DELETE")) != 0) {
        snprintf(err, errlen, "%s", catalog_errmsg(*pcat));
        catalog_close(*pcat);
        *pcat = NULL;
    }
    return r;
}

int catalog_orphan_active_key(struct catalog *cat, int64_t *pkey_id)
{
    return query_one(cat, "SELECT id FROM api_keys WHERE revoked IS NULL AND user_id NOT IN (SELECT id FROM users)"
                          " ORDER BY id LIMIT 1", pkey_id);
}
