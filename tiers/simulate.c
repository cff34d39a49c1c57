/* The access-log replay of `tierctl simulate`. See simulate.h for what is replayed, when
 * and against which limits.
 *
 * Lines are parsed and kept (the time, the subject, the plan, the method and the path as
 * routes match it) as they are read; simulation_run sorts them by the time of their check
 * and runs each through one memory limiter with that time as its clock. Concurrency
 * slots are given back from a min-heap of end times before each check. Strings live in an
 * arena freed with the simulation. */
#include "tiers/simulate.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store/keyed_hash.h"
#include "store/limiter.h"
#include "tiers/plan_rules.h"
#include "tiers/request_target.h"

/* The proxy's subject buffer (struct request's subject): a longer subject is cut there,
 * so it is cut here too. */
#define SUBJECT_MAX 160
/* The lease TTL a concurrency rule carries; one process never lets a lease expire. */
#define LEASE_TTL_MS 30000
#define ARENA_BLOCK 65536
#define SHOWN_LINES 20

/* ---- an arena for the strings of the kept lines ---- */

struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
};

static const char *arena_copy(struct arena_block **parena, const char *s, size_t n)
{
    struct arena_block *b = *parena;
    if (b == NULL || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > ARENA_BLOCK ? n + 1 : ARENA_BLOCK;
        b = malloc(sizeof(*b) + cap);
        if (b == NULL)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = *parena;
        *parena = b;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    p[n] = '\0';
    b->used += n + 1;
    return p;
}

static void arena_free(struct arena_block *b)
{
    while (b != NULL) {
        struct arena_block *next = b->next;
        free(b);
        b = next;
    }
}

/* ---- parsing ---- */

/* n decimal digits, already checked to be digits */
static int64_t digits(const char *s, size_t n)
{
    int64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

int simulate_parse_time(const char *text, int64_t *pms)
{
    /* 2026-11-25T12:00:00.123Z */
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (text == NULL || strlen(text) != sizeof(shape) - 1)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(shape) - 1; i++)
        if (shape[i] != 'd' ? text[i] != shape[i] : (text[i] < '0' || text[i] > '9'))
            return -EINVAL;
    int64_t y = digits(text, 4), mo = digits(text + 5, 2), d = digits(text + 8, 2), h = digits(text + 11, 2),
            mi = digits(text + 14, 2), s = digits(text + 17, 2), ms = digits(text + 20, 3);
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || s > 59)
        return -EINVAL;
    *pms = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000 + s * 1000 + ms;
    return 0;
}

static bool is_checked_decision(const char *decision)
{
    static const char *const checked[] = {"allowed", "rejected", "shadow", "store_unavailable", "local"};
    for (size_t i = 0; i < sizeof(checked) / sizeof(checked[0]); i++)
        if (strcmp(decision, checked[i]) == 0)
            return true;
    return false;
}

/* A string member, or NULL when it is absent or null; *pbad when it is something else. */
static const char *string_member(json_t *o, const char *name, bool *pbad)
{
    json_t *v = json_object_get(o, name);
    if (v == NULL || json_is_null(v))
        return NULL;
    if (!json_is_string(v)) {
        *pbad = true;
        return NULL;
    }
    return json_string_value(v);
}

/* The members every line has, into line; NULL, or why the line is refused. */
static const char *read_members(json_t *doc, struct simulate_line *line)
{
    bool bad = false;
    if (!json_is_object(doc))
        return "not a JSON object";
    line->decision = string_member(doc, "decision", &bad);
    if (line->decision == NULL || !json_is_integer(json_object_get(doc, "status")))
        return "not an access-log line (no \"decision\" or \"status\")";
    line->user = string_member(doc, "user", &bad);
    line->plan = string_member(doc, "plan", &bad);
    line->client = string_member(doc, "client", &bad);
    line->method = string_member(doc, "method", &bad);
    line->path = string_member(doc, "path", &bad);
    if (bad)
        return "a field that should be a string is not";
    line->checked = is_checked_decision(line->decision);
    return NULL;
}

