#include "proxy/admin.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "proxy/metrics.h"
#include "proxy/netaddr.h"
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

static bool store_ok(const struct admin_sources *s)
{
    if (!s->store_is_remote)
        return true;
    for (size_t i = 0; i < s->n_workers; i++)
        if (limiter_available(s->limiters[i]))
            return true;
    return false;
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
        bool store = store_ok(&a->sources);
        bool plans = snapshot_watch_healthy(a->sources.catalog);
        char body[128];
        snprintf(body, sizeof(body), "{\"status\":\"%s\",\"store\":\"%s\",\"plans\":\"%s\"}",
                 store && plans ? "ok" : "unavailable", store ? "ok" : "unreachable", plans ? "ok" : "unreachable");
        return answer(conn, store && plans ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, json, body,
                      MHD_RESPMEM_MUST_COPY);
    }
    if (strcmp(url, "/metrics") == 0) {
        char *text = metrics_render(a->sources.metrics, a->sources.n_workers);
        if (text == NULL)
            return MHD_NO;
        return answer(conn, MHD_HTTP_OK, "text/plain; version=0.0.4", text, MHD_RESPMEM_MUST_FREE);
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
