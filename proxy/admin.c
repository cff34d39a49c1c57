#include "proxy/admin.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "proxy/metrics.h"
#include "proxy/netaddr.h"
#include "proxy/text.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"

struct admin {
    struct MHD_Daemon *daemon;
    struct admin_sources sources;
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

/* The store as the workers meet it: "error" when one's store answers with errors (the
 * reason in reason), else "ok" when one's answers, else "unreachable". */
static const char *store_state(const struct admin_sources *s, char *reason, size_t reason_len)
{
    reason[0] = '\0';
    if (!s->store_is_remote)
        return "ok";
    bool up = false;
    for (size_t i = 0; i < s->n_workers; i++) {
        char why[256];
        if (limiter_health(s->limiters[i], why, sizeof(why)) == LIMITER_HEALTH_ERROR) {
            snprintf(reason, reason_len, "%s", why);
            return "error";
        }
        up = up || limiter_available(s->limiters[i]);
    }
    return up ? "ok" : "unreachable";
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
    static const char json[] = "application/json";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, json, "{\"error_code\":\"method_not_allowed\"}",
                      MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/health") == 0) {
        char reason[256];
        const char *store_word = store_state(&a->sources, reason, sizeof(reason));
        bool store = strcmp(store_word, "ok") == 0;
        bool plans = snapshot_watch_healthy(a->sources.catalog);
        struct node_views nodes = gather_nodes(&a->sources);
        if (nodes.v != NULL && reason[0] == '\0') {
            /* a cluster: ok with every master answering, degraded (still 200: the other
               masters' users are served) with some, unreachable with none */
            size_t up = 0;
            for (size_t i = 0; i < nodes.n; i++)
                up += nodes.v[i].up;
            store = up > 0;
            store_word = up == nodes.n ? "ok" : up > 0 ? "degraded" : "unreachable";
        }
        struct text body = {0};
        int64_t catalog_version = snapshot_watch_catalog_version(a->sources.catalog);
        text_printf(&body, "{\"status\":\"%s\",\"store\":\"%s\",\"plans\":\"%s\"",
                 store && plans ? "ok" : "unavailable", store_word,
                 plans ? "ok" : catalog_version < 0 ? "missing" : "unreachable");
        if (catalog_version >= 0)
            text_printf(&body, ",\"catalog_version\":%lld", (long long)catalog_version);
        if (reason[0] != '\0') {
            char quoted[2 * sizeof(reason)];
            quoted_name(quoted, sizeof(quoted), reason);
            text_printf(&body, ",\"store_error\":\"%s\"", quoted);
        }
        if (nodes.v != NULL) {
            text_printf(&body, ",\"nodes\":{");
            for (size_t i = 0; i < nodes.n; i++) {
                char name[2 * NODE_NAME_MAX];
                quoted_name(name, sizeof(name), nodes.v[i].name);
                text_printf(&body, "%s\"%s\":\"%s\"", i ? "," : "", name, nodes.v[i].up ? "ok" : "unreachable");
            }
            text_printf(&body, "}");
        }
        text_printf(&body, "}");
        free(nodes.v);
        if (body.failed) {
            free(body.data);
            return MHD_NO;
        }
        return answer(conn, store && plans ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, json, body.data,
                      MHD_RESPMEM_MUST_FREE);
    }
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
    return answer(conn, MHD_HTTP_NOT_FOUND, json, "{\"error_code\":\"not_found\"}", MHD_RESPMEM_PERSISTENT);
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

void admin_stop(struct admin *admin)
{
    if (admin == NULL)
        return;
    MHD_stop_daemon(admin->daemon);
    free(admin);
}
