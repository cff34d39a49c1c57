/* tierproxy: the daemon. Loads the configuration and the catalog, starts one event-loop
 * worker per core on a shared port, and waits for signals. */
#include <errno.h>
#include <stdarg.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/rand.h>
#include <systemd/sd-daemon.h>
#include <event2/thread.h>

#include "proxy/access_log.h"
#include "proxy/admin.h"
#include "proxy/catalog_start.h"
#include "proxy/config.h"
#include "proxy/gate.h"
#include "proxy/log_throttle.h"
#include "proxy/store_log.h"
#include "proxy/netaddr.h"
#include "proxy/upstream_cap.h"
#include "proxy/upstream_tls.h"
#include "proxy/worker.h"
#include "store/clock.h"
#include "store/cluster_probe.h"
#include "store/redis_probe.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"

#define TIERPROXY_VERSION "0.1.0"

/* How long a user and limit stay quiet after a rejection warning, and how many pairs the
 * process remembers (SPEC: at most one line per user and limit per 10 s). */
#define REJECTION_WARNING_INTERVAL_MS 10000
#define REJECTION_WARNING_KEYS 8192

static const char *plural(size_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* One error found before the start, named after where its value came from. */
static void start_error(const struct proxy_config *cfg, const char *section, const char *key, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));
static void start_error(const struct proxy_config *cfg, const char *section, const char *key, const char *fmt,
                        ...)
{
    char origin[1200], what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "tierproxy: %s: %s\n", config_origin(cfg, section, key, origin, sizeof(origin)), what);
}

static int check_listen_address(const struct proxy_config *cfg, const char *section, const char *host)
{
    struct sockaddr_storage ss;
    if (host == NULL || sockaddr_from_ip_port(host, 1, &ss) == 0)
        return 0;
    start_error(cfg, section, "listen", "\"%s\" is not an IP address (such as 127.0.0.1 or [::1])", host);
    return 1;
}

/* How long --check waits for each seed node of a cluster (to connect, then per command). */
#define CLUSTER_PROBE_TIMEOUT_MS 2000

/* What --check says of the store's answer (a probe's return and report): a store it cannot
 * reach is a warning (a start survives it: on_store_error decides until it answers), one
 * that refuses the login or is not what the configuration says is an error. Returns 0 or 1. */
static int store_probe_said(const struct proxy_config *cfg, int probed, const char *report)
{
    if (probed == 0) {
        fprintf(stderr, "tierproxy: [limits] redis: %s\n", report);
        return 0;
    }
    if (probed == -EHOSTUNREACH) {
        fprintf(stderr, "tierproxy: warning: [limits] redis: %s (until it answers, requests are decided "
                        "by on_store_error)\n", report);
        return 0;
    }
    start_error(cfg, "limits", "redis", "%s", report);
    return 1;
}

/* [limits] redis as the store will read it: one URL, or in cluster mode the seed list;
 * with probe (--check), a cluster's state as its seeds tell it. */
static int check_redis(const struct proxy_config *cfg, bool probe)
{
    char err[1200];
    if (cfg->store != STORE_REDIS)
        return 0;
    if (cfg->redis_mode == REDIS_MODE_CLUSTER) {
        if (limiter_redis_cluster_seeds_check(cfg->redis_url, err, sizeof(err)) != 0) {
            start_error(cfg, "limits", "redis", "%s", err);
            return 1;
        }
        if (probe && store_probe_said(cfg, cluster_probe(cfg->redis_url, CLUSTER_PROBE_TIMEOUT_MS, err, sizeof(err)),
                                      err) != 0)
            return 1;
        if (limiter_redis_cluster_prefix_check(cfg->key_prefix, err, sizeof(err)) != 0) {
            start_error(cfg, "limits", "key_prefix", "%s", err);
            return 1;
        }
        return 0;
    }
    if (limiter_redis_url_check(cfg->redis_url, err, sizeof(err)) != 0) {
        start_error(cfg, "limits", "redis", "%s%s", err,
                    strchr(cfg->redis_url, ',') != NULL ? " (several seed URLs need redis_mode = cluster)" : "");
        return 1;
    }
    if (probe && store_probe_said(cfg, redis_probe(cfg->redis_url, CLUSTER_PROBE_TIMEOUT_MS, err, sizeof(err)), err) != 0)
        return 1;
    return 0;
}

