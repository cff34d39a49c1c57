/* The blocking Redis checks of `tierproxy --check` and the shared login (redis_probe.h). It
 * keeps no state: each call makes and frees its own connection and TLS context, or hands
 * the logged-in connection to the caller, who frees it. Blocking, so never run on a
 * worker's loop. No password reaches a report (the reasons are hiredis' errors and Redis'
 * replies), and redis_probe wipes its parsed URL, which holds the password, before it
 * returns once the URL parsed. */
#include "store/redis/redis_probe.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "store/redis/redis_tls.h"

bool redis_reply_refuses_login(const char *reply)
{
    return strncmp(reply, "WRONGPASS", 9) == 0 || strncmp(reply, "NOAUTH", 6) == 0 ||
           strncmp(reply, "NOPERM", 6) == 0 || strncasecmp(reply, "ERR invalid password", 20) == 0 ||
           strncmp(reply, "ERR AUTH", 8) == 0;
}

/* where: "host:port" or the socket path. */
static void where_of(const struct redis_url *u, char *where, size_t len)
{
    if (u->is_unix)
        snprintf(where, len, "%s", u->path);
    else
        snprintf(where, len, "%s:%d", u->host, u->port);
}

struct redis_sync *redis_probe_login(const struct redis_url *u, SSL_CTX *tls, int64_t timeout_ms, char *why,
                                     size_t whylen, int *pr)
{
    struct redis_sync *c = redis_sync_connect(u, tls, timeout_ms, why, whylen, pr);
    if (c == NULL)
        return NULL;
    if (u->has_password) {
        const char *argv[3] = {"AUTH", u->username[0] ? u->username : u->password, u->password};
        redisReply *r = redis_sync_command(c, u->username[0] ? 3 : 2, argv, NULL);
        if (r == NULL) {
            const char *e = redis_sync_error(c);
            snprintf(why, whylen, "AUTH: %s", e[0] ? e : "no answer");
            goto fail;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(why, whylen, "AUTH: %.160s", r->str);
            *pr = redis_reply_refuses_login(r->str) ? -EACCES : -EIO;
        }
        freeReplyObject(r);
        if (*pr != -EHOSTUNREACH)
            goto fail;
    }
    *pr = 0;
    return c;
fail:
    redis_sync_free(c);
    return NULL;
}

SSL_CTX *redis_probe_tls(const struct redis_url *u, const char *ca_file, char *why, size_t whylen, int *pr)
{
    *pr = 0;
    if (!u->tls)
        return NULL;
    SSL_CTX *tls = redis_tls_context_new(ca_file, why, whylen);
    if (tls == NULL)
        *pr = -EINVAL;
    return tls;
}

/* One command after the login; 0, or why in why and -EACCES / -EIO / -EHOSTUNREACH. */
static int ask(struct redis_sync *c, int argc, const char **argv, char *why, size_t whylen)
{
    redisReply *r = redis_sync_command(c, argc, argv, NULL);
    if (r == NULL) {
        const char *e = redis_sync_error(c);
        snprintf(why, whylen, "%s: %s", argv[0], e[0] ? e : "no answer");
        return -EHOSTUNREACH;
    }
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s: %.160s", argv[0], r->str);
        rc = redis_reply_refuses_login(r->str) ? -EACCES : -EIO;
    }
    freeReplyObject(r);
    return rc;
}

int redis_probe(const char *url, const char *ca_file, int64_t timeout_ms, char *report, size_t reportlen)
{
    struct redis_url u;
    if (redis_url_parse(url, &u, report, reportlen) != 0)
        return -EINVAL;
    char where[300], why[480] = "";
    where_of(&u, where, sizeof(where));
    int rc = 0;
    SSL_CTX *tls = redis_probe_tls(&u, ca_file, report, reportlen, &rc);
    if (rc != 0) {
        explicit_bzero(&u, sizeof(u));
        return rc;
    }
    struct redis_sync *c = redis_probe_login(&u, tls, timeout_ms, why, sizeof(why), &rc);
    if (c != NULL && u.db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u.db);
        const char *select[2] = {"SELECT", db};
        rc = ask(c, 2, select, why, sizeof(why));
    }
    const char *ping[1] = {"PING"};
    if (c != NULL && rc == 0)
        rc = ask(c, 1, ping, why, sizeof(why));
    redis_sync_free(c);
    SSL_CTX_free(tls);
    if (rc == 0)
        snprintf(report, reportlen, "%s answers%s", where, u.tls ? " over TLS" : "");
    else if (rc == -EHOSTUNREACH)
        snprintf(report, reportlen, "cannot reach %s: %s", where, why);
    else if (rc == -EPERM)
        snprintf(report, reportlen, "%s is not trusted: %s (CA certificates: %s)", where, why,
                 ca_file != NULL && ca_file[0] ? ca_file : "the system's");
    else
        snprintf(report, reportlen, "%s refuses: %s", where, why);
    explicit_bzero(&u, sizeof(u));
    return rc;
}