/* What a line whose request was checked must also say: who, what, and when it was decided
 * and ended; NULL, or why the line is refused. */
static const char *read_checked(json_t *doc, struct simulate_line *line)
{
    bool bad = false;   /* a time that is not a string reads as absent */
    line->logged_rejected = strcmp(line->decision, "rejected") == 0 || strcmp(line->decision, "shadow") == 0;
    if (line->user == NULL || line->method == NULL || line->path == NULL)
        return "no \"user\", \"method\" or \"path\"";
    if (simulate_parse_time(string_member(doc, "time", &bad), &line->ended_ms) != 0)
        return "no \"time\" in the form 2026-11-25T12:00:00.000Z";
    const char *decided = string_member(doc, "decision_time", &bad);
    if (decided != NULL) {
        if (simulate_parse_time(decided, &line->decided_ms) != 0)
            return "a \"decision_time\" not in the form 2026-11-25T12:00:00.000Z";
    } else {
        json_t *total = json_object_get(doc, "total_ms");
        if (!json_is_integer(total) || json_integer_value(total) < 0)
            return "neither \"decision_time\" nor \"total_ms\"";
        line->decided_ms = line->ended_ms - json_integer_value(total);
        if (line->decided_ms < 0)
            line->decided_ms = 0;
    }
    if (line->ended_ms < line->decided_ms)
        line->ended_ms = line->decided_ms;   /* the wall clock stepped back */
    return NULL;
}

int simulate_parse_line(const char *text, size_t len, struct simulate_line *line, json_t **pdoc,
                        char *err, size_t errlen)
{
    memset(line, 0, sizeof(*line));
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, 0, &jerr);
    if (doc == NULL) {
        snprintf(err, errlen, "not JSON (%s at column %d)", jerr.text, jerr.column);
        return -EINVAL;
    }
    const char *why = read_members(doc, line);
    if (why == NULL && line->checked)
        why = read_checked(doc, line);
    if (why != NULL) {
        snprintf(err, errlen, "%s", why);
        json_decref(doc);
        memset(line, 0, sizeof(*line));
        return -EINVAL;
    }
    *pdoc = doc;
    return 0;
}

/* The path as the proxy matched it: the logged target (as the client sent it) made into
 * the normalised path by the proxy's own code (request_target.h), into a buffer the caller
 * frees. Route prefixes compare case-sensitively here, [proxy] path_case's default: the
 * log does not say how the proxy was configured. Returns 0 and *pmatch, 1 for a target the
 * proxy refuses (it answered 400 and checked nothing), -ENOMEM. */
static int route_path(const char *method, const char *target, char **pbuf, const char **pmatch, size_t *plen)
{
    size_t len = strlen(target), size = request_target_buffer_size(len);
    struct request_target t;
    char *buf = malloc(size);
    if (buf == NULL)
        return -ENOMEM;
    if (request_target_parse(method, target, len, buf, size, &t) != 0) {
        free(buf);
        return 1;
    }
    *pbuf = buf;
    *pmatch = t.match;
    *plen = t.match_len;
    return 0;
}

/* ---- the simulation ---- */

struct subject {
    const char *key;          /* the limiter subject: "u:<user>" or "ip:<client>" */
    size_t key_len;
    uint64_t hash;
    const char *user, *client;
    uint64_t requests, rejected;
};

struct request {
    int64_t at_ms, end_ms;
    uint64_t line;
    uint32_t subject;
    bool logged_rejected, rejected;
    const struct tier_plan *plan;   /* NULL with given rules */
    const char *method, *path;      /* the path as routes match it; NULL with given rules */
    size_t path_len;
};

struct simulation {
    struct simulate_options opt;
    struct arena_block *arena;
    struct request *reqs;
    size_t n_reqs, cap_reqs;
    struct subject *subjects;
    size_t n_subjects, cap_subjects;
    uint32_t *table;                /* subject index + 1; 0 = empty; at most half full */
    size_t table_mask;
    struct simulate_report report;
    uint64_t *rejected_lines;
    bool ran;
};

