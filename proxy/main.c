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
#include "proxy/log.h"
#include "proxy/log_throttle.h"
#include "proxy/rejection_log.h"
#include "proxy/store_log.h"
#include "proxy/netaddr.h"
#include "proxy/start_check.h"
#include "proxy/upstream_cap.h"
#include "proxy/upstream_tls.h"
#include "proxy/worker.h"
#include "store/clock.h"
#include "store/cluster/cluster_probe.h"
#include "store/redis/redis_probe.h"
#include "store/redis/redis_sigpipe.h"
#include "store/limiter.h"
#include "tiers/snapshot.h"

#define TIERPROXY_VERSION "0.1.0"

/* How long a user and limit stay quiet after a rejection warning, and how many pairs the
 * process remembers (SPEC: at most one line per user and limit per 10 s). */
#define REJECTION_WARNING_INTERVAL_MS 10000
#define REJECTION_WARNING_KEYS 8192

/* Each problem of a configuration loaded at start, one error line. */
static void say_problem(void *ctx, const char *where, const char *why)
{
    (void)ctx;
    if (where[0] != '\0')
        log_where(LOG_LEVEL_ERROR, where, "%s", why);
    else
        log_say(LOG_LEVEL_ERROR, "%s", why);
}

/* Each problem of a configuration a reload refused, one error line. */
static void say_reload_problem(void *ctx, const char *where, const char *why)
{
    (void)ctx;
    char msg[2048];
    snprintf(msg, sizeof(msg), "SIGHUP: keeping the running configuration: %s%s%s", where, where[0] ? ": " : "", why);
    json_t *line = log_line_start("error", msg);
    if (line != NULL && where[0] != '\0')
        json_object_set_new(line, "where", json_string(where));
    log_line_write(line);
}

/* debug: each setting in force and where it came from. */
static void say_setting(void *ctx, const char *name, const char *value, const char *source)
{
    (void)ctx;
    char msg[512];
    snprintf(msg, sizeof(msg), "setting %s = \"%.200s\" (from %s)", name, value, source);
    json_t *line = log_line_start("debug", msg);
    if (line == NULL)
        return;
    json_object_set_new(line, "key", json_string(name));
    json_object_set_new(line, "value", json_string(value));
    json_object_set_new(line, "from", json_string(source));
    log_line_write(line);
}

/* [log] level; --check shows at least what info shows (its verdict and warnings). */
static void apply_log_level(const struct proxy_config *cfg, bool at_least_info)
{
    enum log_level level = LOG_LEVEL_INFO;
    log_level_parse(cfg->log_level, &level);
    if (at_least_info && level < LOG_LEVEL_INFO)
        level = LOG_LEVEL_INFO;
    log_set_level(level);
    if (log_enabled(LOG_LEVEL_DEBUG))
        config_settings(cfg, say_setting, NULL);
}

/* Reads the configuration file again. Returns the new configuration, or NULL (with a log
 * line saying why) when it is bad: the running one is kept. */