/* Each upstream URL as libcurl, which sends the requests, reads it. */
static int check_upstreams(const struct proxy_config *cfg)
{
    int rc = 0;
    CURLU *u = curl_url();
    if (u == NULL) {
        fprintf(stderr, "tierproxy: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        CURLUcode uc = curl_url_set(u, CURLUPART_URL, cfg->upstreams[i], 0);
        if (uc != CURLUE_OK) {
            start_error(cfg, "proxy", "upstream", "\"%s\": %s", cfg->upstreams[i], curl_url_strerror(uc));
            rc = 1;
        }
    }
    curl_url_cleanup(u);
    return rc;
}

/* Everything a start checks before it listens; `tierproxy --check` runs the same. Reports
 * every error found on stderr, one line each, naming the file and line, flag or variable
 * the bad value came from. Opens the access log (creating the file, as the start would):
 * with plog the caller gets it, else it is closed again. Without plog (--check) it also
 * asks a Redis Cluster's seed nodes for the cluster's state. Returns 0 (with the
 * "configuration ok" line on stderr) or 1. */
static int validate_start(const struct proxy_config *cfg, struct access_log **plog)
{
    char err[512];
    int rc = 0;
    struct snapshot *snap = NULL;
    struct access_log *log = NULL;

    rc |= check_listen_address(cfg, "proxy", cfg->listen_host);
    rc |= check_listen_address(cfg, "admin", cfg->admin_host);
    rc |= check_upstreams(cfg);
    rc |= check_redis(cfg, plog == NULL);
    if (cfg->access_log != NULL && access_log_open(cfg->access_log, &log, err, sizeof(err)) < 0) {
        start_error(cfg, "log", "access", "%s", err);
        rc = 1;
    }
    int loaded = snapshot_load(cfg->db, &snap, err, sizeof(err));
    if (loaded == -ENOENT && catalog_file_optional(cfg)) {
        fprintf(stderr, "tierproxy: catalog %s does not exist yet: it comes from the fleet's Redis\n", cfg->db);
    } else if (loaded < 0) {
        if (strstr(err, cfg->db) != NULL)
            start_error(cfg, "plans", "db", "%s", err);
        else
            start_error(cfg, "plans", "db", "catalog %s: %s", cfg->db, err);
        rc = 1;
    } else if (cfg->anonymous_plan != NULL && snapshot_find_plan(snap, cfg->anonymous_plan) == NULL) {
        start_error(cfg, "auth", "anonymous_plan", "no plan named \"%s\" in %s", cfg->anonymous_plan, cfg->db);
        rc = 1;
    }
    if (rc == 0 && snap == NULL) {
        fprintf(stderr, "tierproxy: configuration ok; catalog %s to come from the fleet's Redis\n", cfg->db);
        upstream_tls_warn_unverified(cfg);
    } else if (rc == 0) {
        size_t users = snapshot_user_count(snap), keys = snapshot_key_count(snap);
        fprintf(stderr, "tierproxy: configuration ok; catalog %s has %zu %s and %zu %s\n", cfg->db, users,
                plural(users, "user", "users"), keys, plural(keys, "key", "keys"));
        upstream_tls_warn_unverified(cfg);
    }
    if (snap != NULL)
        snapshot_unref(snap);
    if (rc == 0 && plog != NULL)
        *plog = log;
    else
        access_log_close(log);
    return rc;
}

/* Reads the configuration file again. Returns the new configuration, or NULL (with a log
 * line saying why) when it is bad: the running one is kept. */
static struct proxy_config *reload(struct proxy_config *running, int argc, char **argv, char **envp)
{
    if (running->config_path == NULL) {
        fprintf(stderr, "tierproxy: SIGHUP: no configuration file (-c) to reload\n");
        return NULL;
    }
    struct proxy_config *fresh = calloc(1, sizeof(*fresh));
    if (fresh == NULL)
        return NULL;
    char err[1024];
    if (config_reload(running, argc, argv, envp, fresh, err, sizeof(err)) != 0) {
        fprintf(stderr, "tierproxy: SIGHUP: keeping the running configuration: %s\n", err);
        free(fresh);
        return NULL;
    }
    if (fresh->file_settings == 0) {
        /* a file caught truncated (an editor, a deploy half done) would put every default
           back: the upstream, exempt paths, the key header */
        fprintf(stderr, "tierproxy: SIGHUP: keeping the running configuration: %s sets nothing "
                "(it is empty, or holds only comments and [section] lines)\n", running->config_path);
        config_free(fresh);
        free(fresh);
        return NULL;
    }
    char changed[512];
    config_keep_restart_only(running, fresh, changed, sizeof(changed));
    if (changed[0] != '\0')
        fprintf(stderr, "tierproxy: SIGHUP: these take effect at restart, not now: %s\n", changed);
    if (running->upstream_tls_verify)
        upstream_tls_warn_unverified(fresh); /* said once, when verification goes off */
    return fresh;
}

/* A random name for this process's leases, so that no two proxies share one. */
static void make_instance_id(char *buf, size_t buflen)
{
    unsigned char raw[8];
    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        memcpy(raw, &ts.tv_nsec, sizeof(raw) < sizeof(ts.tv_nsec) ? sizeof(raw) : sizeof(ts.tv_nsec));
    }
    for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < buflen; i++)
        snprintf(buf + 2 * i, 3, "%02x", raw[i]);
}

