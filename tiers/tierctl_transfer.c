/* Moving the catalog as a whole: tierctl export, import and backup, and the fleet's
 * catalog: publish, pull and status (over tiers/tierctl_fleet.h) (tierctl.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiers/catalog_json.h"
#include "tiers/tierctl.h"
#include "tiers/tierctl_fleet.h"

/* ---- export, import, backup ---- */

/* Writes doc to f, then flushes it to the disk. Returns 0 or -1 (errno set). */
static int write_json_to(json_t *doc, FILE *f)
{
    if (json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 || fputc('\n', f) == EOF)
        return -1;
    return fflush(f) != 0 || fsync(fileno(f)) != 0 ? -1 : 0;
}

/* Writes doc to path through a temporary file and a rename, so a reader never sees half
 * a file. */
static int write_json_file(json_t *doc, const char *path)
{
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp)
        return cli_fail("out of memory");
    snprintf(tmp, n, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return cli_fail("cannot write %s: %s", path, strerror(e));
    }
    FILE *f = fdopen(fd, "w");
    int r = f ? write_json_to(doc, f) : -1;
    if (!f)
        close(fd);
    else if (fclose(f) != 0)
        r = -1;
    int e = errno;
    if (r == 0 && rename(tmp, path) != 0) {
        e = errno;
        r = -1;
    }
    if (r)
        unlink(tmp);
    free(tmp);
    return r ? cli_fail("cannot write %s: %s", path, strerror(e)) : 0;
}

int cmd_export(struct cli *c)
{
    char err[512];
    json_t *doc = NULL;
    struct catalog_json_repairs repairs;
    if (catalog_json_export(c->cat, &doc, &repairs, err, sizeof(err)))
        return cli_fail("export failed: %s", err);
    int r;
    if (c->args.npos == 0 || strcmp(c->args.pos[0], "-") == 0) {
        r = print_json(doc);
    } else {
        r = write_json_file(doc, c->args.pos[0]);
        json_decref(doc);
    }
    if (r == 0 && repairs.count)
        fprintf(stderr, "tierctl: warning: %s%s is not valid UTF-8: exported with '?' for each byte that is not\n",
                repairs.first, repairs.count > 1 ? " (and others)" : "");
    return r;
}

int cmd_backup(struct cli *c)
{
    int r = catalog_backup(c->cat, c->args.pos[0]);
    return r ? catalog_failed(c) : 0;
}

int cmd_import(struct cli *c)
{
    const char *path = c->args.pos[0];
    json_error_t jerr;
    json_t *doc = strcmp(path, "-") == 0 ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr)
                                         : json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        if (jerr.line < 0)
            return cli_fail("%s", jerr.text);
        return cli_fail("%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    char err[512];
    int r = catalog_json_import(c->cat, doc, err, sizeof(err));
    if (r) {
        json_decref(doc);
        return cli_fail("%s: %s (nothing imported)", path, err);
    }
    /* The import checked the document's shape: these are arrays of objects. */
    json_t *plans = json_object_get(doc, "plans"), *plan;
    size_t i, nlimits = 0;
    json_array_foreach(plans, i, plan)
        nlimits += json_array_size(json_object_get(plan, "limits"));
    note(c, "catalog %s: imported %s, replacing everything: %zu plans, %zu limits, %zu users, %zu keys", c->db_path,
         strcmp(path, "-") == 0 ? "stdin" : path, json_array_size(plans), nlimits,
         json_array_size(json_object_get(doc, "users")), json_array_size(json_object_get(doc, "api_keys")));
    json_decref(doc);
    return 0;
}

/* ---- the fleet's catalog ---- */

int read_fleet_config(struct cli *c, struct proxy_settings *fc, bool needed)
{
    char err[1200];
    if (fleet_config_read(c->args.flag[FLAG_CONFIG], fc, err, sizeof(err)) != 0)
        return cli_fail("%s", err);
    if (needed && !fc->found)
        return cli_fail("%s does not exist: give the proxy's file with --config FILE or $TIERPROXY_CONFIG, to find"
                        " the fleet's Redis", fc->file);
    return 0;
}

int publish_in_transaction(struct cli *c, const struct proxy_settings *fc, bool force, const char *failed)
{
    char msg[1536];
    int r = catalog_begin(c->cat, true);
    if (r)
        snprintf(msg, sizeof(msg), "%s", catalog_errmsg(c->cat));
    else if ((r = fleet_publish(c->cat, c->db_path, fc, force, &c->rows, msg, sizeof(msg))) == 0 &&
             catalog_commit(c->cat)) {
        snprintf(msg, sizeof(msg), "published, but cannot mark %s as published: %s", c->db_path,
                 catalog_errmsg(c->cat));
        r = -1;
    }
    if (r) {
        catalog_rollback(c->cat);
        return cli_fail("%s%s", failed, msg);
    }
    fprintf(stderr, "tierctl: %s\n", msg);
    return 0;
}

/* Reads the fleet's settings (a file must be found) and opens the catalog in mode. Returns
 * 0 or the status, said why. */
static int open_for_fleet(struct cli *c, struct proxy_settings *fc, enum catalog_mode mode)
{
    char err[512];
    int r = read_fleet_config(c, fc, true);
    if (r == 0 && catalog_open(c->db_path, mode, &c->cat, err, sizeof(err)))
        r = cli_fail("%s", err);
    return r;
}

int cmd_publish(struct cli *c)
{
    struct proxy_settings fc;
    int r = open_for_fleet(c, &fc, CATALOG_READ_WRITE);
    if (r)
        return r;
    r = publish_in_transaction(c, &fc, c->args.flag[FLAG_FORCE] != NULL, "");
    catalog_close(c->cat);
    return r;
}

int cmd_pull(struct cli *c)
{
    struct proxy_settings fc;
    char msg[1536];
    int r = open_for_fleet(c, &fc, CATALOG_CREATE);
    if (r)
        return r;
    r = fleet_pull(c->cat, c->db_path, &fc, msg, sizeof(msg));
    catalog_close(c->cat);
    if (r)
        return cli_fail("%s", msg);
    fprintf(stderr, "tierctl: %s\n", msg);
    return 0;
}

/* The local catalog, when there is one, open in a read transaction. Returns 0 or the
 * status, said why. */
static int open_if_present(struct cli *c)
{
    char err[512];
    if (access(c->db_path, F_OK) != 0)
        return 0;
    if (catalog_open(c->db_path, CATALOG_READ_ONLY, &c->cat, err, sizeof(err)))
        return cli_fail("%s", err);
    if (catalog_begin(c->cat, false) == 0)
        return 0;
    int r = catalog_failed(c);
    catalog_close(c->cat);
    c->cat = NULL;
    return r;
}

int cmd_status(struct cli *c)
{
    struct proxy_settings fc;
    char err[1024];
    int r = read_fleet_config(c, &fc, true);
    if (r || (r = open_if_present(c)) != 0)
        return r;
    r = fleet_status(c->cat, c->db_path, &fc, c->args.flag[FLAG_JSON] != NULL, stdout, err, sizeof(err));
    catalog_close(c->cat);
    if (fflush(stdout) != 0)
        return cli_fail("cannot write the output: %s", strerror(errno));
    return r ? cli_fail("%s", err) : 0;
}
