/* cluster_load's blocking Redis side, outside the measured traffic: CLUSTER SLOTS (which
 * master owns which slot, and so which subjects it gets) and INFO (CPU and EVALSHA counters
 * of masters and replicas before and after the window). See cluster_load.h. */
#include "cluster_load.h"

/* ---- blocking hiredis: CLUSTER SLOTS and INFO (outside the measured traffic) ---- */

static redisContext *blocking_connect(const char *host, int port, const struct redis_url *auth, char *err,
                                      size_t errlen)
{
    struct timeval tv = {INFO_TIMEOUT_MS / 1000, (INFO_TIMEOUT_MS % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (c == NULL || c->err) {
        snprintf(err, errlen, "%s:%d: %s", host, port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (auth != NULL && auth->has_password) {
        redisReply *r = auth->username[0] != '\0'
                            ? redisCommand(c, "AUTH %s %s", auth->username, auth->password)
                            : redisCommand(c, "AUTH %s", auth->password);
        bool ok = r != NULL && r->type != REDIS_REPLY_ERROR;
        if (!ok)
            snprintf(err, errlen, "%s:%d: AUTH: %.120s", host, port,
                     r ? r->str : c->errstr);   /* the server's words, never the password */
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* The number after "field:" in an INFO text, or -1 when absent or malformed. */
static double info_number(const char *info, const char *field)
{
    size_t flen = strlen(field);
    for (const char *p = info; (p = strstr(p, field)) != NULL; p += flen) {
        if ((p != info && p[-1] != '\n') || p[flen] != ':')
            continue;
        char *end = NULL;
        errno = 0;
        double v = strtod(p + flen + 1, &end);
        if (errno != 0 || end == p + flen + 1)
            return -1;
        return v;
    }
    return -1;
}

/* A "key=value" number of an INFO commandstats line ("cmdstat_evalsha:calls=3,usec=9,...");
 * 0 when the command was never called (Redis omits its line). */
static long long cmdstat_number(const char *info, const char *cmd, const char *key)
{
    char head[64];
    snprintf(head, sizeof(head), "cmdstat_%s:", cmd);
    const char *line = strstr(info, head);
    if (line == NULL)
        return 0;
    const char *eol = strchr(line, '\n');
    size_t klen = strlen(key);
    for (const char *p = line + strlen(head); p != NULL && (eol == NULL || p < eol);) {
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            char *end = NULL;
            errno = 0;
            long long v = strtoll(p + klen + 1, &end, 10);
            return errno != 0 || end == p + klen + 1 ? -1 : v;
        }
        p = strchr(p, ',');
        if (p != NULL)
            p++;
    }
    return -1;
}

static struct redis_stats read_stats(const char *host, int port, const struct redis_url *auth)
{
    struct redis_stats s = {0};
    char err[256];
    redisContext *c = blocking_connect(host, port, auth, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "cluster_load: INFO of %s\n", err);
        return s;
    }
    redisReply *r = redisCommand(c, "INFO everything");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        double user = info_number(r->str, "used_cpu_user"), sys = info_number(r->str, "used_cpu_sys");
        s.cpu_s = user + sys;
        s.evalsha_calls = cmdstat_number(r->str, "evalsha", "calls");
        s.evalsha_usec = cmdstat_number(r->str, "evalsha", "usec");
        s.eval_calls = cmdstat_number(r->str, "eval", "calls");
        s.ok = user >= 0 && sys >= 0 && s.evalsha_calls >= 0 && s.evalsha_usec >= 0 && s.eval_calls >= 0;
    }
    if (!s.ok)
        fprintf(stderr, "cluster_load: INFO of %s:%d: %s\n", host, port,
                r == NULL ? c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unreadable answer");
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return s;
}

void read_all_stats(struct load *load, bool after)
{
    for (int i = 0; i < load->master_count; i++) {
        struct master *m = &load->masters[i];
        struct redis_stats s = read_stats(m->url.host, m->url.port, &m->url);
        if (after)
            m->after = s;
        else
            m->before = s;
        for (int j = 0; j < m->replica_count; j++) {
            s = read_stats(m->replicas[j].host, m->replicas[j].port, &m->url);
            if (after)
                m->replica_after[j] = s;
            else
                m->replica_before[j] = s;
        }
    }
}

/* ---- slots ---- */

bool same_node(const char *host, int port, const struct master *m)
{
    return port == m->url.port && strcmp(host, m->url.host) == 0;
}

/* Reads one "host, port, id..." node element of CLUSTER SLOTS; an empty or "?" host is the
 * host that answered. Returns 0 or -EINVAL. */
static int slots_node(const redisReply *e, const char *asked_host, struct node_addr *out)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 || e->element[0]->type != REDIS_REPLY_STRING ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[1]->integer < 1 ||
        e->element[1]->integer > 65535 || e->element[0]->len >= CLUSTER_HOST_MAX)
        return -EINVAL;
    const char *host = e->element[0]->str;
    if (host[0] == '\0' || strcmp(host, "?") == 0)
        host = asked_host;
    snprintf(out->host, sizeof(out->host), "%s", host);
    out->port = (int)e->element[1]->integer;
    return 0;
}

/* Adds the replicas listed after a range's master (range->element[3..]) to m. */
static void add_replicas(struct master *m, const redisReply *range, const char *asked_host)
{
    for (size_t k = 3; k < range->elements; k++) {
        struct node_addr replica;
        if (slots_node(range->element[k], asked_host, &replica) != 0)
            continue;
        bool known = false;
        for (int q = 0; q < m->replica_count; q++)
            known |= m->replicas[q].port == replica.port && strcmp(m->replicas[q].host, replica.host) == 0;
        if (!known && m->replica_count < MAX_REPLICAS_PER_MASTER)
            m->replicas[m->replica_count++] = replica;
    }
}

/* One range of CLUSTER SLOTS given to the master it names, if it is one of ours. */
static int take_range(struct load *load, int8_t *owner, const redisReply *range, const char *asked_host)
{
    struct node_addr node;
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 || range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER || range->element[0]->integer < 0 ||
        range->element[1]->integer >= CLUSTER_SLOT_COUNT || range->element[0]->integer > range->element[1]->integer ||
        slots_node(range->element[2], asked_host, &node) != 0)
        return -1;
    for (int j = 0; j < load->master_count; j++) {
        struct master *m = &load->masters[j];
        if (!same_node(node.host, node.port, m))
            continue;
        m->cluster = true;
        for (long long s = range->element[0]->integer; s <= range->element[1]->integer; s++) {
            owner[s] = (int8_t)j;
            m->slots_owned++;
        }
        add_replicas(m, range, asked_host);
    }
    return 0;
}

/* A reply of plain Redis: every master owns every slot (each a separate plain Redis). */
static void no_cluster(struct load *load, int8_t *owner)
{
    for (int i = 0; i < load->master_count; i++) {
        load->masters[i].cluster = false;
        load->masters[i].slots_owned = CLUSTER_SLOT_COUNT;
    }
    memset(owner, -1, CLUSTER_SLOT_COUNT);   /* unused: every subject goes */
    fprintf(stderr, "cluster_load: %s is not a cluster node: every master takes any subject\n",
            load->masters[0].name);
}

/* Sets the owners from a CLUSTER SLOTS reply r of the first master. */
static int take_slots(struct load *load, int8_t *owner, const redisReply *r)
{
    const struct master *first = &load->masters[0];
    if (r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "cluster_load: CLUSTER SLOTS of %s: %s\n", first->name,
                r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
        return -1;
    }
    memset(owner, -1, CLUSTER_SLOT_COUNT);
    for (size_t i = 0; i < r->elements; i++)
        if (take_range(load, owner, r->element[i], first->url.host) != 0) {
            fprintf(stderr, "cluster_load: CLUSTER SLOTS of %s: malformed range %zu\n", first->name, i);
            return -1;
        }
    int rc = 0;
    for (int j = 0; j < load->master_count; j++) {
        if (load->masters[j].slots_owned == 0) {
            fprintf(stderr, "cluster_load: %s owns no slot in the CLUSTER SLOTS of %s (a replica? another cluster?)\n",
                    load->masters[j].name, first->name);
            rc = -1;
        }
    }
    return rc;
}

/* Asks the first master for CLUSTER SLOTS and sets which slots each master owns (owner:
 * slot -> master index, -1 none) and the replicas of each. A node with cluster support
 * disabled makes every master own every slot (each a separate plain Redis). Returns 0, or
 * -1 after printing why. */
int learn_slots(struct load *load, int8_t *owner)
{
    struct master *first = &load->masters[0];
    char err[512];
    redisContext *c = blocking_connect(first->url.host, first->url.port, &first->url, err, sizeof(err));
    if (c == NULL) {
        fprintf(stderr, "cluster_load: %s\n", err);
        return -1;
    }
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    int rc = -1;
    if (r == NULL) {
        fprintf(stderr, "cluster_load: CLUSTER SLOTS of %s: %s\n", first->name, c->errstr);
    } else if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "cluster support disabled") != NULL) {
        no_cluster(load, owner);
        rc = 0;
    } else {
        rc = take_slots(load, owner, r);
    }
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* The key limiter_redis builds for a subject's rule (put_key in store/redis/limiter_redis.c). */
static size_t build_key(const char *prefix, const char *subject, int64_t rule_id, char *key, size_t keymax)
{
    int n = snprintf(key, keymax, "%s{%s}:%" PRId64, prefix, subject, rule_id);
    return n < 0 || (size_t)n >= keymax ? 0 : (size_t)n;
}