/* Every connection is a descriptor, two with a WebSocket: use all the system allows, as
 * nginx's worker_rlimit_nofile would. */
static void raise_nofile_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

/* Every request allocates and frees the same few blocks. glibc would give a worker arena's
 * free top back to the kernel (madvise) after a burst and fault it in again on the next
 * request; a fixed trim threshold keeps the pages, as a server's steady state wants. */
static void tune_malloc(void)
{
    mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
}

static int serve(struct proxy_config *cfg, int argc, char **argv, char **envp)
{
    struct proxy_config *live = cfg;
    char err[512];
    int status = 1;
    struct snapshot_watch *catalog = NULL;
    struct memory_store *memory = NULL;
    struct worker *workers = NULL;
    struct access_log *access_log = NULL;
    struct log_throttle *rejection_warnings = NULL;
    struct store_log *store_log = NULL;
    struct admin *admin = NULL;
    struct limiter **limiters = NULL;
    static struct upstream_cap upstream_cap;   /* every worker's; outlives them */
    struct metrics **metrics = NULL;
    int started = 0;

    /* Signals go to the main thread only, which waits for them with sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    raise_nofile_limit();
    tune_malloc();
    if (validate_start(cfg, &access_log) != 0)
        goto out;
    if (catalog_start(cfg, &catalog, err, sizeof(err)) < 0) {
        fprintf(stderr, "tierproxy: catalog %s: %s\n", cfg->db, err);
        goto out;
    }
    upstream_cap_set(&upstream_cap, cfg->upstream_max_inflight);
    /* with redis too: the local fallback (on_store_error = local) counts in it */
    if ((memory = memory_store_create()) == NULL) {
        fprintf(stderr, "tierproxy: out of memory\n");
        goto out;
    }
    memory_store_set_max_subjects(memory, (size_t)cfg->memory_max_subjects);
    memory_store_set_evict_first(memory, GATE_ANONYMOUS_PREFIX);
    rejection_warnings = log_throttle_create(REJECTION_WARNING_KEYS, REJECTION_WARNING_INTERVAL_MS);
    store_log = store_log_create((size_t)cfg->workers,
                                 strcmp(cfg->log_level, "info") == 0 || strcmp(cfg->log_level, "debug") == 0);
    if (rejection_warnings == NULL || store_log == NULL) {
        fprintf(stderr, "tierproxy: out of memory\n");
        goto out;
    }
    struct proxy_shared shared = {
        .instance_id = "",
        .cfg = cfg,
        .catalog = catalog,
        .memory = memory,
        .upstream_cap = &upstream_cap,
        .access_log = access_log,
        .rejection_warnings = rejection_warnings,
        .store_log = store_log,
        .log_warnings = strcmp(cfg->log_level, "error") != 0,
    };
    make_instance_id(shared.instance_id, sizeof(shared.instance_id));
    workers = calloc((size_t)cfg->workers, sizeof(*workers));
    limiters = calloc((size_t)cfg->workers, sizeof(*limiters));
    metrics = calloc((size_t)cfg->workers, sizeof(*metrics));
    if (workers == NULL || limiters == NULL || metrics == NULL)
        goto out;
    for (; started < cfg->workers; started++) {
        int rc = worker_init(&workers[started], started, &shared, err, sizeof(err));
        if (rc == 0 && (rc = worker_start(&workers[started])) < 0)
            snprintf(err, sizeof(err), "cannot start worker %d: %s", started, strerror(-rc));
        if (rc < 0) {
            fprintf(stderr, "tierproxy: %s\n", err);
            worker_join_and_destroy(&workers[started]);
            goto stop;
        }
        limiters[started] = workers[started].limiter;
        metrics[started] = workers[started].metrics;
    }
    if (cfg->admin_host != NULL) {
        struct admin_sources sources = {
            .catalog = catalog,
            .limiters = limiters,
            .metrics = metrics,
            .n_workers = (size_t)cfg->workers,
            .store_is_remote = cfg->store == STORE_REDIS,
            .rate_on_store_error = cfg->rate_on_store_error,
            .concurrency_on_store_error = cfg->concurrency_on_store_error,
        };
        if (admin_start(cfg->admin_host, cfg->admin_port, &sources, &admin, err, sizeof(err)) < 0) {
            fprintf(stderr, "tierproxy: %s\n", err);
            goto stop;
        }
    }
    /* Type=notify: ready once every worker listens (a no-op outside systemd). */
    sd_notify(0, "READY=1");
    fprintf(stderr, "tierproxy %s: listening on %s:%u, %d workers, %s store, upstream %s%s\n", TIERPROXY_VERSION,
            cfg->listen_host, (unsigned)cfg->listen_port, cfg->workers, cfg->store == STORE_REDIS ? "redis" : "memory",
            cfg->upstreams[0], cfg->n_upstreams > 1 ? " (and others)" : "");

    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGUSR1) {
            /* logrotate: the file was renamed; write to a new one at the configured path */
            int rc = access_log_reopen(access_log, err, sizeof(err));
            if (rc < 0)
                fprintf(stderr, "tierproxy: SIGUSR1: %s\n", err);
            else if (rc == 0)
                fprintf(stderr, "tierproxy: SIGUSR1: access log reopened: %s\n", live->access_log);
            else
                fprintf(stderr, "tierproxy: SIGUSR1: the access log is %s, nothing to reopen\n",
                        access_log == NULL ? "off" : "stdout");
            continue;
        }
        if (sig == SIGHUP) {
            /* MONOTONIC_USEC: systemd's Type=notify-reload (253+) wants it with RELOADING. */
            sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%lld", (long long)store_mono_ns() / 1000);
            struct proxy_config *fresh = reload(live, argc, argv, envp);
            if (fresh == NULL) {
                sd_notify(0, "READY=1");
                continue;
            }
            upstream_cap_set(&upstream_cap, fresh->upstream_max_inflight);
            sem_t switched;
            sem_init(&switched, 0, 0);
            for (int i = 0; i < started; i++)
                worker_reload(&workers[i], fresh, &switched);
            for (int i = 0; i < started; i++)
                while (sem_wait(&switched) != 0)
                    ;
            sem_destroy(&switched);
            admin_set_store_error_modes(admin, fresh->rate_on_store_error, fresh->concurrency_on_store_error);
            /* No worker looks at the old configuration any more. */
            if (live != cfg) {
                config_free(live);
                free(live);
            }
            live = fresh;
            fprintf(stderr, "tierproxy: SIGHUP: configuration reloaded from %s\n", live->config_path);
            sd_notify(0, "READY=1");
            continue;
        }
        fprintf(stderr, "tierproxy: %s: draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        sd_notify(0, "STOPPING=1");
        break;
    }
    status = 0;
