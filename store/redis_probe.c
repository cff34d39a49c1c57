#include "store/redis_probe.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

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

redisContext *redis_probe_login(const struct redis_url *u, int64_t timeout_ms, char *why, size_t whylen, int *pr)
{
    struct timeval tv = {.tv_sec = (time_t)(timeout_ms / 1000), .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000};
    redisContext *c = u->is_unix ? redisConnectUnixWithTimeout(u->path, tv) : redisConnectWithTimeout(u->host, u->port, tv);
    *pr = -EHOSTUNREACH;
    if (c == NULL || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        snprintf(why, whylen, "%s", c != NULL && c->errstr[0] ? c->errstr : "cannot connect");
        goto fail;
    }
    if (u->has_password) {
        const char *argv[3] = {"AUTH", u->username[0] ? u->username : u->password, u->password};
        redisReply *r = redisCommandArgv(c, u->username[0] ? 3 : 2, argv, NULL);
        if (r == NULL) {
            snprintf(why, whylen, "AUTH: %s", c->errstr[0] ? c->errstr : "no answer");
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
    if (c != NULL)
        redisFree(c);
    return NULL;
}

/* One command after the login; 0, or why in why and -EACCES / -EIO / -EHOSTUNREACH. */
static int ask(redisContext *c, int argc, const char **argv, char *why, size_t whylen)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r == NULL) {
        snprintf(why, whylen, "%s: %s", argv[0], c->errstr[0] ? c->errstr : "no answer");
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

int redis_probe(const char *url, int64_t timeout_ms, char *report, size_t reportlen)
{
    struct redis_url u;
    if (redis_url_parse(url, &u, report, reportlen) != 0)
        return -EINVAL;
    char where[300], why[240] = "";
    where_of(&u, where, sizeof(where));
    int rc = 0;
    redisContext *c = redis_probe_login(&u, timeout_ms, why, sizeof(why), &rc);
    if (c != NULL && u.db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u.db);
        const char *select[2] = {"SELECT", db};
        rc = ask(c, 2, select, why, sizeof(why));
    }
    const char *ping[1] = {"PING"};
    if (c != NULL && rc == 0)
        rc = ask(c, 1, ping, why, sizeof(why));
    if (c != NULL)
        redisFree(c);
    explicit_bzero(&u, sizeof(u));
    if (rc == 0)
        snprintf(report, reportlen, "%s answers", where);
    else if (rc == -EHOSTUNREACH)
        snprintf(report, reportlen, "cannot reach %s: %s", where, why);
    else
        snprintf(report, reportlen, "%s refuses: %s", where, why);
    return rc;
}