int simulation_create(const struct simulate_options *options, struct simulation **psim)
{
    if (options->n_given > SIMULATE_MAX_GIVEN || (options->n_given > 0 && options->plan != NULL) ||
        (options->n_given == 0 && options->snap == NULL))
        return -EINVAL;
    size_t concurrency = 0;
    for (size_t i = 0; i < options->n_given; i++) {
        if (limit_rule_validate(&options->given[i]) != 0)
            return -EINVAL;
        concurrency += options->given[i].kind == LIMIT_CONCURRENCY;
        for (size_t j = 0; j < i; j++)
            if (options->given[j].id == options->given[i].id)
                return -EINVAL;
    }
    if (concurrency > 1)
        return -EINVAL;
    struct simulation *sim = calloc(1, sizeof(*sim));
    if (sim == NULL)
        return -ENOMEM;
    sim->opt = *options;
    sim->table_mask = 1023;
    sim->table = calloc(sim->table_mask + 1, sizeof(*sim->table));
    if (sim->table == NULL) {
        free(sim);
        return -ENOMEM;
    }
    *psim = sim;
    return 0;
}

void simulation_destroy(struct simulation *sim)
{
    if (sim == NULL)
        return;
    arena_free(sim->arena);
    free(sim->reqs);
    free(sim->subjects);
    free(sim->table);
    free(sim->rejected_lines);
    free(sim);
}

static int grow_table(struct simulation *sim)
{
    size_t cap = (sim->table_mask + 1) * 2;
    uint32_t *table = calloc(cap, sizeof(*table));
    if (table == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < sim->n_subjects; i++) {
        size_t s = (size_t)sim->subjects[i].hash & (cap - 1);
        while (table[s] != 0)
            s = (s + 1) & (cap - 1);
        table[s] = (uint32_t)i + 1;
    }
    free(sim->table);
    sim->table = table;
    sim->table_mask = cap - 1;
    return 0;
}

/* The index of the subject named key, added when new. Returns 0 or -ENOMEM. */
static int intern_subject(struct simulation *sim, const char *key, size_t key_len, const char *user,
                          const char *client, uint32_t *pindex)
{
    uint64_t hash = hash_keyed(key, key_len);   /* the log's client addresses */
    size_t s = (size_t)hash & sim->table_mask;
    for (; sim->table[s] != 0; s = (s + 1) & sim->table_mask) {
        const struct subject *sub = &sim->subjects[sim->table[s] - 1];
        if (sub->hash == hash && sub->key_len == key_len && memcmp(sub->key, key, key_len) == 0) {
            *pindex = sim->table[s] - 1;
            return 0;
        }
    }
    if (sim->n_subjects >= UINT32_MAX - 1)
        return -ENOMEM;
    if (sim->n_subjects == sim->cap_subjects) {
        size_t cap = sim->cap_subjects ? sim->cap_subjects * 2 : 256;
        struct subject *subjects = realloc(sim->subjects, cap * sizeof(*subjects));
        if (subjects == NULL)
            return -ENOMEM;
        sim->subjects = subjects;
        sim->cap_subjects = cap;
    }
    struct subject *sub = &sim->subjects[sim->n_subjects];
    memset(sub, 0, sizeof(*sub));
    sub->key = arena_copy(&sim->arena, key, key_len);
    sub->user = arena_copy(&sim->arena, user, strlen(user));
    sub->client = client != NULL ? arena_copy(&sim->arena, client, strlen(client)) : NULL;
    if (sub->key == NULL || sub->user == NULL || (client != NULL && sub->client == NULL))
        return -ENOMEM;
    sub->key_len = key_len;
    sub->hash = hash;
    sim->table[s] = (uint32_t)sim->n_subjects + 1;
    *pindex = (uint32_t)sim->n_subjects++;
    if (2 * sim->n_subjects > sim->table_mask + 1)
        return grow_table(sim);
    return 0;
}

