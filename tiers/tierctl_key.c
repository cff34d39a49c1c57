/* tierctl key create, key list, key revoke (tierctl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "tiers/apikey.h"
#include "tiers/catalog_json.h"
#include "tiers/table.h"
#include "tiers/tierctl.h"

int list_key(void *ctx, const struct catalog_key *key)
{
    struct key_view *v = ctx;
    if (v->array) {
        json_t *o = catalog_json_key(key, 0);
        return !o || json_array_append_new(v->array, o) ? -ENOMEM : 0;
    }
    char id[32];
    snprintf(id, sizeof(id), "%" PRId64, key->id);
    if (v->show_user)
        return table_row(v->table, id, key->user_id, key->label[0] ? key->label : "-", key->created,
                         key->revoked ? key->revoked : "no");
    return table_row(v->table, id, key->label[0] ? key->label : "-", key->created,
                     key->revoked ? key->revoked : "no");
}

/* stdout: the key alone on one line, or with --json
 * {"key_id": 3, "user": "alice", "label": "laptop", "key": "tp_..."}. The key is written
 * straight from our buffer (hex: nothing to escape), never copied into a JSON value that
 * would be freed without being wiped. */
static int print_new_key(struct cli *c, int64_t id, const char *user, const char *label, const char *key)
{
    if (!c->args.flag[FLAG_JSON]) {
        printf("%s\n", key);
        return 0;
    }
    json_t *juser = catalog_json_text(user), *jlabel = catalog_json_text(label);
    char *quser = juser ? json_dumps(juser, JSON_ENCODE_ANY) : NULL;
    char *qlabel = jlabel ? json_dumps(jlabel, JSON_ENCODE_ANY) : NULL;
    int r = 0;
    if (quser && qlabel)
        printf("{\"key_id\": %" PRId64 ", \"user\": %s, \"label\": %s, \"key\": \"%s\"}\n", id, quser, qlabel, key);
    else
        r = cli_fail("out of memory");
    free(quser);
    free(qlabel);
    json_decref(juser);
    json_decref(jlabel);
    return r;
}

int cmd_key_create(struct cli *c)
{
    const char *user = c->args.pos[0], *label = c->args.flag[FLAG_LABEL] ? c->args.flag[FLAG_LABEL] : "";
    char msg[256];
    int r = check_user_id(c, user);
    if (r)
        return r;
    if (catalog_check_label(label, msg, sizeof(msg)))
        return cli_usage_error(&c->args, "%s", msg);
    if (catalog_user_find(c->cat, user, NULL))
        return catalog_failed(c);
    char key[APIKEY_TEXT_LEN + 1];
    struct catalog_key record = {.user_id = user, .label = label};
    if (apikey_generate(key) != 0)
        return cli_fail("cannot generate a key: the random number generator failed");
    int64_t id = 0;
    if (apikey_hash(key, strlen(key), record.hash) != 0) {
        r = cli_fail("cannot hash the key");
    } else if (catalog_key_add(c->cat, &record, &id)) {
        r = catalog_failed(c);
    } else {
        /* Written before the commit; main commits only if stdout took it. */
        r = print_new_key(c, id, user, label, key);
    }
    OPENSSL_cleanse(key, sizeof(key));
    if (r == 0)
        note(c, "key %" PRId64 " created for user %s%s%s%s; it is shown only this once, on stdout", id, user,
             label[0] ? " (label \"" : "", label, label[0] ? "\")" : "");
    return r;
}

int cmd_key_list(struct cli *c)
{
    const char *user = c->args.npos ? c->args.pos[0] : NULL;
    if (user && catalog_user_find(c->cat, user, NULL))
        return catalog_failed(c);
    struct table t = {.ncols = 5};
    struct key_view v = {.table = &t, .show_user = true};
    int r = listing_start(c, &v.array);
    if (r)
        return r;
    if (!v.array)
        table_row(&t, "KEY-ID", "USER", "LABEL", "CREATED", "REVOKED");
    return listing_end(c, catalog_key_each(c->cat, user, false, list_key, &v), v.array, &t);
}

int cmd_key_revoke(struct cli *c)
{
    int64_t id;
    if (cli_parse_int(c->args.pos[0], 1, CATALOG_ID_MAX, &id))
        return cli_usage_error(&c->args, "invalid KEY-ID \"%s\"", c->args.pos[0]);
    if (catalog_key_revoke(c->cat, id))
        return catalog_failed(c);
    note(c, "key %" PRId64 " revoked", id);
    return 0;
}
