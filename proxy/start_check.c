/* What a start and `tierproxy --check` check. See start_check.h. */
#include "proxy/start_check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>

#include "proxy/access_log.h"
#include "proxy/catalog_start.h"
#include "proxy/config.h"
#include "proxy/log.h"
#include "proxy/netaddr.h"
#include "proxy/upstream_tls.h"
#include "store/cluster/cluster_probe.h"
#include "store/limiter.h"
#include "store/redis/redis_probe.h"
#include "tiers/snapshot.h"

/* How long --check waits for Redis (each seed node of a cluster) and for each upstream. */
#define PROBE_TIMEOUT_MS 2000

static const char *plural(size_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* One line about the value of [section] key, named after where it came from. */
static void say_at(enum log_level level, const struct proxy_config *cfg, const char *section, const char *key,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void say_at(enum log_level level, const struct proxy_config *cfg, const char *section, const char *key,
                   const char *fmt, ...)
{
    char origin[1200], what[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    log_where(level, config_origin(cfg, section, key, origin, sizeof(origin)), "%s", what);
}

/* "127.0.0.1:8080" or "[::1]:8080". */
static const char *address_text(const struct sockaddr_storage *ss, char *buf, size_t buflen)
{
    char host[INET6_ADDRSTRLEN];
    sockaddr_to_text((const struct sockaddr *)ss, host, sizeof(host));
    bool v6 = ss->ss_family == AF_INET6;
    in_port_t port = v6 ? ((const struct sockaddr_in6 *)ss)->sin6_port : ((const struct sockaddr_in *)ss)->sin_port;
    snprintf(buf, buflen, v6 ? "[%s]:%u" : "%s:%u", host, (unsigned)ntohs(port));
    return buf;
}

/* Binds a socket to ss for a moment, as a start would (without SO_REUSEPORT, so another
 * process listening there is seen). Returns 0 or -errno. */
static int try_bind(const struct sockaddr_storage *ss)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int on = 1;
    socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (ss->ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    int rc = bind(fd, (const struct sockaddr *)ss, len) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* [proxy] listen or [admin] listen (host NULL: off): resolved into *ss; with probe, bound
 * for a moment. Returns 0 or 1. */
static int check_listen(const struct proxy_config *cfg, const char *section, const char *host, uint16_t port,
                        struct sockaddr_storage *ss, bool probe)
{
    char why[256], text[80];
    if (host == NULL)
        return 0;
    if (sockaddr_resolve(host, port, ss, why, sizeof(why)) != 0) {
        say_at(LOG_LEVEL_ERROR, cfg, section, "listen", "cannot resolve \"%s\": %s", host, why);
        return 1;
    }
    address_text(ss, text, sizeof(text));
    struct sockaddr_storage literal;
    if (sockaddr_from_ip_port(host, port, &literal) != 0)
        say_at(LOG_LEVEL_DEBUG, cfg, section, "listen", "%s resolves to %s", host, text);
    int rc = probe ? try_bind(ss) : 0;
    if (rc < 0)
        say_at(LOG_LEVEL_WARN, cfg, section, "listen", "cannot listen on %s: %s (a start would fail while it lasts)",
               text, strerror(-rc));
    return 0;
}

/* What --check says of the store's answer (a probe's return and report): a store it cannot
 * reach is a warning (a start survives it: on_store_error decides until it answers), one
 * that refuses the login or is not what the configuration says is an error. Returns 0 or 1. */
static int store_probe_said(const struct proxy_config *cfg, int probed, const char *report)
{
    if (probed == 0) {
        say_at(LOG_LEVEL_INFO, cfg, "limits", "redis", "%s", report);
        return 0;
    }
    if (probed == -EHOSTUNREACH) {
        say_at(LOG_LEVEL_WARN, cfg, "limits", "redis", "%s (until it answers, requests are decided by on_store_error)",
               report);
        return 0;
    }
    say_at(LOG_LEVEL_ERROR, cfg, "limits", "redis", "%s", report);
    return 1;
}

/* [limits] redis as the store will read it: one URL, or in cluster mode the seed list;
 * with probe (--check), the store asked. Returns 0 or 1. */
static int check_redis(const struct proxy_config *cfg, bool probe)
{
    char err[1200], url[96];
    if (cfg->store != STORE_REDIS)
        return 0;
    config_quote_url(cfg->redis_url, url, sizeof(url));
    bool cluster = cfg->redis_mode == REDIS_MODE_CLUSTER;
    int bad = cluster ? limiter_redis_cluster_seeds_check(cfg->redis_url, err, sizeof(err))
                      : limiter_redis_url_check(cfg->redis_url, err, sizeof(err));
    if (bad != 0) {
        say_at(LOG_LEVEL_ERROR, cfg, "limits", "redis", "%s, got \"%s\"%s", err, url,
               !cluster && strchr(cfg->redis_url, ',') != NULL ? " (several seed URLs need redis_mode = cluster)" : "");
        return 1;
    }
    if (probe) {
        int probed = cluster ? cluster_probe(cfg->redis_url, cfg->redis_ca_file, PROBE_TIMEOUT_MS, err, sizeof(err))
                             : redis_probe(cfg->redis_url, cfg->redis_ca_file, PROBE_TIMEOUT_MS, err, sizeof(err));
        if (store_probe_said(cfg, probed, err) != 0)
            return 1;
    }
    if (cluster && limiter_redis_cluster_prefix_check(cfg->key_prefix, err, sizeof(err)) != 0) {
        say_at(LOG_LEVEL_ERROR, cfg, "limits", "key_prefix", "%s, got \"%s\"", err, cfg->key_prefix);
        return 1;
    }
    return 0;
}

/* Connects to the upstream (and makes the TLS handshake of an https one) as a request
 * would; one it cannot reach is a warning. */
static void probe_upstream(const struct proxy_config *cfg, const char *upstream)
{
    char errbuf[CURL_ERROR_SIZE] = "", url[96];
    CURL *e = curl_easy_init();
    if (e == NULL)
        return;
    curl_easy_setopt(e, CURLOPT_URL, upstream);
    curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(cfg->connect_timeout_ms < PROBE_TIMEOUT_MS ? cfg->connect_timeout_ms : PROBE_TIMEOUT_MS));
    if (upstream_is_https(upstream))
        upstream_tls_curl_options(e, cfg);
    CURLcode rc = curl_easy_perform(e);
    long os_errno = 0;
    curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os_errno);
    if (rc != CURLE_OK)
        say_at(LOG_LEVEL_WARN, cfg, "proxy", "upstream", "cannot reach %s: %s%s%s%s (requests to it get 502 while "
               "it lasts)", config_quote_url(upstream, url, sizeof(url)), errbuf[0] ? errbuf : curl_easy_strerror(rc),
               os_errno != 0 ? " (" : "", os_errno != 0 ? strerror((int)os_errno) : "", os_errno != 0 ? ")" : "");
    else
        say_at(LOG_LEVEL_DEBUG, cfg, "proxy", "upstream", "%s answers", config_quote_url(upstream, url, sizeof(url)));
    curl_easy_cleanup(e);
}

/* Each upstream URL as libcurl, which sends the requests, reads it; with probe, reached. */
static int check_upstreams(const struct proxy_config *cfg, bool probe)
{
    int rc = 0;
    char url[96];
    CURLU *u = curl_url();
    if (u == NULL) {
        log_say(LOG_LEVEL_ERROR, "out of memory");
        return 1;
    }
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        CURLUcode uc = curl_url_set(u, CURLUPART_URL, cfg->upstreams[i], 0);
        if (uc != CURLUE_OK) {
            say_at(LOG_LEVEL_ERROR, cfg, "proxy", "upstream", "\"%s\": %s",
                   config_quote_url(cfg->upstreams[i], url, sizeof(url)), curl_url_strerror(uc));
            rc = 1;
        } else if (probe) {
            probe_upstream(cfg, cfg->upstreams[i]);
        }
    }
    curl_url_cleanup(u);
    return rc;
}

/* The catalog and the plan the configuration names. Returns 0 or 1. */
static int check_catalog(const struct proxy_config *cfg, struct snapshot **psnap)
{
    char err[512];
    int loaded = snapshot_load(cfg->db, psnap, err, sizeof(err));
    if (loaded == -ENOENT && catalog_file_optional(cfg)) {
        log_say(LOG_LEVEL_INFO, "catalog %s does not exist yet: it comes from the fleet's Redis", cfg->db);
        return 0;
    }
    if (loaded < 0) {
        if (strstr(err, cfg->db) != NULL)
            say_at(LOG_LEVEL_ERROR, cfg, "plans", "db", "%s", err);
        else
            say_at(LOG_LEVEL_ERROR, cfg, "plans", "db", "catalog %s: %s", cfg->db, err);
        return 1;
    }
    if (cfg->anonymous_plan != NULL && snapshot_find_plan(*psnap, cfg->anonymous_plan) == NULL) {
        say_at(LOG_LEVEL_ERROR, cfg, "auth", "anonymous_plan", "no plan named \"%s\" in %s", cfg->anonymous_plan,
               cfg->db);
        return 1;
    }
    return 0;
}

static void say_ok(const struct proxy_config *cfg, const struct snapshot *snap)
{
    if (snap == NULL) {
        log_say(LOG_LEVEL_INFO, "configuration ok; catalog %s to come from the fleet's Redis", cfg->db);
    } else {
        size_t users = snapshot_user_count(snap), keys = snapshot_key_count(snap);
        log_say(LOG_LEVEL_INFO, "configuration ok; catalog %s has %zu %s and %zu %s", cfg->db, users,
                plural(users, "user", "users"), keys, plural(keys, "key", "keys"));
    }
    upstream_tls_warn_unverified(cfg);
}

int start_check(const struct proxy_config *cfg, bool probe, struct start_addresses *addrs, struct access_log **plog)
{
    char err[512];
    int rc = 0;
    struct snapshot *snap = NULL;
    struct access_log *log = NULL;

    rc |= check_listen(cfg, "proxy", cfg->listen_host, cfg->listen_port, &addrs->listen, probe);
    rc |= check_listen(cfg, "admin", cfg->admin_host, cfg->admin_port, &addrs->admin, probe);
    rc |= check_upstreams(cfg, probe);
    rc |= check_redis(cfg, probe);
    if (cfg->access_log != NULL && access_log_open(cfg->access_log, &log, err, sizeof(err)) < 0) {
        say_at(LOG_LEVEL_ERROR, cfg, "log", "access", "%s", err);
        rc = 1;
    }
    rc |= check_catalog(cfg, &snap);
    if (rc == 0)
        say_ok(cfg, snap);
    if (snap != NULL)
        snapshot_unref(snap);
    if (rc == 0 && plog != NULL)
        *plog = log;
    else
        access_log_close(log);
    return rc;
}