stop:
    admin_stop(admin);
    for (int i = 0; i < started; i++)
        worker_request_stop(&workers[i]);
    for (int i = 0; i < started; i++)
        worker_join_and_destroy(&workers[i]);
out:
    if (live != cfg) {
        config_free(live);
        free(live);
    }
    free(workers);
    free(limiters);
    free(metrics);
    access_log_close(access_log);
    log_throttle_destroy(rejection_warnings);
    store_log_destroy(store_log);
    if (memory != NULL)
        memory_store_destroy(memory);
    if (catalog != NULL)
        snapshot_watch_stop(catalog);
    return status;
}

int main(int argc, char **argv, char **envp)
{
    struct proxy_config cfg;
    enum config_action action;
    char err[1024];
    int rc = config_load(argc, argv, envp, &cfg, &action, err, sizeof(err));
    if (rc == 2) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (rc < 0) {
        fprintf(stderr, "tierproxy: %s\n", err);
        return 1;
    }
    int status = 0;
    switch (action) {
    case CONFIG_HELP:
        fputs(config_usage(), stdout);
        break;
    case CONFIG_VERSION:
        printf("tierproxy %s\n", TIERPROXY_VERSION);
        break;
    case CONFIG_CHECK:
        status = validate_start(&cfg, NULL);
        break;
    case CONFIG_RUN:
        curl_global_init(CURL_GLOBAL_DEFAULT);
        evthread_use_pthreads();
        status = serve(&cfg, argc, argv, envp);
        curl_global_cleanup();
        break;
    }
    config_free(&cfg);
    return status;
}
