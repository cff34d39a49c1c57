/* The admin listener (admin.h). It owns struct admin: a libmicrohttpd daemon on its own
 * thread, and the two on_store_error modes, atomics a reload may write from any thread. The
 * workers' limiters and metrics and the catalog watch are only read here, never written. An
 * answer's node views and body are made and freed within the call; a name or reason from
 * the store is escaped. */
#include "proxy/admin.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "proxy/health.h"
#include "proxy/metrics.h"
#include "proxy/netaddr.h"
#include "proxy/problem.h"
#include "proxy/text.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"

#define REASON_MAX 256          /* a store's failure, as limiter_health says it */

struct admin {
    struct MHD_Daemon *daemon;
    struct admin_sources sources;
    _Atomic int rate_on_store_error;          /* enum limiter_store_error; a reload changes them */
    _Atomic int concurrency_on_store_error;
};

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                              enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, mode);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result answer_problem(struct MHD_Connection *conn, unsigned status, const char *error_code)
{
    char body[PROBLEM_BODY_MAX];
    if (problem_body(body, sizeof(body), status, error_code, NULL) < 0)
        return MHD_NO;
    return answer(conn, status, PROBLEM_CONTENT_TYPE, body, MHD_RESPMEM_MUST_COPY);
}

/* The store as the workers meet it: ERROR when one's store answers with errors, else OK
 * when one's answers, else UNREACHABLE; the reason (a failing worker's) in reason. */
static enum health_store store_state(const struct admin_sources *s, char *reason, size_t reason_len)
{
    reason[0] = '\0';
    if (!s->store_is_remote)
        return HEALTH_STORE_OK;
    bool up = false;
    for (size_t i = 0; i < s->n_workers; i++) {
        char why[REASON_MAX];
        enum limiter_health health = limiter_health(s->limiters[i], why, sizeof(why));
        if (health == LIMITER_HEALTH_ERROR) {
            snprintf(reason, reason_len, "%s", why);
            return HEALTH_STORE_ERROR;
        }
        if (health == LIMITER_HEALTH_UNREACHABLE && reason[0] == '\0')
            snprintf(reason, reason_len, "%s", why);
        up = up || limiter_available(s->limiters[i]);
    }
    if (up)
        reason[0] = '\0';
    return up ? HEALTH_STORE_OK : HEALTH_STORE_UNREACHABLE;
}

/* ---- the nodes of a store made of several (Redis Cluster masters) ---- */

#define NODES_MAX 1024          /* a cluster's masters: Redis' own advice stays under 1000 */
#define NODE_NAME_MAX 272       /* "host:port" */

struct node_view {
    char name[NODE_NAME_MAX];
    bool up;                    /* some worker's connection answers */
    uint64_t errors;            /* all workers' */
};

struct node_views {
    struct node_view *v;
    size_t n;
    bool failed;
};

static void collect_node(void *arg, const struct limiter_node_info *info)
{
    struct node_views *views = arg;
    for (size_t i = 0; i < views->n; i++) {
        if (strcmp(views->v[i].name, info->name) == 0) {
            views->v[i].up = views->v[i].up || info->up;
            views->v[i].errors += info->errors;
            return;
        }
    }
    if (views->n >= NODES_MAX) {
        views->failed = true;
        return;
    }
    struct node_view *v = &views->v[views->n++];
    snprintf(v->name, sizeof(v->name), "%s", info->name);
    v->up = info->up;
    v->errors = info->errors;
}

static void skip_node(void *arg, const struct limiter_node_info *info)
{
}

/* Every worker's nodes merged by name; views.v NULL when there are none (or no memory). */
static struct node_views gather_nodes(const struct admin_sources *s)
{
    struct node_views views = {0};
    if (!s->store_is_remote || s->n_workers == 0 || limiter_nodes(s->limiters[0], skip_node, NULL) == 0)
        return views;   /* one Redis (or memory): no nodes, nothing allocated */
    views.v = calloc(NODES_MAX, sizeof(*views.v));
    if (views.v == NULL)
        return views;
    for (size_t i = 0; i < s->n_workers && s->store_is_remote; i++)
        limiter_nodes(s->limiters[i], collect_node, &views);
    if (views.n == 0) {
        free(views.v);
        views.v = NULL;
    }
    return views;
}