/* The plan a checked line is replayed against, or NULL (with given rules, or no plan). */
static const struct tier_plan *plan_of(const struct simulation *sim, const struct simulate_line *line,
                                       bool anonymous)
{
    if (sim->opt.n_given > 0)
        return NULL;
    if (sim->opt.plan != NULL)
        return sim->opt.plan;
    const struct tier_user *user = anonymous ? NULL : snapshot_find_user(sim->opt.snap, line->user);
    if (user != NULL)
        return tier_user_plan(user);   /* with the user's own limits, as the proxy checks */
    return line->plan != NULL ? snapshot_find_plan(sim->opt.snap, line->plan) : NULL;
}

static int keep_line(struct simulation *sim, uint64_t lineno, const struct simulate_line *line, char *err,
                     size_t errlen)
{
    /* "anonymous" is what the proxy logs for its anonymous plan's clients, unless the
     * catalog has a user of that name. */
    bool anonymous = strcmp(line->user, "anonymous") == 0 &&
                     (sim->opt.snap == NULL || snapshot_find_user(sim->opt.snap, "anonymous") == NULL);
    const struct tier_plan *plan = plan_of(sim, line, anonymous);
    if (plan == NULL && sim->opt.n_given == 0) {
        sim->report.no_plan++;
        return 0;
    }
    struct request req = {
        .at_ms = line->decided_ms, .end_ms = line->ended_ms, .line = lineno,
        .logged_rejected = line->logged_rejected, .plan = plan,
    };
    if (plan != NULL) {
        char *buf = NULL;
        const char *match = NULL;
        size_t match_len = 0;
        int rp = route_path(line->method, line->path, &buf, &match, &match_len);
        if (rp != 0) {
            if (rp > 0)
                snprintf(err, errlen, "a target the proxy refuses (400 bad_request_target)");
            return rp;
        }
        req.method = arena_copy(&sim->arena, line->method, strlen(line->method));
        req.path = arena_copy(&sim->arena, match, match_len);
        req.path_len = match_len;
        free(buf);
        if (req.method == NULL || req.path == NULL)
            return -ENOMEM;
    }
    char key[SUBJECT_MAX];
    const char *client = line->client != NULL ? line->client : "";
    snprintf(key, sizeof(key), anonymous ? "ip:%s" : "u:%s", anonymous ? client : line->user);
    int r = intern_subject(sim, key, strlen(key), line->user, anonymous ? client : NULL, &req.subject);
    if (r != 0)
        return r;
    if (sim->n_reqs == sim->cap_reqs) {
        size_t cap = sim->cap_reqs ? sim->cap_reqs * 2 : 1024;
        struct request *reqs = realloc(sim->reqs, cap * sizeof(*reqs));
        if (reqs == NULL)
            return -ENOMEM;
        sim->reqs = reqs;
        sim->cap_reqs = cap;
    }
    sim->reqs[sim->n_reqs++] = req;
    return 0;
}

int simulation_add(struct simulation *sim, uint64_t lineno, const char *text, size_t len, char *err,
                   size_t errlen)
{
    sim->report.lines++;
    struct simulate_line line;
    json_t *doc = NULL;
    if (simulate_parse_line(text, len, &line, &doc, err, errlen) != 0) {
        sim->report.skipped++;
        return 1;
    }
    int r = 0;
    if (line.checked)
        r = keep_line(sim, lineno, &line, err, errlen);
    else
        sim->report.not_checked++;
    json_decref(doc);
    if (r == 1)
        sim->report.skipped++;
    return r;
}

void simulation_skip(struct simulation *sim)
{
    sim->report.lines++;
    sim->report.skipped++;
}

/* ---- the replay ---- */