static struct proxy_config *reload(struct proxy_config *running, int argc, char **argv, char **envp)
{
    if (running->config_path == NULL) {
        log_say(LOG_LEVEL_WARN, "SIGHUP: no configuration file (-c) to reload");
        return NULL;
    }
    struct proxy_config *fresh = calloc(1, sizeof(*fresh));
    if (fresh == NULL)
        return NULL;
    if (config_reload_reported(running, argc, argv, envp, fresh, say_reload_problem, NULL, NULL, 0) != 0) {
        free(fresh);
        return NULL;
    }
    if (fresh->file_settings == 0) {
        /* a file caught truncated (an editor, a deploy half done) would put every default
           back: the upstream, exempt paths, the key header */
        log_say(LOG_LEVEL_ERROR, "SIGHUP: keeping the running configuration: %s sets nothing "
                "(it is empty, or holds only comments and [section] lines)", running->config_path);
        config_free(fresh);
        free(fresh);
        return NULL;
    }
    char changed[512];
    config_keep_restart_only(running, fresh, changed, sizeof(changed));
    apply_log_level(fresh, false);
    if (changed[0] != '\0')
        log_say(LOG_LEVEL_WARN, "SIGHUP: these take effect at restart, not now: %s", changed);
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

/* What serve holds while the daemon runs; torn down in the opposite order by daemon_close. */
struct daemon {
    struct proxy_config *cfg;       /* loaded at start, owned by main */
    struct proxy_config *live;      /* the workers' configuration: cfg until a reload */
    struct start_addresses addrs;
    struct snapshot_watch *catalog;
    struct memory_store *memory;
    struct access_log *access_log;
    struct log_throttle *rejection_warnings;
    struct store_log *store_log;
    struct proxy_shared shared;     /* every worker points at it */
    struct worker *workers;
    struct limiter **limiters;      /* the admin API's view of the workers */
    struct metrics **metrics;
    int started;                    /* workers running, to stop and join */
    struct admin *admin;
    char err[512];
};

static struct upstream_cap upstream_cap;   /* every worker's; outlives them */

/* Signals go to the main thread only, which waits for them with sigwait. */
static void block_signals(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGHUP);
    sigaddset(sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The checks, the catalog and the stores the workers share. Returns 0, or -1 once said. */
static int daemon_open_shared(struct daemon *d)
{
    struct proxy_config *cfg = d->cfg;
    if (start_check(cfg, false, &d->addrs, &d->access_log) != 0)
        return -1;
    if (catalog_start(cfg, &d->catalog, d->err, sizeof(d->err)) < 0) {
        log_say(LOG_LEVEL_ERROR, "catalog %s: %s", cfg->db, d->err);
        return -1;
    }
    upstream_cap_set(&upstream_cap, cfg->upstream_max_inflight);
    /* with redis too: the local fallback (on_store_error = local) counts in it */
    if ((d->memory = memory_store_create()) == NULL) {
        log_say(LOG_LEVEL_ERROR, "out of memory");
        return -1;
    }
    memory_store_set_max_subjects(d->memory, (size_t)cfg->memory_max_subjects);
    memory_store_set_evict_first(d->memory, GATE_ANONYMOUS_PREFIX);
    d->rejection_warnings = log_throttle_create(REJECTION_WARNING_KEYS, REJECTION_WARNING_INTERVAL_MS);
    /* its line of the store's return is an info line: [log] level decides, reloads too */
    d->store_log = store_log_create((size_t)cfg->workers, true);
    if (d->rejection_warnings == NULL || d->store_log == NULL) {
        log_say(LOG_LEVEL_ERROR, "out of memory");
        return -1;
    }
    d->shared = (struct proxy_shared){
        .instance_id = "",
        .cfg = cfg,
        .catalog = d->catalog,
        .memory = d->memory,
        .upstream_cap = &upstream_cap,
        .access_log = d->access_log,
        .rejection_warnings = d->rejection_warnings,
        .store_log = d->store_log,
        .listen_addr = d->addrs.listen,
    };
    make_instance_id(d->shared.instance_id, sizeof(d->shared.instance_id));
    return 0;
}

/* One worker per [proxy] workers, each listening. Returns 0, or -1 once said; the workers
 * started so far are counted in d->started for daemon_close to stop. */
static int start_workers(struct daemon *d)
{
    int n = d->cfg->workers;
    d->workers = calloc((size_t)n, sizeof(*d->workers));
    d->limiters = calloc((size_t)n, sizeof(*d->limiters));
    d->metrics = calloc((size_t)n, sizeof(*d->metrics));
    if (d->workers == NULL || d->limiters == NULL || d->metrics == NULL)
        return -1;
    for (; d->started < n; d->started++) {
        struct worker *w = &d->workers[d->started];
        int rc = worker_init(w, d->started, &d->shared, d->err, sizeof(d->err));
        if (rc == 0 && (rc = worker_start(w)) < 0)
            snprintf(d->err, sizeof(d->err), "cannot start worker %d: %s", d->started, strerror(-rc));
        if (rc < 0) {
            log_say(LOG_LEVEL_ERROR, "%s", d->err);
            worker_join_and_destroy(w);
            return -1;
        }
        d->limiters[d->started] = w->limiter;
        d->metrics[d->started] = w->metrics;
    }
    return 0;
}

/* The admin API, when [admin] host is set. Returns 0, or -1 once said. */
static int start_admin(struct daemon *d)
{
    const struct proxy_config *cfg = d->cfg;
    if (cfg->admin_host == NULL)
        return 0;
    struct admin_sources sources = {
        .catalog = d->catalog,
        .limiters = d->limiters,
        .metrics = d->metrics,
        .n_workers = (size_t)cfg->workers,
        .store_is_remote = cfg->store == STORE_REDIS,
        .rate_on_store_error = cfg->rate_on_store_error,
        .concurrency_on_store_error = cfg->concurrency_on_store_error,
    };
    char admin_host[64];
    sockaddr_to_text((const struct sockaddr *)&d->addrs.admin, admin_host, sizeof(admin_host));
    if (admin_start(admin_host, cfg->admin_port, &sources, &d->admin, d->err, sizeof(d->err)) < 0) {
        log_say(LOG_LEVEL_ERROR, "%s", d->err);
        return -1;
    }
    return 0;
}

static void announce_ready(const struct daemon *d)
{
    const struct proxy_config *cfg = d->cfg;
    /* Type=notify: ready once every worker listens (a no-op outside systemd). */
    sd_notify(0, "READY=1");
    char listening[64], upstream[96];
    sockaddr_to_text((const struct sockaddr *)&d->addrs.listen, listening, sizeof(listening));
    bool v6 = d->addrs.listen.ss_family == AF_INET6;
    log_say(LOG_LEVEL_INFO, "tierproxy %s: listening on %s%s%s:%u, %d workers, %s store, upstream %s%s",
            TIERPROXY_VERSION, v6 ? "[" : "", listening, v6 ? "]" : "", (unsigned)cfg->listen_port, cfg->workers,
            cfg->store == STORE_REDIS ? "redis" : "memory", config_quote_url(cfg->upstreams[0], upstream, sizeof(upstream)),
            cfg->n_upstreams > 1 ? " (and others)" : "");
}

/* logrotate: the file was renamed; write to a new one at the configured path */
static void on_sigusr1(struct daemon *d)
{
    int rc = access_log_reopen(d->access_log, d->err, sizeof(d->err));
    if (rc < 0)
        log_say(LOG_LEVEL_ERROR, "SIGUSR1: %s", d->err);
    else if (rc == 0)
        log_say(LOG_LEVEL_INFO, "SIGUSR1: access log reopened: %s", d->live->access_log);
    else
        log_say(LOG_LEVEL_INFO, "SIGUSR1: the access log is %s, nothing to reopen",
                d->access_log == NULL ? "off" : "stdout");
}

/* Frees a configuration a reload replaced; the one from start belongs to main. */
static void release_live(struct daemon *d)
{
    if (d->live != d->cfg) {
        config_free(d->live);
        free(d->live);
    }
}

/* Reads the configuration again and switches every worker to it; a configuration that
 * does not load leaves the running one in place. */
static void on_sighup(struct daemon *d, int argc, char **argv, char **envp)
{
    /* MONOTONIC_USEC: systemd's Type=notify-reload (253+) wants it with RELOADING. */
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%lld", (long long)store_mono_ns() / 1000);
    struct proxy_config *fresh = reload(d->live, argc, argv, envp);
    if (fresh == NULL) {
        sd_notify(0, "READY=1");
        return;
    }
    upstream_cap_set(&upstream_cap, fresh->upstream_max_inflight);
    /* /health first: once a worker answers under the new modes, it says them too */
    admin_set_store_error_modes(d->admin, fresh->rate_on_store_error, fresh->concurrency_on_store_error);
    sem_t switched;
    sem_init(&switched, 0, 0);
    for (int i = 0; i < d->started; i++)
        worker_reload(&d->workers[i], fresh, &switched);
    for (int i = 0; i < d->started; i++)
        while (sem_wait(&switched) != 0)
            ;
    sem_destroy(&switched);
    /* No worker looks at the old configuration any more. */
    release_live(d);
    d->live = fresh;
    log_say(LOG_LEVEL_INFO, "SIGHUP: configuration reloaded from %s", d->live->config_path);
    sd_notify(0, "READY=1");
}

/* Serves the signals until SIGTERM or SIGINT asks to drain. */
static void wait_for_signals(struct daemon *d, const sigset_t *sigs, int argc, char **argv, char **envp)
{
    for (;;) {
        int sig = 0;
        if (sigwait(sigs, &sig) != 0)
            continue;
        if (sig == SIGUSR1) {
            on_sigusr1(d);
            continue;
        }
        if (sig == SIGHUP) {
            on_sighup(d, argc, argv, envp);
            continue;
        }
        log_say(LOG_LEVEL_INFO, "%s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        sd_notify(0, "STOPPING=1");
        return;
    }
}

/* Stops the admin API and the workers, then frees what they shared. */
static void daemon_close(struct daemon *d)
{
    admin_stop(d->admin);
    for (int i = 0; i < d->started; i++)
        worker_request_stop(&d->workers[i]);
    for (int i = 0; i < d->started; i++)
        worker_join_and_destroy(&d->workers[i]);
    release_live(d);
    free(d->workers);
    free(d->limiters);
    free(d->metrics);
    access_log_close(d->access_log);
    rejection_log_flush_all(d->rejection_warnings); /* the counts no timer has written yet */
    log_throttle_destroy(d->rejection_warnings);
    store_log_destroy(d->store_log);
    if (d->memory != NULL)
        memory_store_destroy(d->memory);
    if (d->catalog != NULL)
        snapshot_watch_stop(d->catalog);
}

/* Runs the daemon until SIGTERM or SIGINT. Returns the exit status: 0 after draining,
 * 1 when it could not start. */
static int serve(struct proxy_config *cfg, int argc, char **argv, char **envp)
{
    struct daemon d = { .cfg = cfg, .live = cfg };
    int status = 1;
    sigset_t sigs;

    block_signals(&sigs);
    raise_nofile_limit();
    tune_malloc();
    if (daemon_open_shared(&d) == 0 && start_workers(&d) == 0 && start_admin(&d) == 0) {
        announce_ready(&d);
        wait_for_signals(&d, &sigs, argc, argv, envp);
        status = 0;
    }
    daemon_close(&d);
    return status;
}

int main(int argc, char **argv, char **envp)
{
    struct proxy_config cfg;
    enum config_action action;
    int rc = config_load_reported(argc, argv, envp, &cfg, &action, say_problem, NULL, NULL, 0);
    if (rc == 2)
        return 2;
    if (rc < 0)
        return 1;
    int status = 0;
    switch (action) {
    case CONFIG_HELP:
        fputs(config_usage(), stdout);
        break;
    case CONFIG_VERSION:
        printf("tierproxy %s\n", TIERPROXY_VERSION);
        break;
    case CONFIG_CHECK: {
        struct start_addresses addrs;
        apply_log_level(&cfg, true);
        struct redis_sigpipe sigpipe;
        redis_sigpipe_ignore(&sigpipe);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        status = start_check(&cfg, true, &addrs, NULL);
        curl_global_cleanup();
        redis_sigpipe_restore(&sigpipe);
        break;
    }
    case CONFIG_RUN:
        apply_log_level(&cfg, false);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        evthread_use_pthreads();
        status = serve(&cfg, argc, argv, envp);
        curl_global_cleanup();
        break;
    }
    config_free(&cfg);
    return status;
}
