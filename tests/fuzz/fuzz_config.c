/* Fuzzes config_load: the INI file (libinih behind config.c's line reader), command-line
 * flags and TIERPROXY_* environment variables, then config_reload and config_free.
 *
 * Input: the INI file up to the first "\0\0"; after it, NUL-separated strings, those that
 * start with TIERPROXY_ going to the environment and the others to argv. The file is a
 * memfd, rewritten each run and opened by config.c as /proc/self/fd/N through "-c".
 *
 * Invariants: a success gives a configuration whose every field is in range, and a reload
 * of the same input gives the same configuration; a failure returns -EINVAL, -ENOMEM or 2,
 * leaves *cfg zeroed and says why in one line without control characters; a small error
 * buffer is never overrun. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proxy/config.h"

#include "tests/fuzz/fuzz_check.h"

#define MAX_ARGS 16
#define MAX_TIMEOUT_MS INT64_C(86400000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char memfd_path[64];

static bool no_ctl(const char *s)
{
    for (; s && *s; s++)
        if (iscntrl((unsigned char)*s))
            return false;
    return true;
}

static bool is_token(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && strchr("!#$%&'*+-.^_`|~", *s) == NULL)
            return false;
    return true;
}

static void check_valid(const struct proxy_config *c, enum config_action action)
{
    CHECK(c->listen_host != NULL && c->listen_host[0] != '\0' && c->listen_port >= 1);
    CHECK(c->n_upstreams >= 1 && c->upstreams != NULL);
    for (size_t i = 0; i < c->n_upstreams; i++) {
        const char *u = c->upstreams[i];
        size_t n = strlen(u);
        CHECK(strncasecmp(u, "http://", 7) == 0 && n > 7 && u[7] != '/' && u[n - 1] != '/');
        for (const char *p = u; *p; p++)
            CHECK(!isspace((unsigned char)*p) && !iscntrl((unsigned char)*p) && *p != '?' && *p != '#');
    }
    CHECK(c->workers >= 1 && c->workers <= 1024);
    CHECK(c->connect_timeout_ms >= 1 && c->connect_timeout_ms <= MAX_TIMEOUT_MS);
    CHECK(c->upstream_timeout_ms >= 1 && c->upstream_timeout_ms <= MAX_TIMEOUT_MS);
    CHECK(c->websocket_idle_timeout_ms >= 0 && c->websocket_idle_timeout_ms <= MAX_TIMEOUT_MS);
    CHECK(c->max_body_bytes >= 0 && c->max_body_bytes <= (INT64_C(1) << 40));
    CHECK((c->n_trusted_proxies == 0) == (c->trusted_proxies == NULL));
    CHECK((c->n_exempt_paths == 0) == (c->exempt_paths == NULL));
    for (size_t i = 0; i < c->n_exempt_paths; i++)
        CHECK(c->exempt_paths[i][0] == '/' && no_ctl(c->exempt_paths[i]));
    CHECK((c->admin_host == NULL) == (c->admin_port == 0));
    CHECK(c->key_header != NULL && is_token(c->key_header));
    CHECK(c->anonymous_plan == NULL || (c->anonymous_plan[0] != '\0' && no_ctl(c->anonymous_plan)));
    CHECK(c->db != NULL && c->db[0] != '\0' && no_ctl(c->db));
    CHECK(c->refresh_ms >= 1 && c->refresh_ms <= MAX_TIMEOUT_MS);
    CHECK(c->store == STORE_MEMORY || c->store == STORE_REDIS);
    CHECK(c->redis_url != NULL &&
          (strncasecmp(c->redis_url, "redis://", 8) == 0 || strncasecmp(c->redis_url, "rediss://", 9) == 0 ||
           strncasecmp(c->redis_url, "unix://", 7) == 0));
    CHECK(c->key_prefix != NULL && no_ctl(c->key_prefix));
    CHECK(c->lease_ttl_ms >= 1 && c->lease_ttl_ms <= MAX_TIMEOUT_MS);
    CHECK((unsigned)c->headers <= HEADERS_OFF);
    CHECK(c->access_log == NULL || (c->access_log[0] != '\0' && no_ctl(c->access_log)));
    CHECK(c->log_level != NULL &&
          (strcmp(c->log_level, "debug") == 0 || strcmp(c->log_level, "info") == 0 ||
           strcmp(c->log_level, "warn") == 0 || strcmp(c->log_level, "error") == 0));
    if (action == CONFIG_HELP || action == CONFIG_VERSION)
        CHECK(c->config_path == NULL);
    else
        CHECK(c->config_path != NULL && strcmp(c->config_path, memfd_path) == 0);
}

static bool str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static void check_same(const struct proxy_config *a, const struct proxy_config *b)
{
    CHECK(str_eq(a->listen_host, b->listen_host) && a->listen_port == b->listen_port);
    CHECK(a->n_upstreams == b->n_upstreams);
    for (size_t i = 0; i < a->n_upstreams; i++)
        CHECK(str_eq(a->upstreams[i], b->upstreams[i]));
    CHECK(a->workers == b->workers && a->connect_timeout_ms == b->connect_timeout_ms &&
          a->upstream_timeout_ms == b->upstream_timeout_ms &&
          a->websocket_idle_timeout_ms == b->websocket_idle_timeout_ms &&
          a->max_body_bytes == b->max_body_bytes);
    CHECK(a->n_trusted_proxies == b->n_trusted_proxies);
    if (a->n_trusted_proxies)
        CHECK(memcmp(a->trusted_proxies, b->trusted_proxies,
                     a->n_trusted_proxies * sizeof(*a->trusted_proxies)) == 0);
    CHECK(a->n_exempt_paths == b->n_exempt_paths);
    for (size_t i = 0; i < a->n_exempt_paths; i++)
        CHECK(str_eq(a->exempt_paths[i], b->exempt_paths[i]));
    CHECK(str_eq(a->admin_host, b->admin_host) && a->admin_port == b->admin_port);
    CHECK(str_eq(a->key_header, b->key_header) && str_eq(a->anonymous_plan, b->anonymous_plan) &&
          a->forward_key == b->forward_key);
    CHECK(str_eq(a->db, b->db) && a->refresh_ms == b->refresh_ms);
    CHECK(a->store == b->store && str_eq(a->redis_url, b->redis_url) &&
          str_eq(a->key_prefix, b->key_prefix) && a->rate_on_store_error == b->rate_on_store_error &&
          a->concurrency_on_store_error == b->concurrency_on_store_error &&
          a->local_share == b->local_share && a->upstream_max_inflight == b->upstream_max_inflight &&
          a->lease_ttl_ms == b->lease_ttl_ms && a->headers == b->headers);
    CHECK(str_eq(a->access_log, b->access_log) && str_eq(a->log_level, b->log_level));
    CHECK(str_eq(a->config_path, b->config_path));
}

static void check_zeroed(const struct proxy_config *c)
{
    static const struct proxy_config zero;
    CHECK(memcmp(c, &zero, sizeof(zero)) == 0);
}

static void check_failure(int r, const struct proxy_config *cfg, const char *err)
{
    CHECK(r == -EINVAL || r == -ENOMEM || r == 2);
    check_zeroed(cfg);
    CHECK(err[0] != '\0');
    for (const char *p = err; *p; p++)
        CHECK(!iscntrl((unsigned char)*p)); /* one line, nothing that moves a terminal */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MAX_ARGS + 4], *envp[MAX_ARGS + 1], *strings = NULL, err[512];
    int argc = 0, envc = 0;
    size_t file_len = size;

    if (size > 65536)
        return 0;
    if (memfd < 0) {
        memfd = memfd_create("fuzz_config.ini", 0);
        CHECK(memfd >= 0);
        snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
    }

    /* The file, then the argument strings. */
    for (size_t i = 0; i + 1 < size; i++) {
        if (data[i] == 0 && data[i + 1] == 0) {
            file_len = i;
            break;
        }
    }
    CHECK(ftruncate(memfd, 0) == 0);
    CHECK(pwrite(memfd, data, file_len, 0) == (ssize_t)file_len);

    argv[argc++] = (char *)"tierproxy";
    argv[argc++] = (char *)"-c";
    argv[argc++] = memfd_path;
    if (file_len < size) {
        size_t rest = size - file_len - 2;
        strings = malloc(rest + 1);
        CHECK(strings != NULL);
        memcpy(strings, data + file_len + 2, rest);
        strings[rest] = '\0';
        for (char *s = strings; s < strings + rest && argc < MAX_ARGS && envc < MAX_ARGS;
             s += strlen(s) + 1) {
            if (strncmp(s, "TIERPROXY_", 10) == 0)
                envp[envc++] = s;
            /* Only the memfd is read: no other -c, so no fuzzed path is ever opened. */
            else if (strncmp(s, "-c", 2) != 0 && strncmp(s, "--config", 8) != 0)
                argv[argc++] = s;
        }
    }
    argv[argc] = NULL;
    envp[envc] = NULL;

    struct proxy_config cfg;
    enum config_action action = (enum config_action)-1;
    memset(&cfg, 0xa5, sizeof(cfg));
    int r = config_load(argc, argv, envp, &cfg, &action, err, sizeof(err));
    if (r == 0) {
        CHECK(action == CONFIG_RUN || action == CONFIG_CHECK || action == CONFIG_VERSION ||
              action == CONFIG_HELP);
        check_valid(&cfg, action);

        /* SIGHUP with nothing changed gives the same configuration. */
        struct proxy_config fresh;
        int r2 = config_reload(&cfg, argc, argv, envp, &fresh, err, sizeof(err));
        CHECK(r2 == 0);
        check_same(&cfg, &fresh);
        config_free(&fresh);
        check_zeroed(&fresh);
        config_free(&cfg);
        check_zeroed(&cfg);
    } else {
        check_failure(r, &cfg, err);
        /* The same failure through a tiny error buffer: terminated, never overrun. */
        size_t tiny_len = size % 9;
        char *tiny = malloc(tiny_len); /* 0: any write is out of bounds */
        CHECK(tiny != NULL);
        int r3 = config_load(argc, argv, envp, &cfg, &action, tiny, tiny_len);
        CHECK(r3 == r);
        if (tiny_len)
            CHECK(memchr(tiny, '\0', tiny_len) != NULL);
        check_zeroed(&cfg);
        free(tiny);
    }
    free(strings);
    return 0;
}