/* Picks opt.subjects subjects per master, "u:load-<i>" (the proxy's user subjects are
 * "u:<user id>"), each one whose every rule key is in a slot that master owns. Returns 0
 * or -1 after printing why. */
int pick_subjects(struct load *load, const int8_t *owner)
{
    const size_t want = (size_t)load->opt.subjects;
    for (int j = 0; j < load->master_count; j++) {
        struct master *m = &load->masters[j];
        m->subjects = calloc(want, sizeof(*m->subjects));
        if (m->subjects == NULL) {
            fprintf(stderr, "cluster_load: out of memory\n");
            return -1;
        }
    }
    /* one candidate stream for all: disjoint subject sets whatever the slot layout */
    const uint64_t max_tries = (uint64_t)want * CLUSTER_SLOT_COUNT;
    size_t filled = 0;
    for (uint64_t i = 0; i < max_tries && filled < (size_t)load->master_count; i++) {
        char subject[SUBJECT_MAX], key[KEY_MAX];
        snprintf(subject, sizeof(subject), "u:load-%" PRIu64, i);
        int taker = -1;
        bool one_slot = true;
        unsigned first_slot = 0;
        for (size_t r = 0; r < PLAN_RULES; r++) {
            size_t klen = build_key(load->opt.prefix, subject, PLAN[r].id, key, sizeof(key));
            if (klen == 0) {
                fprintf(stderr, "cluster_load: key prefix too long\n");
                return -1;
            }
            unsigned slot = cluster_key_slot(key, klen);
            if (r == 0)
                first_slot = slot;
            one_slot &= slot == first_slot;
        }
        if (!one_slot)
            continue;   /* a '}' in the prefix could split a check's keys */
        if (!load->masters[0].cluster) {
            /* plain Redis: round robin */
            taker = (int)(i % (uint64_t)load->master_count);
        } else {
            taker = owner[first_slot];
        }
        if (taker < 0)
            continue;
        struct master *m = &load->masters[taker];
        if (m->subject_count == want)
            continue;
        memcpy(m->subjects[m->subject_count++], subject, sizeof(subject));
        if (m->subject_count == want)
            filled++;
    }
    if (filled < (size_t)load->master_count) {
        fprintf(stderr,
                "cluster_load: could not find %zu subjects for every master (does the key prefix \"%s\" "
                "hold a {hash tag}? then every key has one slot)\n",
                want, load->opt.prefix);
        return -1;
    }
    return 0;
}
