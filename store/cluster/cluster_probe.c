/* --check in cluster mode: the cluster's state as its seed nodes tell it. */
#include "store/cluster/cluster_probe.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "store/cluster/cluster_map.h"
#include "store/redis/redis_probe.h"
#include "store/redis/redis_url.h"

/* Appends to report (always NUL-terminated, cut when full). */
static void append(char *report, size_t reportlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *report, size_t reportlen, const char *fmt, ...)
{
    size_t used = strnlen(report, reportlen);
    if (used + 1 >= reportlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(report + used, reportlen - used, fmt, ap);
    va_end(ap);
}

/* A command's reply, or NULL with why in err (the context is then unusable). */
static redisReply *command(struct redis_sync *c, char *err, size_t errlen, int argc, const char **argv)
{
    redisReply *r = redis_sync_command(c, argc, argv, NULL);
    if (r == NULL) {
        const char *e = redis_sync_error(c);
        snprintf(err, errlen, "%s", e[0] ? e : "no answer");
    }
    return r;
}

/* The value of "cluster_state:" in a CLUSTER INFO text, copied to out. */
static void cluster_state_of(const redisReply *info, char *out, size_t outlen)
{
    snprintf(out, outlen, "unknown");
    if (info->type != REDIS_REPLY_STRING)
        return;
    const char *s = info->str, *end = info->str + info->len;
    static const char name[] = "cluster_state:";
    for (const char *line = s; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        size_t n = (size_t)(stop - line);
        if (n > sizeof(name) - 1 && memcmp(line, name, sizeof(name) - 1) == 0) {
            size_t v = n - (sizeof(name) - 1);
            if (v > 0 && line[sizeof(name) - 1 + v - 1] == '\r')
                v--;
            snprintf(out, outlen, "%.*s", (int)(v < 32 ? v : 32), line + sizeof(name) - 1);
            return;
        }
        line = stop + 1;
    }
}

enum seed_outcome { SEED_UNREACHABLE, SEED_REFUSED, SEED_UNTRUSTED, SEED_NOT_CLUSTER, SEED_ANSWERED };

/* Says what the slots map shows; *pr 0 when the cluster is ok and every slot served,
 * else -EAGAIN. */
static void report_coverage(const struct redis_url *u, redisReply *info, const struct cluster_map *map, char *report,
                            size_t reportlen, int *pr)
{
    char state[40];
    cluster_state_of(info, state, sizeof(state));
    size_t masters = cluster_map_master_count(map), uncovered = cluster_map_uncovered_slots(map);
    if (uncovered == 0)
        append(report, reportlen, "cluster_state %s: %zu masters serve all %u slots (asked %s:%d)", state, masters,
               CLUSTER_SLOT_COUNT, u->host, u->port);
    else
        append(report, reportlen, "cluster_state %s: %zu masters, %zu of %u slots without a master (asked %s:%d)",
               state, masters, uncovered, CLUSTER_SLOT_COUNT, u->host, u->port);
    *pr = strcmp(state, "ok") == 0 && uncovered == 0 ? 0 : -EAGAIN;
}

/* Redis' default: every master refuses every command while a failed master awaits its
   replica's promotion. Said, not refused: CONFIG may be renamed or denied; then nothing. */
static void warn_full_coverage(struct redis_sync *c, const struct redis_url *u, char *report, size_t reportlen)
{
    const char *coverage_argv[] = {"CONFIG", "GET", "cluster-require-full-coverage"};
    char ignored[200];
    redisReply *coverage = command(c, ignored, sizeof(ignored), 3, coverage_argv);
    if (coverage != NULL && coverage->type == REDIS_REPLY_ARRAY && coverage->elements == 2 &&
        coverage->element[1]->type == REDIS_REPLY_STRING && strcmp(coverage->element[1]->str, "yes") == 0)
        append(report, reportlen,
               "; warning: cluster-require-full-coverage is yes on %s:%d: while a failed master awaits its "
               "replica's promotion every master answers CLUSTERDOWN and all users meet on_store_error "
               "(set it to no)", u->host, u->port);
    if (coverage != NULL)
        freeReplyObject(coverage);
}

/* CLUSTER INFO and CLUSTER SLOTS of a logged-in seed: SEED_ANSWERED with *pmap and
 * *pinfo, or why not. */
static enum seed_outcome read_cluster(struct redis_sync *c, const struct redis_url *u, redisReply **pinfo,
                                      struct cluster_map **pmap, char *why, size_t whylen)
{
    const char *info_argv[] = {"CLUSTER", "INFO"}, *slots_argv[] = {"CLUSTER", "SLOTS"};
    redisReply *slots = NULL;
    enum seed_outcome outcome = SEED_UNREACHABLE;
    if ((*pinfo = command(c, why, whylen, 2, info_argv)) == NULL)
        return SEED_UNREACHABLE;
    if ((*pinfo)->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%.160s", (*pinfo)->str);
        return SEED_NOT_CLUSTER;
    }
    if ((slots = command(c, why, whylen, 2, slots_argv)) == NULL)
        return SEED_UNREACHABLE;
    char err[200];
    *pmap = cluster_map_from_reply(slots, u->host, err, sizeof(err));
    if (*pmap == NULL) {
        snprintf(why, whylen, "%s", slots->type == REDIS_REPLY_ERROR ? slots->str : err);
        outcome = slots->type == REDIS_REPLY_ERROR ? SEED_NOT_CLUSTER : SEED_UNREACHABLE;
    } else {
        outcome = SEED_ANSWERED;
    }
    freeReplyObject(slots);
    return outcome;
}

/* Asks one seed; on SEED_ANSWERED *pr is set to 0 or -EAGAIN and report holds the line. */
static enum seed_outcome ask_seed(const struct redis_url *u, SSL_CTX *tls, int64_t timeout_ms, char *why,
                                  size_t whylen, char *report, size_t reportlen, int *pr)
{
    int login = 0;
    struct redis_sync *c = redis_probe_login(u, tls, timeout_ms, why, whylen, &login);
    if (c == NULL)
        return login == -EACCES ? SEED_REFUSED : login == -EPERM ? SEED_UNTRUSTED : SEED_UNREACHABLE;
    redisReply *info = NULL;
    struct cluster_map *map = NULL;
    enum seed_outcome outcome = read_cluster(c, u, &info, &map, why, whylen);
    if (outcome == SEED_ANSWERED) {
        report_coverage(u, info, map, report, reportlen, pr);
        warn_full_coverage(c, u, report, reportlen);
    }
    cluster_map_destroy(map);
    if (info != NULL)
        freeReplyObject(info);
    redis_sync_free(c);
    return outcome;
}

int cluster_probe(const char *seeds, const char *ca_file, int64_t timeout_ms, char *report, size_t reportlen)
{
    if (report == NULL || reportlen == 0)
        return -EINVAL;
    report[0] = '\0';
    struct redis_url *parsed = calloc(REDIS_SEEDS_MAX, sizeof(*parsed));
    if (parsed == NULL) {
        snprintf(report, reportlen, "out of memory");
        return -ENOMEM;
    }
    int r = -EHOSTUNREACH;
    SSL_CTX *tls = NULL;
    int n = redis_seed_list_parse(seeds, parsed, REDIS_SEEDS_MAX, report, reportlen);
    if (n < 0) {
        r = -EINVAL;
        goto out;
    }
    tls = redis_probe_tls(&parsed[0], ca_file, report, reportlen, &r);
    if (r != 0)
        goto out;
    char reasons[1024] = "";
    for (int i = 0; i < n; i++) {
        char why[200] = "";
        enum seed_outcome o = ask_seed(&parsed[i], tls, timeout_ms, why, sizeof(why), report, reportlen, &r);
        if (o == SEED_ANSWERED)
            goto out;
        if (o == SEED_REFUSED) {
            snprintf(report, reportlen, "%s:%d refuses the login: %s", parsed[i].host, parsed[i].port, why);
            r = -EACCES;
            goto out;
        }
        if (o == SEED_UNTRUSTED) {
            snprintf(report, reportlen, "%s:%d is not trusted: %s (CA certificates: %s)", parsed[i].host,
                     parsed[i].port, why, ca_file != NULL && ca_file[0] ? ca_file : "the system's");
            r = -EPERM;
            goto out;
        }
        if (o == SEED_NOT_CLUSTER) {
            snprintf(report, reportlen, "%s:%d is not a cluster node (%s)", parsed[i].host, parsed[i].port, why);
            r = -EINVAL;
            goto out;
        }
        append(reasons, sizeof(reasons), "%s%s:%d: %s", i ? "; " : "", parsed[i].host, parsed[i].port, why);
    }
    snprintf(report, reportlen, "no seed answered (%s)", reasons);
    r = -EHOSTUNREACH;
out:
    SSL_CTX_free(tls);
    explicit_bzero(parsed, REDIS_SEEDS_MAX * sizeof(*parsed));   /* the passwords, if any */
    free(parsed);
    return r;
}
