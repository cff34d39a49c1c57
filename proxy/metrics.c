/* A worker's metrics (metrics.h): fixed tables of series per (plan, code, hit kind), with
 * "other" buckets once a table is full, so a metric never allocates on the request path.
 * The worker updates its own under a mutex that only the admin thread's scrape ever
 * contends; a scrape merges every worker's tables into one text. */
#include "proxy/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/text.h"

/* Distinct (plan, code) and (hit kind, plan) pairs kept per worker, which bounds the
 * memory and the scrape. Past it nothing is dropped: a pair not yet kept counts under
 * plan="_other" (no plan name starts with "_"), one series per code or hit kind, as a
 * Prometheus user expects a label's cardinality capped rather than counts lost. */
#define MAX_SERIES 512
#define PLAN_NAME_MAX (64 + 1)   /* CATALOG_NAME_MAX and the NUL */
#define OTHER_PLAN "_other"
#define MAX_CODE 999             /* a status code has three digits */

static const double bucket_bounds[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 };
#define N_BUCKETS (sizeof(bucket_bounds) / sizeof(bucket_bounds[0]))

/* The limit_type label of each enum limit_hit_kind. */
static const char *const hit_kind_labels[] = { "http", "concurrency", "ws_connection", "ws_message" };
#define N_HIT_KINDS 4
/* A request shed for the upstream's sake (upstream_max_inflight): kept in the hits table
 * under this kind, rendered as tierproxy_upstream_shed_total{plan}. */
#define SHED_KIND N_HIT_KINDS

struct histogram {
    uint64_t buckets[N_BUCKETS]; /* not cumulative; summed up when rendered */
    uint64_t count;
    int64_t sum_ns;
};

struct series {
    char plan[PLAN_NAME_MAX];
    unsigned code;               /* 0 for a limit-hit series */
    unsigned hit_kind;           /* an enum limit_hit_kind; 0 for a request series */
    uint64_t value;
};

struct metrics {
    pthread_mutex_t lock;        /* uncontended but for scrapes */
    struct series requests[MAX_SERIES];
    size_t n_requests;
    struct series hits[MAX_SERIES];
    size_t n_hits;
    uint64_t other_requests[MAX_CODE + 1];   /* by code: pairs past MAX_SERIES */
    uint64_t other_hits[N_HIT_KINDS];        /* by hit kind: pairs past MAX_SERIES */
    uint64_t other_sheds;                    /* sheds past MAX_SERIES */
    uint64_t store_errors;
    struct histogram store, upstream;
    int64_t connections, websockets;
};

struct metrics *metrics_create(void)
{
    struct metrics *m = calloc(1, sizeof(*m));
    if (m != NULL)
        pthread_mutex_init(&m->lock, NULL);
    return m;
}