static int by_check_time(const void *a, const void *b)
{
    const struct request *x = a, *y = b;
    if (x->at_ms != y->at_ms)
        return x->at_ms < y->at_ms ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* A min-heap of requests holding concurrency slots, by end time (then index). */
struct slot_heap {
    size_t *items;
    size_t n, cap;
    const struct request *reqs;
};

static bool heap_less(const struct slot_heap *h, size_t a, size_t b)
{
    const struct request *x = &h->reqs[a], *y = &h->reqs[b];
    return x->end_ms != y->end_ms ? x->end_ms < y->end_ms : a < b;
}

static int heap_push(struct slot_heap *h, size_t index)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        size_t *items = realloc(h->items, cap * sizeof(*items));
        if (items == NULL)
            return -ENOMEM;
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->items[i] = index;
    while (i > 0 && heap_less(h, h->items[i], h->items[(i - 1) / 2])) {
        size_t parent = (i - 1) / 2, t = h->items[i];
        h->items[i] = h->items[parent];
        h->items[parent] = t;
        i = parent;
    }
    return 0;
}

static size_t heap_pop(struct slot_heap *h)
{
    size_t top = h->items[0];
    h->items[0] = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && heap_less(h, h->items[l], h->items[m]))
            m = l;
        if (r < h->n && heap_less(h, h->items[r], h->items[m]))
            m = r;
        if (m == i)
            break;
        size_t t = h->items[i];
        h->items[i] = h->items[m];
        h->items[m] = t;
        i = m;
    }
    return top;
}

/* The rules request i is checked against; returns how many. */
static size_t rules_of(const struct simulation *sim, const struct request *req, struct limit_rule *rules)
{
    if (sim->opt.n_given > 0) {
        memcpy(rules, sim->opt.given, sim->opt.n_given * sizeof(*rules));
        return sim->opt.n_given;
    }
    const struct tier_limit *checked[LIMITER_MAX_RULES];
    return tier_plan_rules(req->plan, req->method, req->path, req->path_len, false, LEASE_TTL_MS, rules, checked,
                           NULL);
}

static void lease_name(size_t index, char *buf, size_t buflen)
{
    snprintf(buf, buflen, "r%zu", index);
}

static void on_verdict(void *arg, const struct limiter_result *result)
{
    *(bool *)arg = result->status == LIMITER_DECIDED && result->allowed;
}

static void give_back(struct simulation *sim, struct limiter *limiter, size_t index)
{
    const struct request *req = &sim->reqs[index];
    const struct subject *sub = &sim->subjects[req->subject];
    struct limit_rule rules[LIMITER_MAX_RULES];
    size_t n = rules_of(sim, req, rules);
    char lease[32];
    lease_name(index, lease, sizeof(lease));
    limiter_release(limiter, sub->key, sub->key_len, rules, n, lease);
}

static int replay(struct simulation *sim)
{
    qsort(sim->reqs, sim->n_reqs, sizeof(*sim->reqs), by_check_time);
    struct memory_store *store = memory_store_create();
    struct limiter *limiter = store != NULL ? limiter_memory_create(store) : NULL;
    struct slot_heap held = {.reqs = sim->reqs};
    int r = limiter != NULL ? 0 : -ENOMEM;
    for (size_t i = 0; r == 0 && i < sim->n_reqs; i++) {
        struct request *req = &sim->reqs[i];
        /* A request that ended gives its slot back before one checked in the same ms. */
        while (held.n > 0 && sim->reqs[held.items[0]].end_ms <= req->at_ms)
            give_back(sim, limiter, heap_pop(&held));
        struct limit_rule rules[LIMITER_MAX_RULES];
        size_t n = rules_of(sim, req, rules);
        if (n == 0)
            continue;   /* nothing applies: the proxy forwarded it unchecked */
        const struct subject *sub = &sim->subjects[req->subject];
        bool concurrency = false;
        for (size_t k = 0; k < n; k++)
            concurrency |= rules[k].kind == LIMIT_CONCURRENCY;
        bool allowed = false;
        if (concurrency) {
            char lease[32];
            lease_name(i, lease, sizeof(lease));
            r = limiter_check_leased(limiter, sub->key, sub->key_len, rules, n, req->at_ms, lease, on_verdict,
                                     &allowed);
        } else {
            r = limiter_check(limiter, sub->key, sub->key_len, rules, n, req->at_ms, on_verdict, &allowed);
        }
        if (r != 0)
            break;
        req->rejected = !allowed;
        if (allowed && concurrency)
            r = heap_push(&held, i);
    }
    free(held.items);
    limiter_destroy(limiter);
    memory_store_destroy(store);
    return r;
}

