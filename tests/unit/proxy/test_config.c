/* Unit tests for proxy/config.c: every directive from the file, flags and environment,
 * their precedence, and the exact error text an operator sees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy/config.h"

/* etc/tierproxy.ini, from meson */
static const char *example_ini;
static char tmpdir[64];
static int n_files;

/* Writes text into a new file in tmpdir; returns its path (static storage, 8 slots). */
static const char *write_ini(const char *text)
{
    static char paths[8][128];
    char *path = paths[n_files % 8];
    snprintf(path, sizeof(paths[0]), "%s/t%d.ini", tmpdir, n_files++);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* argv is "tierproxy", then -c ini when ini is not NULL, then args (NULL-terminated). */
static int load(const char *ini, const char *const *args, const char *const *env,
                struct proxy_config *cfg, enum config_action *action, char *err, size_t errlen)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"tierproxy";
    if (ini) {
        argv[argc++] = (char *)"-c";
        argv[argc++] = (char *)ini;
    }
    for (size_t i = 0; args && args[i]; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    return config_load(argc, argv, (char **)env, cfg, action, err, errlen);
}

/* Loads text as a file and expects the error message "<path>:<rest>". */
static void expect_file_error(const char *text, const char *rest)
{
    struct proxy_config cfg;
    enum config_action action;
    char err[512], want[512];
    const char *path = write_ini(text);

    int r = load(path, NULL, NULL, &cfg, &action, err, sizeof(err));
    snprintf(want, sizeof(want), "%s:%s", path, rest);
    if (r != -EINVAL)
        fail_msg("expected -EINVAL for:\n%s\ngot %d (%s)", text, r, err);
    assert_string_equal(err, want);
    /* on failure the configuration is left empty */
    assert_null(cfg.listen_host);
    assert_null(cfg.upstreams);
}

static void load_text_ok(const char *text, struct proxy_config *cfg)
{
    enum config_action action;
    char err[512] = "";
    int r = load(write_ini(text), NULL, NULL, cfg, &action, err, sizeof(err));
    if (r != 0)
        fail_msg("load failed (%d): %s\nfor:\n%s", r, err, text);
    assert_int_equal(action, CONFIG_RUN);
}

static void assert_defaults(const struct proxy_config *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    assert_string_equal(c->listen_host, "127.0.0.1");
    assert_int_equal(c->listen_port, 8080);
    assert_int_equal(c->n_upstreams, 1);
    assert_string_equal(c->upstreams[0], "http://127.0.0.1:3000");
    assert_int_equal(c->workers, cores < 1 ? 1 : cores);
    assert_int_equal(c->connect_timeout_ms, 2000);
    assert_int_equal(c->upstream_timeout_ms, 30000);
    assert_int_equal(c->websocket_idle_timeout_ms, 3600000); /* an hour, as SPEC says */
    assert_int_equal(c->max_body_bytes, 10485760);
    assert_int_equal(c->n_trusted_proxies, 0);
    assert_null(c->trusted_proxies);
    assert_int_equal(c->n_exempt_paths, 0);
    assert_null(c->exempt_paths);
    assert_string_equal(c->admin_host, "127.0.0.1");
    assert_int_equal(c->admin_port, 9090);
    assert_string_equal(c->key_header, "Authorization");
    assert_null(c->anonymous_plan);
    assert_false(c->forward_key);
    assert_string_equal(c->db, "plans.db");
    assert_int_equal(c->refresh_ms, 1000);
    assert_int_equal(c->store, STORE_MEMORY);
    assert_string_equal(c->redis_url, "redis://127.0.0.1:6379/0");
    assert_string_equal(c->key_prefix, "tierproxy:");
    /* SPEC "Beyond per-window rates": local is the default for both */
    assert_int_equal(c->rate_on_store_error, LIMITER_STORE_ERROR_LOCAL);
    assert_int_equal(c->concurrency_on_store_error, LIMITER_STORE_ERROR_LOCAL);
    assert_true(c->local_share == 1.0);
    assert_int_equal(c->upstream_max_inflight, 0);
    assert_int_equal(c->lease_ttl_ms, 30000);
    assert_int_equal(c->headers, HEADERS_IETF);
    assert_string_equal(c->access_log, "-");
    assert_string_equal(c->log_level, "info");
}

/* ---------------------------------------------------------------- defaults */

static void test_defaults(void **state)
{
    struct proxy_config cfg;
    enum config_action action = CONFIG_HELP;
    char err[256];
    assert_int_equal(load(NULL, NULL, NULL, &cfg, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_RUN);
    assert_defaults(&cfg);
    assert_null(cfg.config_path);
    config_free(&cfg);
}

static void test_example_file_is_the_defaults(void **state)
{
    /* etc/tierproxy.ini documents the defaults: loading it must change nothing */
    struct proxy_config cfg;
    enum config_action action;
    char err[256] = "";
    if (load(example_ini, NULL, NULL, &cfg, &action, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    assert_defaults(&cfg);
    assert_string_equal(cfg.config_path, example_ini);
    config_free(&cfg);
}

/* ---------------------------------------------------------------- good values */

static void test_every_directive_set(void **state)
{
    struct proxy_config c;
    load_text_ok("# a full configuration, nothing left at its default\n"
                 "[proxy]\n"
                 "listen = [::1]:8443\n"
                 "upstream = http://10.0.0.1:3000/, http://10.0.0.2:3000/api/ ,HTTP://up3\n"
                 "workers = 3\n"
                 "connect_timeout_ms = 150\n"
                 "upstream_timeout_ms = 90000\n"
                 "max_body_bytes = 0\n"
                 "upstream_max_inflight = 20\n"
                 "trusted_proxies = 10.0.0.0/8, ::1\n"
                 "exempt_paths = /health, /public/\n"
                 "[admin]\n"
                 "listen = 0.0.0.0:9191\n"
                 "[auth]\n"
                 "key_header = X-Api-Key\n"
                 "anonymous_plan = free\n"
                 "forward_key = yes\n"
                 "[plans]\n"
                 "db = /var/lib/tierproxy/plans.db\n"
                 "refresh_ms = 250\n"
                 "[limits]\n"
                 "store = redis\n"
                 "redis = unix:///run/redis.sock\n"
                 "key_prefix = tp:\n"
                 "on_store_error = closed\n"
                 "concurrency_on_store_error = open\n"
                 "local_share = 0.25\n"
                 "lease_ttl_ms = 5000\n"
                 "headers = ietf\n"
                 "[log]\n"
                 "access = /var/log/tierproxy/access.log\n"
                 "level = debug\n",
                 &c);
    assert_string_equal(c.listen_host, "::1");
    assert_int_equal(c.listen_port, 8443);
    assert_int_equal(c.n_upstreams, 3);
    assert_string_equal(c.upstreams[0], "http://10.0.0.1:3000");
    assert_string_equal(c.upstreams[1], "http://10.0.0.2:3000/api");
    assert_string_equal(c.upstreams[2], "HTTP://up3");
    assert_int_equal(c.workers, 3);
    assert_int_equal(c.connect_timeout_ms, 150);
    assert_int_equal(c.upstream_timeout_ms, 90000);
    assert_int_equal(c.max_body_bytes, 0);
    assert_int_equal(c.n_trusted_proxies, 2);
    assert_int_equal(c.trusted_proxies[0].family, AF_INET);
    assert_int_equal(c.trusted_proxies[0].prefix_len, 8);
    assert_int_equal(c.trusted_proxies[1].family, AF_INET6);
    assert_int_equal(c.trusted_proxies[1].prefix_len, 128);
    assert_int_equal(c.n_exempt_paths, 2);
    assert_string_equal(c.exempt_paths[0], "/health");
    assert_string_equal(c.exempt_paths[1], "/public/");
    assert_string_equal(c.admin_host, "0.0.0.0");
    assert_int_equal(c.admin_port, 9191);
    assert_string_equal(c.key_header, "X-Api-Key");
    assert_string_equal(c.anonymous_plan, "free");
    assert_true(c.forward_key);
    assert_string_equal(c.db, "/var/lib/tierproxy/plans.db");
    assert_int_equal(c.refresh_ms, 250);
    assert_int_equal(c.store, STORE_REDIS);
    assert_string_equal(c.redis_url, "unix:///run/redis.sock");
    assert_string_equal(c.key_prefix, "tp:");
    assert_int_equal(c.rate_on_store_error, LIMITER_STORE_ERROR_CLOSED);
    assert_int_equal(c.concurrency_on_store_error, LIMITER_STORE_ERROR_OPEN);
    assert_true(c.local_share == 0.25);
    assert_int_equal(c.upstream_max_inflight, 20);
    assert_int_equal(c.lease_ttl_ms, 5000);
    assert_int_equal(c.headers, HEADERS_IETF);
    assert_string_equal(c.access_log, "/var/log/tierproxy/access.log");
    assert_string_equal(c.log_level, "debug");
    config_free(&c);
    /* config_free zeroes, and a second call is harmless */
    assert_null(c.listen_host);
    assert_int_equal(c.n_upstreams, 0);
    config_free(&c);
    config_free(NULL);
}

static void test_good_value_forms(void **state)
{
    static const struct {
        const char *word;
        bool value;
    } bools[] = {{"yes", 1}, {"no", 0}, {"true", 1}, {"false", 0}, {"on", 1},
                 {"off", 0}, {"1", 1},  {"0", 0},     {"YES", 1},  {"Off", 0}};
    static const struct {
        const char *word;
        unsigned style;
    } styles[] = {{"draft", HEADERS_DRAFT}, {"ietf", HEADERS_IETF}, {"x", HEADERS_X},
                  {"off", HEADERS_OFF}, {"draft, ietf", HEADERS_DRAFT | HEADERS_IETF},
                  {"X,Draft", HEADERS_X | HEADERS_DRAFT}};
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    struct proxy_config c;
    char text[256];

    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
        snprintf(text, sizeof(text), "[auth]\nforward_key = %s\n", bools[i].word);
        load_text_ok(text, &c);
        assert_int_equal(c.forward_key, bools[i].value);
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof(styles) / sizeof(styles[0]); i++) {
        snprintf(text, sizeof(text), "[limits]\nheaders = %s\n", styles[i].word);
        load_text_ok(text, &c);
        assert_int_equal(c.headers, styles[i].style);
        config_free(&c);
    }
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        snprintf(text, sizeof(text), "[log]\nlevel = %s\n", levels[i]);
        load_text_ok(text, &c);
        assert_string_equal(c.log_level, levels[i]);
        config_free(&c);
    }

    /* admin: empty turns the listener off */
    load_text_ok("[admin]\nlisten =\n", &c);
    assert_null(c.admin_host);
    assert_int_equal(c.admin_port, 0);
    config_free(&c);

    /* log: off is NULL, stdout is "-" */
    load_text_ok("[log]\naccess = off\n", &c);
    assert_null(c.access_log);
    config_free(&c);
    load_text_ok("[log]\naccess = stdout\n", &c);
    assert_string_equal(c.access_log, "-");
    config_free(&c);

    /* hostnames, the any-address, and a bare IPv6 in brackets */
    load_text_ok("[proxy]\nlisten = localhost:1\n[admin]\nlisten = [::]:65535\n", &c);
    assert_string_equal(c.listen_host, "localhost");
    assert_int_equal(c.listen_port, 1);
    assert_string_equal(c.admin_host, "::");
    assert_int_equal(c.admin_port, 65535);
    config_free(&c);

    /* workers: 0 means one per core; bounds */
    load_text_ok("[proxy]\nworkers = 1024\n", &c);
    assert_int_equal(c.workers, 1024);
    config_free(&c);

    /* redis URL with password; key_prefix may be empty */
    load_text_ok("[limits]\nredis = redis://:s3cret@10.0.0.5:6380/2\nkey_prefix =\n", &c);
    assert_string_equal(c.redis_url, "redis://:s3cret@10.0.0.5:6380/2");
    assert_string_equal(c.key_prefix, "");
    config_free(&c);

    /* store memory explicitly, headers after a redis store */
    load_text_ok("[limits]\nstore = memory\n", &c);
    assert_int_equal(c.store, STORE_MEMORY);
    config_free(&c);
}

static void test_comments_and_layout(void **state)
{
    struct proxy_config c;
    char text[1200];

    load_text_ok("; a comment\n"
                 "# another comment\n"
                 "\n"
                 "[proxy]   ; comment after a section\n"
                 "  listen = 127.0.0.2:81   ; inline comment\n"
                 "upstream=http://a:1;not-a-comment-without-space\n"
                 "\t# indented comment\n"
                 "[limits]\n"
                 "key_prefix = tp#1   ; '#' inside a value is kept\n"
                 "[proxy]\n"
                 "workers = 2\n",
                 &c);
    assert_string_equal(c.listen_host, "127.0.0.2");
    assert_int_equal(c.listen_port, 81);
    assert_string_equal(c.upstreams[0], "http://a:1;not-a-comment-without-space");
    assert_string_equal(c.key_prefix, "tp#1");
    assert_int_equal(c.workers, 2);
    config_free(&c);

    /* Windows line ends and a UTF-8 BOM */
    load_text_ok("\xEF\xBB\xBF[proxy]\r\nlisten = 127.0.0.3:82\r\n", &c);
    assert_string_equal(c.listen_host, "127.0.0.3");
    config_free(&c);

    /* lines far longer than libinih's default 200 bytes */
    size_t o = (size_t)snprintf(text, sizeof(text), "[proxy]\ntrusted_proxies = ");
    for (int i = 0; i < 60; i++)
        o += (size_t)snprintf(text + o, sizeof(text) - o, "%s10.%d.0.0/16", i ? ", " : "", i);
    snprintf(text + o, sizeof(text) - o, "\nworkers = 5\n");
    assert_true(strlen(text) > 800);
    load_text_ok(text, &c);
    assert_int_equal(c.n_trusted_proxies, 60);
    assert_int_equal(c.trusted_proxies[59].addr[1], 59);
    assert_int_equal(c.workers, 5);
    config_free(&c);

    /* no trailing newline on the last line */
    load_text_ok("[proxy]\nworkers = 6", &c);
    assert_int_equal(c.workers, 6);
    config_free(&c);
}

/* ---------------------------------------------------------------- bad values */

struct bad_case {
    const char *section, *key, *value, *why;
};

static const struct bad_case bad_cases[] = {
    {"proxy", "listen", "127.0.0.1", "expected HOST:PORT (IPv6 as [::1]:8080), got \"127.0.0.1\""},
    {"proxy", "listen", "127.0.0.1:0", "expected HOST:PORT (IPv6 as [::1]:8080), got \"127.0.0.1:0\""},
    {"proxy", "listen", "127.0.0.1:65536", "expected HOST:PORT (IPv6 as [::1]:8080), got \"127.0.0.1:65536\""},
    {"proxy", "listen", "127.0.0.1:80x", "expected HOST:PORT (IPv6 as [::1]:8080), got \"127.0.0.1:80x\""},
    {"proxy", "listen", "::1:8080", "expected HOST:PORT (IPv6 as [::1]:8080), got \"::1:8080\""},
    {"proxy", "listen", "[::1]8080", "expected HOST:PORT (IPv6 as [::1]:8080), got \"[::1]8080\""},
    {"proxy", "listen", "[nope]:8080", "expected HOST:PORT (IPv6 as [::1]:8080), got \"[nope]:8080\""},
    {"proxy", "listen", ":8080", "expected HOST:PORT (IPv6 as [::1]:8080), got \":8080\""},
    {"proxy", "listen", "", "expected HOST:PORT (IPv6 as [::1]:8080), got \"\""},
    {"proxy", "upstream", "", "expected comma-separated http:// or https:// URLs, got \"\""},
    {"proxy", "upstream", "ftp://a", "expected http://HOST[:PORT][/PATH] or https://..., got \"ftp://a\""},
    {"proxy", "upstream", "http://", "expected http://HOST[:PORT][/PATH] or https://..., got \"http://\""},
    {"proxy", "upstream", "https://", "expected http://HOST[:PORT][/PATH] or https://..., got \"https://\""},
    {"proxy", "upstream", "http:///x", "expected http://HOST[:PORT][/PATH] or https://..., got \"http:///x\""},
    {"proxy", "upstream", "http://a?q=1", "expected http://HOST[:PORT][/PATH] or https://..., got \"http://a?q=1\""},
    {"proxy", "upstream_ca_file", "/nonexistent/ca.pem", "cannot read \"/nonexistent/ca.pem\": No such file or directory"},
    {"proxy", "upstream_tls_verify", "maybe", "expected yes or no, got \"maybe\""},
    {"proxy", "upstream", "http://a:1,,http://b:2", "empty item in \"http://a:1,,http://b:2\""},
    {"proxy", "upstream", "http://a:1,", "empty item in \"http://a:1,\""},
    {"proxy", "upstream", "http://a b", "expected http://HOST[:PORT][/PATH] or https://..., got \"http://a b\""},
    {"proxy", "workers", "-1", "expected a whole number from 0 to 1024, got \"-1\""},
    {"proxy", "workers", "1025", "expected a whole number from 0 to 1024, got \"1025\""},
    {"proxy", "workers", "four", "expected a whole number from 0 to 1024, got \"four\""},
    {"proxy", "workers", "4k", "expected a whole number from 0 to 1024, got \"4k\""},
    {"proxy", "workers", "", "expected a whole number from 0 to 1024, got \"\""},
    {"proxy", "connect_timeout_ms", "0", "expected a whole number from 1 to 86400000, got \"0\""},
    {"proxy", "connect_timeout_ms", "+5", "expected a whole number from 1 to 86400000, got \"+5\""},
    {"proxy", "connect_timeout_ms", "2.5", "expected a whole number from 1 to 86400000, got \"2.5\""},
    {"proxy", "upstream_timeout_ms", "-30000", "expected a whole number from 1 to 86400000, got \"-30000\""},
    {"proxy", "upstream_timeout_ms", "99999999999999999999", "expected a whole number from 1 to 86400000, got \"99999999999999999999\""},
    {"proxy", "max_body_bytes", "-1", "expected a whole number from 0 to 1099511627776, got \"-1\""},
    {"proxy", "max_body_bytes", "10MB", "expected a whole number from 0 to 1099511627776, got \"10MB\""},
    {"proxy", "trusted_proxies", "10.0.0.0/33", "expected a CIDR such as 10.0.0.0/8 or ::1/128, got \"10.0.0.0/33\""},
    {"proxy", "trusted_proxies", "10.0.0.0/8, bogus", "expected a CIDR such as 10.0.0.0/8 or ::1/128, got \"bogus\""},
    {"proxy", "trusted_proxies", "10.0.0.0/8,", "empty item in \"10.0.0.0/8,\""},
    {"proxy", "exempt_paths", "health", "expected a path prefix starting with /, got \"health\""},
    {"proxy", "exempt_paths", "/a, b", "expected a path prefix starting with /, got \"b\""},
    {"proxy", "exempt_paths", "/a b", "expected a path prefix starting with /, got \"/a b\""},
    {"admin", "listen", "9090", "expected HOST:PORT (IPv6 as [::1]:8080) or empty for off, got \"9090\""},
    {"auth", "key_header", "", "expected a header name, got \"\""},
    {"auth", "key_header", "X Api Key", "expected a header name, got \"X Api Key\""},
    {"auth", "key_header", "X-Key:", "expected a header name, got \"X-Key:\""},
    {"auth", "forward_key", "maybe", "expected yes or no, got \"maybe\""},
    {"auth", "forward_key", "", "expected yes or no, got \"\""},
    {"plans", "db", "", "expected a file path, got \"\""},
    {"plans", "refresh_ms", "0", "expected a whole number from 1 to 86400000, got \"0\""},
    {"limits", "store", "rediss", "expected memory or redis, got \"rediss\""},
    {"limits", "store", "", "expected memory or redis, got \"\""},
    /* the value is quoted, its password masked */
    {"limits", "redis", "http://u:pw@h:1/0", "expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path, got \"http://u:***@h:1/0\""},
    {"limits", "redis", "127.0.0.1:6379", "expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path, got \"127.0.0.1:6379\""},
    {"limits", "redis", ":pw@127.0.0.1:6379", "expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path, got \":***@127.0.0.1:6379\""},
    {"limits", "redis", "redis://", "expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path, got \"redis://\""},
    {"limits", "redis", "rediss://", "expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path, got \"rediss://\""},
    {"limits", "redis_ca_file", "/nonexistent/ca.pem", "cannot read \"/nonexistent/ca.pem\": No such file or directory"},
    {"limits", "on_store_error", "fail", "expected open, closed or local, got \"fail\""},
    {"limits", "concurrency_on_store_error", "yes", "expected open, closed or local, got \"yes\""},
    {"limits", "local_share", "0", "expected a number greater than 0 and at most 1, got \"0\""},
    {"limits", "local_share", "1.01", "expected a number greater than 0 and at most 1, got \"1.01\""},
    {"limits", "local_share", "-0.5", "expected a number greater than 0 and at most 1, got \"-0.5\""},
    {"limits", "local_share", "nan", "expected a number greater than 0 and at most 1, got \"nan\""},
    {"limits", "local_share", "5e-1", "expected a number greater than 0 and at most 1, got \"5e-1\""},
    {"limits", "local_share", "", "expected a number greater than 0 and at most 1, got \"\""},
    {"proxy", "upstream_max_inflight", "-1", "expected a whole number from 0 to 1000000000, got \"-1\""},
    {"proxy", "upstream_max_inflight", "lots", "expected a whole number from 0 to 1000000000, got \"lots\""},
    {"limits", "lease_ttl_ms", "0", "expected a whole number from 1 to 86400000, got \"0\""},
    {"limits", "headers", "rfc", "expected draft, ietf, x or off, got \"rfc\""},
    {"limits", "headers", "draft, rfc", "expected draft, ietf, x or off, got \"rfc\""},
    {"limits", "headers", "off, x", "\"off\" must stand alone, not combined with other styles"},
    {"limits", "headers", "ietf, ietf", "style \"ietf\" given twice"},
    {"log", "access", "", "expected stdout, off or a file path, got \"\""},
    {"log", "level", "verbose", "expected debug, info, warn or error, got \"verbose\""},
};

static void test_bad_values_name_file_line_key(void **state)
{
    char text[512], rest[512];
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *b = &bad_cases[i];
        /* the bad line is line 4, after a comment and a good line */
        snprintf(text, sizeof(text), "[%s]\n; comment\n\n%s = %s\n[log]\nlevel = info\n",
                 b->section, b->key, b->value);
        snprintf(rest, sizeof(rest), "4: [%s] %s: %s", b->section, b->key, b->why);
        expect_file_error(text, rest);
    }
}

static void test_error_quotes_are_bounded(void **state)
{
    /* a long bad token is cut in the message; a control byte is shown as '?' */
    char text[400], want[200];
    memset(want, 0, sizeof(want));
    snprintf(text, sizeof(text), "[limits]\nstore = %0200d\n", 7);
    snprintf(want, sizeof(want), "2: [limits] store: expected memory or redis, got \"%080d...\"", 0);
    expect_file_error(text, want);

    struct proxy_config cfg;
    char err[256];
    const char *env[] = {"TIERPROXY_LIMITS_STORE=red\x1bis", NULL};
    assert_int_equal(load(NULL, NULL, env, &cfg, NULL, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "TIERPROXY_LIMITS_STORE: expected memory or redis, got \"red?is\"");
}

static void test_structure_errors(void **state)
{
    expect_file_error("[proxy]\nlisten = 127.0.0.1:8080\nlisen = 127.0.0.1:8081\n",
                      "3: unknown key \"lisen\" in [proxy]; did you mean \"listen\"?");
    expect_file_error("[proxy]\nbogus_option = 1\n", "2: unknown key \"bogus_option\" in [proxy]");
    /* keys belong to their section: listen is known in [admin], store is not */
    expect_file_error("[admin]\nstore = redis\n", "2: unknown key \"store\" in [admin]");
    /* an unknown section is reported on the line of its first key ... */
    expect_file_error("[proxy]\nworkers = 1\n[limit]\n; comment\nstore = redis\n",
                      "5: unknown section [limit] for key \"store\" "
                      "(known: proxy, admin, auth, plans, limits, log)");
    /* ... and one with no keys on its own line, at the end of the file or before the next */
    expect_file_error("[proxy]\n[extra]\n",
                      "2: unknown section [extra] (known: proxy, admin, auth, plans, limits, log)");
    expect_file_error("[proxy]\n[extra]  ; nothing here\n\n[log]\nlevel = info\n",
                      "2: unknown section [extra] (known: proxy, admin, auth, plans, limits, log)");
    expect_file_error("[ proxy ]\nworkers = 1\n[Proxy]\nworkers = 2\n",
                      "4: unknown section [Proxy] for key \"workers\" "
                      "(known: proxy, admin, auth, plans, limits, log)");
    /* the unknown name is quoted like any token: a control character in it cannot break
     * the one-line message (found by tests/fuzz/fuzz_config) */
    expect_file_error("[pro=\x0f xy]\nlisten = 1.2.3.4:1\n",
                      "2: unknown section [pro=? xy] for key \"listen\" "
                      "(known: proxy, admin, auth, plans, limits, log)");
    expect_file_error("listen = 127.0.0.1:8080\n", "1: key \"listen\" outside any [section]");
    expect_file_error("[proxy]\nworkers = 1\n\nworkers = 2\n",
                      "4: [proxy] workers: set twice (first on line 2)");
    expect_file_error("[proxy]\nworkers = 1\njust some words\n",
                      "3: expected [section] or key = value");
    expect_file_error("[proxy\nworkers = 1\n", "1: expected [section] or key = value");
    /* an indented line is not a continuation of the previous value */
    expect_file_error("[proxy]\nexempt_paths = /a\n  /b\n", "3: expected [section] or key = value");

    /* an overlong line */
    size_t len = 20000;
    char *text = malloc(len + 32);
    assert_non_null(text);
    int o = snprintf(text, len + 32, "[proxy]\nexempt_paths = ");
    memset(text + o, 'a', len);
    memcpy(text + o + len, "\n", 2);
    expect_file_error(text, "2: line longer than 16384 bytes");

    /* exactly 16384 bytes before the newline is still fine */
    struct proxy_config c;
    len = 16384 - ((size_t)o - 8); /* line 2 starts after "[proxy]\n" */
    text[o] = '/';
    memset(text + o + 1, 'a', len - 1);
    memcpy(text + o + len, "\n", 2);
    assert_int_equal(strlen(text), 8 + 16384 + 1);
    load_text_ok(text, &c);
    assert_int_equal(strlen(c.exempt_paths[0]), len);
    config_free(&c);
    free(text);
}

static void test_missing_file(void **state)
{
    struct proxy_config cfg;
    enum config_action action;
    char err[512], want[512], path[128];
    snprintf(path, sizeof(path), "%s/does-not-exist.ini", tmpdir);
    assert_int_equal(load(path, NULL, NULL, &cfg, &action, err, sizeof(err)), -EINVAL);
    snprintf(want, sizeof(want), "cannot open config file \"%s\": No such file or directory", path);
    assert_string_equal(err, want);
    assert_null(cfg.listen_host);
}

/* ---------------------------------------------------------------- flags */

static void test_flags(void **state)
{
    struct proxy_config c;
    enum config_action action;
    char err[512];
    const char *args[] = {"--listen", "0.0.0.0:8000", "--upstream=http://u1:1/,http://u2:2",
                          "--db", "/tmp/p.db", "--redis=redis://r:6379/1",
                          "--admin", "[::1]:9999", NULL};
    assert_int_equal(load(NULL, args, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_RUN);
    assert_string_equal(c.listen_host, "0.0.0.0");
    assert_int_equal(c.listen_port, 8000);
    assert_int_equal(c.n_upstreams, 2);
    assert_string_equal(c.upstreams[0], "http://u1:1");
    assert_string_equal(c.upstreams[1], "http://u2:2");
    assert_string_equal(c.db, "/tmp/p.db");
    assert_string_equal(c.redis_url, "redis://r:6379/1");
    /* naming a redis server on the command line selects the redis store */
    assert_int_equal(c.store, STORE_REDIS);
    assert_string_equal(c.admin_host, "::1");
    assert_int_equal(c.admin_port, 9999);
    config_free(&c);

    /* --admin= turns the admin listener off; the last of a repeated flag wins */
    const char *args2[] = {"--admin=", "--db", "a.db", "--db=b.db", NULL};
    assert_int_equal(load(NULL, args2, NULL, &c, &action, err, sizeof(err)), 0);
    assert_null(c.admin_host);
    assert_string_equal(c.db, "b.db");
    config_free(&c);

    /* -cFILE, --config FILE and --config=FILE */
    const char *path = write_ini("[proxy]\nworkers = 7\n");
    char joined[256];
    snprintf(joined, sizeof(joined), "-c%s", path);
    const char *args3[] = {joined, NULL};
    assert_int_equal(load(NULL, args3, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(c.workers, 7);
    assert_string_equal(c.config_path, path);
    config_free(&c);
    snprintf(joined, sizeof(joined), "--config=%s", path);
    assert_int_equal(load(NULL, args3, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(c.workers, 7);
    config_free(&c);

    /* a bad flag value names the flag */
    const char *bad[] = {"--listen", "nope", NULL};
    assert_int_equal(load(NULL, bad, NULL, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "--listen: expected HOST:PORT (IPv6 as [::1]:8080), got \"nope\"");
    assert_null(c.listen_host);
    const char *bad2[] = {"--upstream=ftp://x", NULL};
    assert_int_equal(load(NULL, bad2, NULL, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "--upstream: expected http://HOST[:PORT][/PATH] or https://..., got \"ftp://x\"");
    /* https and http upstreams mix */
    const char *mixed[] = {"--upstream=https://a:8443/, http://b", NULL};
    assert_int_equal(load(NULL, mixed, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(c.n_upstreams, 2);
    assert_string_equal(c.upstreams[0], "https://a:8443");
    assert_true(c.upstream_tls_verify);
    assert_null(c.upstream_ca_file);
    config_free(&c);
    const char *bad3[] = {"--redis", "http://:pw@x:1", NULL};
    assert_int_equal(load(NULL, bad3, NULL, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "--redis: expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or "
                             "unix:///path, got \"http://:***@x:1\"");
}

static void test_actions(void **state)
{
    struct proxy_config c;
    enum config_action action;
    char err[512];

    const char *check[] = {"--check", NULL};
    assert_int_equal(load(NULL, check, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_CHECK);
    assert_defaults(&c);
    config_free(&c);

    /* --check still validates the file */
    const char *bad = write_ini("[limits]\nstore = rediss\n");
    assert_int_equal(load(bad, check, NULL, &c, &action, err, sizeof(err)), -EINVAL);

    const char *version[] = {"--version", NULL};
    assert_int_equal(load(NULL, version, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_VERSION);
    config_free(&c);

    /* --help and --version work even when the configuration is broken */
    const char *help[] = {"--help", NULL};
    assert_int_equal(load(bad, help, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_HELP);
    config_free(&c);
    const char *h[] = {"-h", "--check", NULL};
    assert_int_equal(load(NULL, h, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_HELP);
    config_free(&c);
    assert_int_equal(load(bad, version, NULL, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(action, CONFIG_VERSION);
    config_free(&c);

    const char *usage = config_usage();
    assert_non_null(strstr(usage, "usage: tierproxy [-c FILE]"));
    assert_non_null(strstr(usage, "--listen ADDR:PORT"));
    assert_non_null(strstr(usage, "--upstream URL"));
    assert_non_null(strstr(usage, "--db PATH"));
    assert_non_null(strstr(usage, "--redis URL"));
    assert_non_null(strstr(usage, "--admin ADDR:PORT"));
    assert_non_null(strstr(usage, "--check"));
    assert_non_null(strstr(usage, "--version"));
    assert_non_null(strstr(usage, "TIERPROXY_<SECTION>_<KEY>"));
}

static void test_usage_errors(void **state)
{
    static const char usage[] = "usage: tierproxy [-c FILE] [--listen ADDR:PORT] [--upstream URL] "
                                "[--db PATH] [--redis URL] [--admin ADDR:PORT] [--check] "
                                "[--version] [--help]";
    static const struct {
        const char *args[3];
        const char *what;
    } cases[] = {
        {{"--frobnicate", NULL}, "unknown option \"--frobnicate\""},
        {{"--workers=4", NULL}, "unknown option \"--workers=4\""},
        {{"--listen", NULL}, "missing value after \"--listen\""},
        {{"-c", NULL}, "missing FILE after \"-c\""},
        {{"extra", NULL}, "unexpected argument \"extra\""},
        {{"-x", NULL}, "unexpected argument \"-x\""},
        {{"--check=yes", NULL}, "unknown option \"--check=yes\""},
    };
    struct proxy_config c;
    enum config_action action;
    char err[512], want[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(load(NULL, cases[i].args, NULL, &c, &action, err, sizeof(err)), 2);
        snprintf(want, sizeof(want), "%s; %s", cases[i].what, usage);
        assert_string_equal(err, want);
        assert_null(c.listen_host);
    }
}

/* ---------------------------------------------------------------- environment */

static void test_env(void **state)
{
    struct proxy_config c;
    enum config_action action;
    char err[512];
    const char *env[] = {
        "PATH=/usr/bin",
        "TIERPROXY_LIMITS_STORE=redis",
        "TIERPROXY_LIMITS_ON_STORE_ERROR=closed",
        "TIERPROXY_ADMIN_LISTEN=",
        "TIERPROXY_PROXY_UPSTREAM=http://e1:1,http://e2:2/",
        "TIERPROXY_AUTH_ANONYMOUS_PLAN=free",
        "TIERPROXY_LOG_ACCESS=off",
        "TIERPROXY_PROXY_TRUSTED_PROXIES=127.0.0.1",
        "TIERPROXY_DB=/elsewhere/plans.db", /* tierctl's variable: not ours, not an error */
        "tierproxy_limits_headers=x",       /* lower case: not ours */
        NULL,
    };
    assert_int_equal(load(NULL, NULL, env, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(c.store, STORE_REDIS);
    assert_int_equal(c.rate_on_store_error, LIMITER_STORE_ERROR_CLOSED);
    assert_null(c.admin_host);
    assert_int_equal(c.n_upstreams, 2);
    assert_string_equal(c.upstreams[1], "http://e2:2");
    assert_string_equal(c.anonymous_plan, "free");
    assert_null(c.access_log);
    assert_int_equal(c.n_trusted_proxies, 1);
    assert_string_equal(c.db, "plans.db");
    assert_int_equal(c.headers, HEADERS_IETF);
    config_free(&c);

    /* a bad value names the variable */
    const char *bad[] = {"TIERPROXY_LIMITS_STORE=rediss", NULL};
    assert_int_equal(load(NULL, NULL, bad, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "TIERPROXY_LIMITS_STORE: expected memory or redis, got \"rediss\"");
    assert_null(c.listen_host);
    const char *bad2[] = {"TIERPROXY_PROXY_LISTEN=[::1]", NULL};
    assert_int_equal(load(NULL, NULL, bad2, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "TIERPROXY_PROXY_LISTEN: expected HOST:PORT (IPv6 as [::1]:8080), "
                             "got \"[::1]\"");
    /* a typo in the key of a known section is caught */
    const char *typo[] = {"TIERPROXY_LIMITS_STOR=redis", NULL};
    assert_int_equal(load(NULL, NULL, typo, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "TIERPROXY_LIMITS_STOR: unknown variable: [limits] has no such key");
    /* ... and its name is quoted: control characters become '?' (tests/fuzz/fuzz_config) */
    const char *ctl[] = {"TIERPROXY_LIMITS_\x1b[2J\n=1", NULL};
    assert_int_equal(load(NULL, NULL, ctl, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "TIERPROXY_LIMITS_?[2J?: unknown variable: [limits] has no such key");
}

static void test_precedence(void **state)
{
    struct proxy_config c;
    enum config_action action;
    char err[512];
    const char *file = write_ini("[proxy]\nlisten = 10.0.0.1:1001\nworkers = 2\n"
                                 "[limits]\nstore = redis\nheaders = x\n");
    const char *flags[] = {"--listen", "10.0.0.2:1002", NULL};
    const char *env[] = {"TIERPROXY_PROXY_LISTEN=10.0.0.3:1003", "TIERPROXY_LIMITS_STORE=memory",
                         NULL};

    /* file over defaults */
    assert_int_equal(load(file, NULL, NULL, &c, &action, err, sizeof(err)), 0);
    assert_string_equal(c.listen_host, "10.0.0.1");
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.store, STORE_REDIS);
    assert_int_equal(c.headers, HEADERS_X);
    assert_int_equal(c.upstream_timeout_ms, 30000); /* default kept */
    config_free(&c);

    /* flag over file */
    assert_int_equal(load(file, flags, NULL, &c, &action, err, sizeof(err)), 0);
    assert_string_equal(c.listen_host, "10.0.0.2");
    assert_int_equal(c.listen_port, 1002);
    assert_int_equal(c.workers, 2);
    config_free(&c);

    /* environment over file */
    assert_int_equal(load(file, NULL, env, &c, &action, err, sizeof(err)), 0);
    assert_string_equal(c.listen_host, "10.0.0.3");
    assert_int_equal(c.listen_port, 1003);
    assert_int_equal(c.store, STORE_MEMORY);
    config_free(&c);

    /* flag over environment and file, whatever the order in argv */
    assert_int_equal(load(file, flags, env, &c, &action, err, sizeof(err)), 0);
    assert_string_equal(c.listen_host, "10.0.0.2");
    assert_int_equal(c.listen_port, 1002);
    assert_int_equal(c.store, STORE_MEMORY);
    assert_int_equal(c.headers, HEADERS_X);
    config_free(&c);
    const char *redis_flag[] = {"--redis", "redis://10.0.0.5:6379/0", NULL};
    assert_int_equal(load(file, redis_flag, env, &c, &action, err, sizeof(err)), 0);
    assert_int_equal(c.store, STORE_REDIS); /* --redis sets store = redis over the variable */
    config_free(&c);

    /* a flag placed before -c still beats the file */
    const char *before[] = {"--listen=10.0.0.4:1004", "-c", file, NULL};
    assert_int_equal(load(NULL, before, NULL, &c, &action, err, sizeof(err)), 0);
    assert_string_equal(c.listen_host, "10.0.0.4");
    config_free(&c);

    /* a bad flag is an error even when the environment sets the key well */
    const char *badflag[] = {"--listen", "x", NULL};
    assert_int_equal(load(file, badflag, env, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "--listen: expected HOST:PORT (IPv6 as [::1]:8080), got \"x\"");
}

struct problems {
    char lines[12][512];
    size_t n;
};

static void collect(void *ctx, const char *where, const char *why)
{
    struct problems *p = ctx;
    if (p->n < 12)
        snprintf(p->lines[p->n++], sizeof(p->lines[0]), "%s|%s", where, why);
}

/* Every bad value is reported in one load, in the order found: the file's, the
 * environment's, the flags'; the first is in err. */
static void test_every_problem_is_reported(void **state)
{
    const char *path = write_ini("[proxy]\nworkers = lots\nlisten = nope\n[nosuch]\nx = 1\n[limits]\n"
                                 "headers = rfc\nbogus line\nheaders = x\n[empty]\n");
    char *argv[] = {(char *)"tierproxy", (char *)"-c", (char *)path, (char *)"--upstream=ftp://x", NULL};
    char *envp[] = {(char *)"TIERPROXY_LIMITS_STORE=rediss", (char *)"TIERPROXY_LIMITS_STOR=x", NULL};
    struct proxy_config c;
    enum config_action action;
    struct problems got = {.n = 0};
    char err[512], want[12][512];
    int n = 0;
    snprintf(want[n++], sizeof(want[0]), "%s:2: [proxy] workers|expected a whole number from 0 to 1024, got \"lots\"",
             path);
    snprintf(want[n++], sizeof(want[0]), "%s:3: [proxy] listen|expected HOST:PORT (IPv6 as [::1]:8080), got \"nope\"",
             path);
    snprintf(want[n++], sizeof(want[0]),
             "%s:5|unknown section [nosuch] for key \"x\" (known: proxy, admin, auth, plans, limits, log)", path);
    snprintf(want[n++], sizeof(want[0]), "%s:7: [limits] headers|expected draft, ietf, x or off, got \"rfc\"", path);
    snprintf(want[n++], sizeof(want[0]), "%s:8|expected [section] or key = value", path);
    snprintf(want[n++], sizeof(want[0]), "%s:9: [limits] headers|set twice (first on line 7)", path);
    snprintf(want[n++], sizeof(want[0]), "%s:10|unknown section [empty] (known: proxy, admin, auth, plans, limits, log)",
             path);
    snprintf(want[n++], sizeof(want[0]), "TIERPROXY_LIMITS_STORE|expected memory or redis, got \"rediss\"");
    snprintf(want[n++], sizeof(want[0]), "TIERPROXY_LIMITS_STOR|unknown variable: [limits] has no such key");
    snprintf(want[n++], sizeof(want[0]), "--upstream|expected http://HOST[:PORT][/PATH] or https://..., got \"ftp://x\"");
    assert_int_equal(config_load_reported(4, argv, envp, &c, &action, collect, &got, err, sizeof(err)), -EINVAL);
    for (int i = 0; i < n && i < (int)got.n; i++)
        assert_string_equal(got.lines[i], want[i]);
    assert_int_equal(got.n, n);
    snprintf(want[0], sizeof(want[0]), "%s:2: [proxy] workers: expected a whole number from 0 to 1024, got \"lots\"",
             path);
    assert_string_equal(err, want[0]);
    assert_null(c.listen_host);
}

/* A URL in a message: quoted with each password as ***, never in clear. */
static void test_quote_url_masks_passwords(void **state)
{
    static const struct {
        const char *url, *want;
    } cases[] = {
        {"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
        {"redis://:pw@h:1/0", "redis://:***@h:1/0"},
        {"redis://alice:pw@h:1/0", "redis://alice:***@h:1/0"},
        {"rediss://pw@h:1/0", "rediss://***@h:1/0"},
        {"redis://a:p@ss@h:1", "redis://a:***@h:1"},      /* an '@' in the password */
        {"redis://a:p/w@h:1", "redis://a:***@h:1"},       /* a '/' in the password */
        {"redis://a:p@h1:1,redis://b:q@h2:2", "redis://a:***@h1:1,redis://b:***@h2:2"},
        {"redis://h1:1,redis://:q@h2:2", "redis://h1:1,redis://:***@h2:2"},
        {"u:pw@h:1", "u:***@h:1"},
        {"http://user:pw@up:80/x", "http://user:***@up:80/x"},
        {"", ""},
    };
    char buf[96];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_string_equal(config_quote_url(cases[i].url, buf, sizeof(buf)), cases[i].want);
}

struct setting_seen {
    char value[128], source[256];
};

static void find_listen(void *ctx, const char *name, const char *value, const char *source)
{
    struct setting_seen *seen = ctx;
    if (strcmp(name, "[proxy] listen") == 0) {
        snprintf(seen->value, sizeof(seen->value), "%s", value);
        snprintf(seen->source, sizeof(seen->source), "%s", source);
    } else if (strcmp(name, "[limits] redis") == 0) {
        assert_null(strstr(value, "secret"));
    }
}

/* What [log] level = debug lists: each setting's text and where it came from. */
static void test_settings_name_their_source(void **state)
{
    struct proxy_config c;
    enum config_action action;
    char err[512], want[256];
    struct setting_seen seen = {"", ""};
    const char *path = write_ini("[proxy]\nlisten = localhost:81\n[limits]\nredis = redis://:secret@h:1/0\n");
    const char *flag[] = {"--listen", "10.0.0.9:99", NULL};
    const char *env[] = {"TIERPROXY_PROXY_LISTEN=10.0.0.8:98", NULL};
    snprintf(want, sizeof(want), "%s:2", path);
    assert_int_equal(load(path, NULL, NULL, &c, &action, err, sizeof(err)), 0);
    config_settings(&c, find_listen, &seen);
    assert_string_equal(seen.value, "localhost:81");
    assert_string_equal(seen.source, want);
    config_free(&c);
    assert_int_equal(load(path, NULL, env, &c, &action, err, sizeof(err)), 0);
    config_settings(&c, find_listen, &seen);
    assert_string_equal(seen.value, "10.0.0.8:98");
    assert_string_equal(seen.source, "TIERPROXY_PROXY_LISTEN");
    config_free(&c);
    assert_int_equal(load(path, flag, env, &c, &action, err, sizeof(err)), 0);
    config_settings(&c, find_listen, &seen);
    assert_string_equal(seen.value, "10.0.0.9:99");
    assert_string_equal(seen.source, "--listen");
    config_free(&c);
    assert_int_equal(load(NULL, NULL, NULL, &c, &action, err, sizeof(err)), 0);
    config_settings(&c, find_listen, &seen);
    assert_string_equal(seen.value, "127.0.0.1:8080");
    assert_string_equal(seen.source, "the default");
    config_free(&c);
}

/* ---------------------------------------------------------------- reload */

static void rewrite(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_reload(void **state)
{
    struct proxy_config cur, fresh;
    enum config_action action;
    char err[512];
    const char *path = write_ini("[proxy]\nworkers = 2\n[limits]\nheaders = x\n");
    char *argv[] = {(char *)"tierproxy", (char *)"-c", (char *)path, (char *)"--db",
                    (char *)"flag.db", NULL};
    char *envp[] = {(char *)"TIERPROXY_LOG_LEVEL=warn", NULL};

    assert_int_equal(config_load(5, argv, envp, &cur, &action, err, sizeof(err)), 0);
    assert_int_equal(cur.workers, 2);
    assert_int_equal(cur.headers, HEADERS_X);

    /* the edited file is read again; flags and environment still apply on top */
    rewrite(path, "[proxy]\nworkers = 3\n[limits]\nheaders = ietf\n[plans]\ndb = file.db\n");
    assert_int_equal(config_reload(&cur, 5, argv, envp, &fresh, err, sizeof(err)), 0);
    assert_int_equal(fresh.workers, 3);
    assert_int_equal(fresh.headers, HEADERS_IETF);
    assert_string_equal(fresh.db, "flag.db");
    assert_string_equal(fresh.log_level, "warn");
    assert_string_equal(fresh.config_path, path);
    config_free(&fresh);

    /* a broken edit is refused with its line, leaving fresh empty; cur stays usable */
    rewrite(path, "[proxy]\nworkers = 3\nworkers = lots\n");
    assert_int_equal(config_reload(&cur, 5, argv, envp, &fresh, err, sizeof(err)), -EINVAL);
    char want[512];
    snprintf(want, sizeof(want), "%s:3: [proxy] workers: set twice (first on line 2)", path);
    assert_string_equal(err, want);
    assert_null(fresh.listen_host);
    assert_int_equal(cur.workers, 2);

    /* how many settings the file itself gave: none in an empty one (main.c keeps the
       running configuration then), the flags and variables not counted */
    assert_int_equal(cur.file_settings, 2);
    const char *empty[] = {"", " \n\t\n", "; only\n# comments\n", "\xEF\xBB\xBF[proxy]\n[limits]\n"};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        rewrite(path, empty[i]);
        assert_int_equal(config_reload(&cur, 5, argv, envp, &fresh, err, sizeof(err)), 0);
        assert_int_equal(fresh.file_settings, 0);
        config_free(&fresh);
    }
    config_free(&cur);
}

static void test_null_and_small_buffers(void **state)
{
    struct proxy_config c;
    enum config_action action;
    char err[16];
    /* a NULL or tiny error buffer is fine */
    const char *bad[] = {"TIERPROXY_LIMITS_STORE=rediss", NULL};
    assert_int_equal(load(NULL, NULL, bad, &c, &action, NULL, 0), -EINVAL);
    assert_int_equal(load(NULL, NULL, bad, &c, &action, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "TIERPROXY_LIMIT"); /* cut at 15 bytes */
    /* argc 0, argv NULL, envp NULL */
    assert_int_equal(config_load(0, NULL, NULL, &c, &action, err, sizeof(err)), 0);
    assert_defaults(&c);
    config_free(&c);
    assert_int_equal(config_load(0, NULL, NULL, NULL, &action, err, sizeof(err)), -EINVAL);
}

/* ---------------------------------------------------------------- fixture */

static int setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_config.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char path[128];
    for (int i = 0; i < n_files; i++) {
        snprintf(path, sizeof(path), "%s/t%d.ini", tmpdir, i);
        unlink(path);
    }
    return rmdir(tmpdir);
}

/* config_origin names where each value came from, for errors found after loading. */
static void test_origin_names_file_line_flag_or_variable(void **state)
{
    (void)state;
    struct proxy_config cfg;
    enum config_action action;
    char err[512], buf[512], want[512];
    const char *path = write_ini("[proxy]\nworkers = 2\n\n[auth]\nanonymous_plan = guests\n");
    const char *args[] = {"--redis", "redis://127.0.0.1:6379/0", NULL};
    const char *env[] = {"TIERPROXY_LOG_ACCESS=off", NULL};
    assert_int_equal(load(path, args, env, &cfg, &action, err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s:5: [auth] anonymous_plan", path);
    assert_string_equal(config_origin(&cfg, "auth", "anonymous_plan", buf, sizeof(buf)), want);
    assert_string_equal(config_origin(&cfg, "limits", "redis", buf, sizeof(buf)), "--redis");
    assert_string_equal(config_origin(&cfg, "limits", "store", buf, sizeof(buf)), "--redis");
    assert_string_equal(config_origin(&cfg, "log", "access", buf, sizeof(buf)), "TIERPROXY_LOG_ACCESS");
    assert_string_equal(config_origin(&cfg, "plans", "db", buf, sizeof(buf)), "[plans] db (default)");
    config_free(&cfg);
}

int main(int argc, char **argv)
{
    example_ini = argc > 1 ? argv[1] : "etc/tierproxy.ini";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_example_file_is_the_defaults),
        cmocka_unit_test(test_every_directive_set),
        cmocka_unit_test(test_good_value_forms),
        cmocka_unit_test(test_comments_and_layout),
        cmocka_unit_test(test_bad_values_name_file_line_key),
        cmocka_unit_test(test_error_quotes_are_bounded),
        cmocka_unit_test(test_structure_errors),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_actions),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_every_problem_is_reported),
        cmocka_unit_test(test_quote_url_masks_passwords),
        cmocka_unit_test(test_settings_name_their_source),
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_null_and_small_buffers),
        cmocka_unit_test(test_origin_names_file_line_flag_or_variable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