/* A node name inside a JSON string or a Prometheus label value: '\\' and '"' escaped, control
 * bytes as '?' (a name comes from CLUSTER SLOTS, the cluster's word). */
static void quoted_name(char *out, size_t outlen, const char *name)
{
    size_t o = 0;
    for (const char *p = name; *p != '\0' && o + 3 < outlen; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\\' || c == '"')
            out[o++] = '\\';
        out[o++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    out[o] = '\0';
}

/* Per node of a Redis Cluster: its failed checks and whether it answers. */
static void node_metrics(struct text *t, const struct node_views *nodes)
{
    text_printf(t, "# HELP tierproxy_store_node_errors_total Checks a Redis Cluster master could not answer "
                "(down, timed out), by node.\n# TYPE tierproxy_store_node_errors_total counter\n");
    for (size_t i = 0; i < nodes->n; i++) {
        char name[2 * NODE_NAME_MAX];
        quoted_name(name, sizeof(name), nodes->v[i].name);
        text_printf(t, "tierproxy_store_node_errors_total{node=\"%s\"} %llu\n", name,
                    (unsigned long long)nodes->v[i].errors);
    }
    text_printf(t, "# HELP tierproxy_store_node_up 1 while this proxy's connection to a Redis Cluster master "
                "answers.\n# TYPE tierproxy_store_node_up gauge\n");
    for (size_t i = 0; i < nodes->n; i++) {
        char name[2 * NODE_NAME_MAX];
        quoted_name(name, sizeof(name), nodes->v[i].name);
        text_printf(t, "tierproxy_store_node_up{node=\"%s\"} %d\n", name, nodes->v[i].up ? 1 : 0);
    }
}

/* The catalog served: its fleet version, and the published versions refused. */
static void catalog_metrics(struct text *t, const struct snapshot_watch *catalog)
{
    int64_t version = snapshot_watch_catalog_version(catalog);
    text_printf(t, "# HELP tierproxy_catalog_version The fleet's version of the catalog this proxy serves (0: never "
                "published or pulled; -1: none).\n# TYPE tierproxy_catalog_version gauge\n"
                "tierproxy_catalog_version %lld\n", (long long)version);
    text_printf(t, "# HELP tierproxy_catalog_refused_total Published catalogs this proxy refused (it kept what it "
                "served).\n# TYPE tierproxy_catalog_refused_total counter\ntierproxy_catalog_refused_total %llu\n",
                (unsigned long long)snapshot_watch_catalog_refused(catalog));
}

/* The store's part of the health: a Redis Cluster is ok with every master answering,
 * partial with some (the other masters' users are served), unreachable with none. */
static enum health_store cluster_state(enum health_store store, const struct node_views *nodes)
{
    if (nodes->v == NULL || store == HEALTH_STORE_ERROR)
        return store;
    size_t up = 0;
    for (size_t i = 0; i < nodes->n; i++)
        up += nodes->v[i].up;
    return up == nodes->n ? HEALTH_STORE_OK : up > 0 ? HEALTH_STORE_PARTIAL : HEALTH_STORE_UNREACHABLE;
}

static enum health_plans plans_state(const struct snapshot_watch *catalog)
{
    if (snapshot_watch_catalog_version(catalog) < 0)
        return HEALTH_PLANS_MISSING;
    return snapshot_watch_healthy(catalog) ? HEALTH_PLANS_OK : HEALTH_PLANS_UNREACHABLE;
}

/* {"status":..,"store":..,"plans":..,"catalog_version":N, and while the store fails
 * "store_error":reason, "concurrency":mode; a cluster's "nodes"} */
static void health_body(struct text *body, const struct health_verdict *v, int64_t catalog_version,
                        const char *reason, const struct node_views *nodes)
{
    text_printf(body, "{\"status\":\"%s\",\"store\":\"%s\",\"plans\":\"%s\"", v->status, v->store, v->plans);
    if (catalog_version >= 0)
        text_printf(body, ",\"catalog_version\":%lld", (long long)catalog_version);
    if (v->concurrency != NULL)
        text_printf(body, ",\"concurrency\":\"%s\"", v->concurrency);
    if (reason[0] != '\0') {
        char quoted[2 * REASON_MAX];
        quoted_name(quoted, sizeof(quoted), reason);
        text_printf(body, ",\"store_error\":\"%s\"", quoted);
    }
    if (nodes->v != NULL) {
        text_printf(body, ",\"nodes\":{");
        for (size_t i = 0; i < nodes->n; i++) {
            char name[2 * NODE_NAME_MAX];
            quoted_name(name, sizeof(name), nodes->v[i].name);
            text_printf(body, "%s\"%s\":\"%s\"", i ? "," : "", name, nodes->v[i].up ? "ok" : "unreachable");
        }
        text_printf(body, "}");
    }
    text_printf(body, "}");
}

static enum MHD_Result answer_health(struct admin *a, struct MHD_Connection *conn)
{
    char reason[REASON_MAX];
    enum health_store store = store_state(&a->sources, reason, sizeof(reason));
    struct node_views nodes = gather_nodes(&a->sources);
    struct health_input in = {
        .store = cluster_state(store, &nodes),
        .plans = plans_state(a->sources.catalog),
        .rate = (enum limiter_store_error)atomic_load(&a->rate_on_store_error),
        .concurrency = (enum limiter_store_error)atomic_load(&a->concurrency_on_store_error),
    };
    if (in.store == HEALTH_STORE_OK || in.store == HEALTH_STORE_PARTIAL)
        reason[0] = '\0';
    struct health_verdict v = health_decide(&in);
    struct text body = {0};
    health_body(&body, &v, snapshot_watch_catalog_version(a->sources.catalog), reason, &nodes);
    free(nodes.v);
    if (body.failed) {
        free(body.data);
        return MHD_NO;
    }
    return answer(conn, v.http_status, "application/json", body.data, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    struct admin *a = cls;
    if (*req_cls == NULL) {
        *req_cls = a; /* answer on the second call, once the head is complete */
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer_problem(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed");
    if (strcmp(url, "/health") == 0)
        return answer_health(a, conn);
    if (strcmp(url, "/metrics") == 0) {
        char *rendered = metrics_render(a->sources.metrics, a->sources.n_workers);
        if (rendered == NULL)
            return MHD_NO;
        struct node_views nodes = gather_nodes(&a->sources);
        struct text t = {0};
        text_printf(&t, "%s", rendered);
        free(rendered);
        catalog_metrics(&t, a->sources.catalog);
        if (nodes.v != NULL)
            node_metrics(&t, &nodes);
        free(nodes.v);
        if (t.failed) {
            free(t.data);
            return MHD_NO;
        }
        return answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4", t.data, MHD_RESPMEM_MUST_FREE);
    }
    return answer_problem(conn, MHD_HTTP_NOT_FOUND, "not_found");
}
int admin_start(const char *host, uint16_t port, const struct admin_sources *sources, struct admin **padmin,
                char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
    if (sockaddr_from_ip_port(host, port, &ss) < 0) {
        snprintf(err, errlen, "[admin] listen: \"%s\" is not an IP address", host);
        return -EINVAL;
    }
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct admin *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -ENOMEM;
    a->sources = *sources;
    atomic_init(&a->rate_on_store_error, (int)sources->rate_on_store_error);
    atomic_init(&a->concurrency_on_store_error, (int)sources->concurrency_on_store_error);
    a->daemon = MHD_start_daemon(flags, 0, NULL, NULL, handle, a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)64, MHD_OPTION_END);
    if (a->daemon == NULL) {
        snprintf(err, errlen, "[admin] cannot listen on %s:%u", host, (unsigned)port);
        free(a);
        return -EADDRINUSE;
    }
    *padmin = a;
    return 0;
}

void admin_set_store_error_modes(struct admin *admin, enum limiter_store_error rate,
                                 enum limiter_store_error concurrency)
{
    if (admin == NULL)
        return;
    atomic_store(&admin->rate_on_store_error, (int)rate);
    atomic_store(&admin->concurrency_on_store_error, (int)concurrency);
}

void admin_stop(struct admin *admin)
{
    if (admin == NULL)
        return;
    MHD_stop_daemon(admin->daemon);
    free(admin);
}