static int by_line(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int by_rejections(const void *a, const void *b, void *subjects)
{
    const struct subject *all = subjects;
    const struct subject *x = &all[*(const uint32_t *)a], *y = &all[*(const uint32_t *)b];
    if (x->rejected != y->rejected)
        return x->rejected > y->rejected ? -1 : 1;
    if (x->requests != y->requests)
        return x->requests > y->requests ? -1 : 1;
    int c = strcmp(x->user, y->user);
    if (c != 0)
        return c;
    return strcmp(x->client ? x->client : "", y->client ? y->client : "");
}

static int count(struct simulation *sim)
{
    struct simulate_report *rep = &sim->report;
    rep->requests = sim->n_reqs;
    sim->rejected_lines = malloc((sim->n_reqs ? sim->n_reqs : 1) * sizeof(uint64_t));
    uint32_t *order = malloc((sim->n_subjects ? sim->n_subjects : 1) * sizeof(uint32_t));
    if (sim->rejected_lines == NULL || order == NULL) {
        free(order);
        return -ENOMEM;
    }
    for (size_t i = 0; i < sim->n_reqs; i++) {
        const struct request *req = &sim->reqs[i];
        struct subject *sub = &sim->subjects[req->subject];
        sub->requests++;
        if (req->rejected) {
            sub->rejected++;
            sim->rejected_lines[rep->rejected++] = req->line;
        }
        rep->logged_rejected += req->logged_rejected;
        rep->newly_rejected += req->rejected && !req->logged_rejected;
        rep->no_longer_rejected += !req->rejected && req->logged_rejected;
    }
    qsort(sim->rejected_lines, rep->rejected, sizeof(uint64_t), by_line);
    rep->rejected_lines = sim->rejected_lines;
    rep->n_rejected_lines = rep->rejected;
    rep->users = sim->n_subjects;
    size_t n = 0;
    for (size_t i = 0; i < sim->n_subjects; i++)
        if (sim->subjects[i].rejected > 0)
            order[n++] = (uint32_t)i;
    rep->users_rejected = n;
    qsort_r(order, n, sizeof(*order), by_rejections, sim->subjects);
    for (size_t i = 0; i < n && i < SIMULATE_TOP_USERS; i++) {
        const struct subject *sub = &sim->subjects[order[i]];
        rep->top[i] = (struct simulate_user){
            .user = sub->user, .client = sub->client, .requests = sub->requests, .rejected = sub->rejected,
        };
        rep->n_top = i + 1;
    }
    free(order);
    return 0;
}

const struct simulate_report *simulation_counts(const struct simulation *sim)
{
    return &sim->report;
}

int simulation_run(struct simulation *sim, const struct simulate_report **preport)
{
    if (sim->ran)
        return -EINVAL;
    sim->ran = true;
    int r = replay(sim);
    if (r == 0)
        r = count(sim);
    if (r != 0)
        return r == -EINVAL ? -EINVAL : -ENOMEM;
    *preport = &sim->report;
    return 0;
}

/* ---- the report ---- */

json_t *simulate_report_json(const struct simulate_report *rep, const char *log_path, const char *against)
{
    json_t *top = json_array(), *lines = json_array();
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}",
                          "log", log_path, "against", against,
                          "lines", (json_int_t)rep->lines, "requests", (json_int_t)rep->requests,
                          "not_checked", (json_int_t)rep->not_checked, "skipped", (json_int_t)rep->skipped,
                          "no_plan", (json_int_t)rep->no_plan, "rejected", (json_int_t)rep->rejected,
                          "users", (json_int_t)rep->users, "users_rejected", (json_int_t)rep->users_rejected,
                          "logged_rejected", (json_int_t)rep->logged_rejected,
                          "newly_rejected", (json_int_t)rep->newly_rejected,
                          "no_longer_rejected", (json_int_t)rep->no_longer_rejected,
                          "top_users", top, "rejected_lines", lines);
    if (o == NULL)
        return NULL;   /* json_pack took the two arrays ("o") either way */
    for (size_t i = 0; i < rep->n_top; i++) {
        const struct simulate_user *u = &rep->top[i];
        json_t *item = json_pack("{s:s, s:I, s:I}", "user", u->user, "requests", (json_int_t)u->requests,
                                 "rejected", (json_int_t)u->rejected);
        if (item != NULL && u->client != NULL)
            json_object_set_new(item, "client", json_string(u->client));
        if (item == NULL || json_array_append_new(top, item) != 0)
            goto nomem;
    }
    for (size_t i = 0; i < rep->n_rejected_lines; i++)
        if (json_array_append_new(lines, json_integer((json_int_t)rep->rejected_lines[i])) != 0)
            goto nomem;
    return o;