void metrics_destroy(struct metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Counts one (plan, code, hit kind); returns false when the table is full and the pair new. */
static bool bump(struct series *s, size_t *pn, const char *plan, unsigned code, unsigned hit_kind)
{
    if (plan == NULL)
        plan = "";
    for (size_t i = 0; i < *pn; i++) {
        if (s[i].code == code && s[i].hit_kind == hit_kind && strcmp(s[i].plan, plan) == 0) {
            s[i].value++;
            return true;
        }
    }
    if (*pn == MAX_SERIES)
        return false;
    struct series *fresh = &s[(*pn)++];
    snprintf(fresh->plan, sizeof(fresh->plan), "%s", plan);
    fresh->code = code;
    fresh->hit_kind = hit_kind;
    fresh->value = 1;
    return true;
}

void metrics_count_request(struct metrics *m, const char *plan, unsigned code)
{
    pthread_mutex_lock(&m->lock);
    if (code > MAX_CODE)
        code = MAX_CODE;
    if (!bump(m->requests, &m->n_requests, plan, code, 0))
        m->other_requests[code]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_limit_hit(struct metrics *m, enum limit_hit_kind kind, const char *plan)
{
    pthread_mutex_lock(&m->lock);
    unsigned k = (unsigned)kind < N_HIT_KINDS ? (unsigned)kind : 0;
    if (!bump(m->hits, &m->n_hits, plan, 0, k))
        m->other_hits[k]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_shed(struct metrics *m, const char *plan)
{
    pthread_mutex_lock(&m->lock);
    if (!bump(m->hits, &m->n_hits, plan, 0, SHED_KIND))
        m->other_sheds++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count_store_error(struct metrics *m)
{
    pthread_mutex_lock(&m->lock);
    m->store_errors++;
    pthread_mutex_unlock(&m->lock);
}

static void observe(struct metrics *m, struct histogram *h, int64_t ns)
{
    double seconds = (double)ns / 1e9;
    pthread_mutex_lock(&m->lock);
    size_t i = 0;
    while (i < N_BUCKETS && seconds > bucket_bounds[i])
        i++;
    if (i < N_BUCKETS)
        h->buckets[i]++;
    h->count++;
    h->sum_ns += ns;
    pthread_mutex_unlock(&m->lock);
}

void metrics_observe_store(struct metrics *m, int64_t ns)
{
    observe(m, &m->store, ns);
}

void metrics_observe_upstream(struct metrics *m, int64_t ns)
{
    observe(m, &m->upstream, ns);
}

void metrics_add_connections(struct metrics *m, int delta)
{
    pthread_mutex_lock(&m->lock);
    m->connections += delta;
    pthread_mutex_unlock(&m->lock);
}

void metrics_add_websockets(struct metrics *m, int delta)
{
    pthread_mutex_lock(&m->lock);
    m->websockets += delta;
    pthread_mutex_unlock(&m->lock);
}

/* Plan names are catalog-checked, but a label value is escaped all the same. */
static void label_value(char *out, size_t outlen, const char *in)
{
    size_t o = 0;
    for (; *in != '\0' && o + 3 < outlen; in++) {
        if (*in == '"' || *in == '\\')
            out[o++] = '\\';
        if (*in == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
            continue;
        }
        out[o++] = *in;
    }
    out[o] = '\0';
}

/* Adds from[0, n) into `into`, which has room for every worker's series. */
static void merge(struct series *into, size_t *pn, const struct series *from, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < *pn && !(into[j].code == from[i].code && into[j].hit_kind == from[i].hit_kind &&
                            strcmp(into[j].plan, from[i].plan) == 0))
            j++;
        if (j == *pn) {
            into[(*pn)++] = from[i];
        } else {
            into[j].value += from[i].value;
        }
    }
}

static void render_histogram(struct text *t, const char *name, const char *help, const struct histogram *h)
{
    text_printf(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < N_BUCKETS; i++) {
        cumulative += h->buckets[i];
        text_printf(t, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_bounds[i], (unsigned long long)cumulative);
    }
    text_printf(t, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    text_printf(t, "%s_sum %.9f\n%s_count %llu\n", name, (double)h->sum_ns / 1e9, name, (unsigned long long)h->count);
}

/* Every worker's counts added up: the labelled series merged, the rest in sum. */
struct totals {
    struct metrics *sum;
    struct series *requests, *hits;
    size_t n_requests, n_hits;
};

/* Adds one worker's counts, read under its lock. */
static void add_worker(struct totals *to, struct metrics *m)
{
    struct metrics *sum = to->sum;
    pthread_mutex_lock(&m->lock);
    merge(to->requests, &to->n_requests, m->requests, m->n_requests);
    merge(to->hits, &to->n_hits, m->hits, m->n_hits);
    for (size_t c = 0; c <= MAX_CODE; c++)
        sum->other_requests[c] += m->other_requests[c];
    for (size_t k = 0; k < N_HIT_KINDS; k++)
        sum->other_hits[k] += m->other_hits[k];
    sum->other_sheds += m->other_sheds;
    sum->store_errors += m->store_errors;
    for (size_t b = 0; b < N_BUCKETS; b++) {
        sum->store.buckets[b] += m->store.buckets[b];
        sum->upstream.buckets[b] += m->upstream.buckets[b];
    }
    sum->store.count += m->store.count;
    sum->store.sum_ns += m->store.sum_ns;
    sum->upstream.count += m->upstream.count;
    sum->upstream.sum_ns += m->upstream.sum_ns;
    sum->connections += m->connections;
    sum->websockets += m->websockets;
    pthread_mutex_unlock(&m->lock);
}

static void render_requests(struct text *t, const struct totals *to)
{
    char plan[2 * PLAN_NAME_MAX];
    text_printf(t, "# HELP tierproxy_requests_total Requests answered, by plan and status code.\n"
                   "# TYPE tierproxy_requests_total counter\n");
    for (size_t i = 0; i < to->n_requests; i++) {
        label_value(plan, sizeof(plan), to->requests[i].plan);
        text_printf(t, "tierproxy_requests_total{plan=\"%s\",code=\"%u\"} %llu\n", plan, to->requests[i].code,
                    (unsigned long long)to->requests[i].value);
    }
    for (unsigned c = 0; c <= MAX_CODE; c++)
        if (to->sum->other_requests[c] > 0)
            text_printf(t, "tierproxy_requests_total{plan=\"" OTHER_PLAN "\",code=\"%u\"} %llu\n", c,
                        (unsigned long long)to->sum->other_requests[c]);
}

static void render_hits(struct text *t, const struct totals *to)
{
    char plan[2 * PLAN_NAME_MAX];
    text_printf(t, "# HELP tierproxy_rate_limit_hits_total Requests and connections refused by a limit.\n"
                   "# TYPE tierproxy_rate_limit_hits_total counter\n");
    for (size_t i = 0; i < to->n_hits; i++) {
        if (to->hits[i].hit_kind == SHED_KIND)
            continue;
        label_value(plan, sizeof(plan), to->hits[i].plan);
        unsigned kind = to->hits[i].hit_kind < N_HIT_KINDS ? to->hits[i].hit_kind : 0;
        text_printf(t, "tierproxy_rate_limit_hits_total{limit_type=\"%s\",plan=\"%s\"} %llu\n",
                    hit_kind_labels[kind], plan, (unsigned long long)to->hits[i].value);
    }
    for (unsigned k = 0; k < N_HIT_KINDS; k++)
        if (to->sum->other_hits[k] > 0)
            text_printf(t, "tierproxy_rate_limit_hits_total{limit_type=\"%s\",plan=\"" OTHER_PLAN "\"} %llu\n",
                        hit_kind_labels[k], (unsigned long long)to->sum->other_hits[k]);
}

/* Sheds are kept among the hits, under SHED_KIND, and rendered as their own family. */
static void render_sheds(struct text *t, const struct totals *to)
{
    char plan[2 * PLAN_NAME_MAX];
    text_printf(t, "# HELP tierproxy_upstream_shed_total Requests refused 503 upstream_saturated "
                   "(upstream_max_inflight), by plan.\n# TYPE tierproxy_upstream_shed_total counter\n");
    for (size_t i = 0; i < to->n_hits; i++) {
        if (to->hits[i].hit_kind != SHED_KIND)
            continue;
        label_value(plan, sizeof(plan), to->hits[i].plan);
        text_printf(t, "tierproxy_upstream_shed_total{plan=\"%s\"} %llu\n", plan,
                    (unsigned long long)to->hits[i].value);
    }
    if (to->sum->other_sheds > 0)
        text_printf(t, "tierproxy_upstream_shed_total{plan=\"" OTHER_PLAN "\"} %llu\n",
                    (unsigned long long)to->sum->other_sheds);
}

/* The families without a plan label: store errors, the two timings, the open counts. */
static void render_process(struct text *t, const struct metrics *sum)
{
    text_printf(t, "# HELP tierproxy_store_errors_total Limiter store calls that failed or found it down.\n"
                   "# TYPE tierproxy_store_errors_total counter\ntierproxy_store_errors_total %llu\n",
                (unsigned long long)sum->store_errors);
    render_histogram(t, "tierproxy_store_seconds", "Time for one limiter store check.", &sum->store);
    render_histogram(t, "tierproxy_upstream_seconds", "Time from forwarding to the upstream's response head.",
                     &sum->upstream);
    text_printf(t, "# HELP tierproxy_connections Open client connections.\n# TYPE tierproxy_connections gauge\n"
                   "tierproxy_connections %lld\n",
                (long long)sum->connections);
    text_printf(t, "# HELP tierproxy_websockets Open WebSocket tunnels.\n# TYPE tierproxy_websockets gauge\n"
                   "tierproxy_websockets %lld\n",
                (long long)sum->websockets);
}

char *metrics_render(struct metrics *const *all, size_t n)
{
    struct totals to = {
        .sum = metrics_create(),
        /* the union of the workers' series: up to MAX_SERIES from each */
        .requests = calloc(n * MAX_SERIES + 1, sizeof(*to.requests)),
        .hits = calloc(n * MAX_SERIES + 1, sizeof(*to.hits)),
    };
    struct text t = { 0 };
    if (to.sum == NULL || to.requests == NULL || to.hits == NULL) {
        t.failed = true;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        add_worker(&to, all[i]);
    render_requests(&t, &to);
    render_hits(&t, &to);
    render_sheds(&t, &to);
    render_process(&t, to.sum);
out:
    metrics_destroy(to.sum);
    free(to.requests);
    free(to.hits);
    if (t.failed) {
        free(t.data);
        return NULL;
    }
    return t.data;
}