nomem:
    json_decref(o);
    return NULL;
}

static double percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

int simulate_report_print(const struct simulate_report *rep, const char *log_path, const char *against, FILE *out)
{
    fprintf(out, "replayed %" PRIu64 " requests of %s (%" PRIu64 " lines: %" PRIu64 " not sent to the limiter, %"
            PRIu64 " skipped)\n", rep->requests, log_path, rep->lines, rep->not_checked, rep->skipped);
    if (rep->no_plan > 0)
        fprintf(out, "not replayed: %" PRIu64 " requests whose user and plan are no longer in the catalog\n",
                rep->no_plan);
    fprintf(out, "against: %s\n", against);
    fprintf(out, "would reject %" PRIu64 " of %" PRIu64 " requests (%.1f%%), from %" PRIu64 " of %" PRIu64
            " users\n", rep->rejected, rep->requests, percent(rep->rejected, rep->requests), rep->users_rejected,
            rep->users);
    fprintf(out, "the proxy rejected %" PRIu64 ": %" PRIu64 " would be newly rejected, %" PRIu64
            " no longer\n", rep->logged_rejected, rep->newly_rejected, rep->no_longer_rejected);
    if (rep->n_top > 0) {
        int width = 4;
        for (size_t i = 0; i < rep->n_top; i++) {
            int w = (int)strlen(rep->top[i].user) + (rep->top[i].client ? (int)strlen(rep->top[i].client) + 1 : 0);
            if (w > width)
                width = w;
        }
        fprintf(out, "top users by rejections:\n  %-*s  %8s  %8s\n", width, "USER", "REJECTED", "REQUESTS");
        for (size_t i = 0; i < rep->n_top; i++) {
            const struct simulate_user *u = &rep->top[i];
            char name[512];
            snprintf(name, sizeof(name), "%s%s%s", u->user, u->client ? " " : "", u->client ? u->client : "");
            fprintf(out, "  %-*s  %8" PRIu64 "  %8" PRIu64 "\n", width, name, u->rejected, u->requests);
        }
        fprintf(out, "rejected lines:");
        for (size_t i = 0; i < rep->n_rejected_lines && i < SHOWN_LINES; i++)
            fprintf(out, " %" PRIu64, rep->rejected_lines[i]);
        if (rep->n_rejected_lines > SHOWN_LINES)
            fprintf(out, " ... (%zu more; --json lists all)", rep->n_rejected_lines - SHOWN_LINES);
        fputc('\n', out);
    }
    return ferror(out) ? -EIO : 0;
}
