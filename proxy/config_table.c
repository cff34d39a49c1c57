/* The table of tierproxy's configuration directives, and what goes with it: where each
 * value came from, the messages that quote values, freeing. The setters that read the
 * values: config_values.c. See config_table.h. */
#include "proxy/config_table.h"

#include "proxy/config_values.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TIMEOUT_MS INT64_C(86400000) /* one day */

_Static_assert(sizeof(enum store_kind) == sizeof(int), "D_ENUM writes an int");
_Static_assert(sizeof(enum limiter_store_error) == sizeof(int), "D_ENUM writes an int");
_Static_assert(sizeof(enum redis_mode) == sizeof(int), "D_ENUM writes an int");

static const struct word bool_words[] = {
    {"yes", 1}, {"no", 0}, {"true", 1}, {"false", 0}, {"on", 1}, {"off", 0},
    {"1", 1},   {"0", 0},  {NULL, 0},
};
static const struct word store_error_words[] = {
    {"open", LIMITER_STORE_ERROR_OPEN}, {"closed", LIMITER_STORE_ERROR_CLOSED}, {"local", LIMITER_STORE_ERROR_LOCAL},
    {NULL, 0}};
static const struct word path_case_words[] = {{"insensitive", 1}, {"sensitive", 0}, {NULL, 0}};
static const struct word underscore_words[] = {{"forward", 1}, {"drop", 0}, {NULL, 0}};
static const struct word ws_refusal_words[] = {{"close", 1}, {"status", 0}, {NULL, 0}};
static const struct word store_words[] = {
    {"memory", STORE_MEMORY}, {"redis", STORE_REDIS}, {NULL, 0}};
static const struct word follow_words[] = {{"none", 0}, {"redis", 1}, {NULL, 0}};
static const struct word redis_mode_words[] = {
    {"single", REDIS_MODE_SINGLE}, {"cluster", REDIS_MODE_CLUSTER}, {NULL, 0}};
static const struct word level_words[] = {
    {"debug", 0}, {"info", 1}, {"warn", 2}, {"error", 3}, {NULL, 0}};

#define OFF(field) offsetof(struct proxy_config, field)
#define HOSTPORT_EXPECT "HOST:PORT (IPv6 as [::1]:8080)"

/* One row per directive: the per-type macro says how its value is read and where it goes
 * (setter, field, bounds or words); the rest is named: flags, the default as written in
 * the file (the example file and the man page say the same: tests/unit/proxy), the
 * command-line flag, and what an error message says it expected. */
#define HOSTPORT_IN(host, port) .type = D_HOSTPORT, .set = config_set_hostport, .offset = OFF(host), .offset2 = OFF(port)
#define LIST_IN(t, setter, list, count) .type = t, .set = setter, .offset = OFF(list), .offset2 = OFF(count)
#define NUMBER_IN(t, field, lo, hi) .type = t, .set = config_set_number, .offset = OFF(field), .min = (lo), .max = (hi)
#define INT_IN(field, lo, hi) NUMBER_IN(D_INT, field, lo, hi)
#define INT64_IN(field, lo, hi) NUMBER_IN(D_INT64, field, lo, hi)
#define WORDS_IN(t, setter, field, w) .type = t, .set = setter, .offset = OFF(field), .words = (w)
#define VALUE_IN(t, setter, field) .type = t, .set = setter, .offset = OFF(field)
#define STRING_IN(field) VALUE_IN(D_STRING, config_set_string, field)
#define TOKEN_IN(field) VALUE_IN(D_TOKEN, config_set_token, field)
#define FLAG_IN(field, w) WORDS_IN(D_BOOL, config_set_number, field, w)
#define ENUM_IN(field, w) WORDS_IN(D_ENUM, config_set_number, field, w)
#define A_FILE "a PEM file of CA certificates, or empty for the system's"

const struct directive config_directives[] = {
    {"proxy", "listen", HOSTPORT_IN(listen_host, listen_port), .flags = F_RESTART, .def = "127.0.0.1:8080",
     .flag = "--listen", .expect = HOSTPORT_EXPECT},
    {"proxy", "upstream", LIST_IN(D_URLS, config_set_urls, upstreams, n_upstreams), .def = "http://127.0.0.1:3000",
     .flag = "--upstream", .expect = "comma-separated http:// or https:// URLs"},
    {"proxy", "upstream_ca_file", STRING_IN(upstream_ca_file), .flags = F_EMPTY_NULL | F_READABLE, .def = "",
     .expect = A_FILE},
    {"proxy", "upstream_tls_verify", FLAG_IN(upstream_tls_verify, bool_words), .def = "yes", .expect = "yes or no"},
    {"proxy", "workers", INT_IN(workers, 0, CONFIG_MAX_WORKERS), .flags = F_RESTART, .def = "0"},
    {"proxy", "connect_timeout_ms", INT64_IN(connect_timeout_ms, 1, MAX_TIMEOUT_MS), .def = "2000"},
    {"proxy", "upstream_timeout_ms", INT64_IN(upstream_timeout_ms, 1, MAX_TIMEOUT_MS), .def = "30000"},
    {"proxy", "websocket_idle_timeout_ms", INT64_IN(websocket_idle_timeout_ms, 0, MAX_TIMEOUT_MS), .def = "3600000"},
    {"proxy", "upstream_max_inflight", INT64_IN(upstream_max_inflight, 0, INT64_C(1000000000)), .def = "0"},
    {"proxy", "max_body_bytes", INT64_IN(max_body_bytes, 0, INT64_C(1) << 40), .def = "10485760"},
    {"proxy", "trusted_proxies", LIST_IN(D_CIDRS, config_set_cidrs, trusted_proxies, n_trusted_proxies), .def = "",
     .expect = "comma-separated CIDRs such as 10.0.0.0/8 or ::1/128"},
    {"proxy", "exempt_paths", LIST_IN(D_PATHS, config_set_paths, exempt_paths, n_exempt_paths), .def = "",
     .expect = "comma-separated path prefixes starting with /"},
    {"proxy", "path_case", FLAG_IN(path_case_insensitive, path_case_words), .def = "sensitive",
     .expect = "sensitive or insensitive"},
    {"proxy", "underscores_in_headers", FLAG_IN(underscores_forward, underscore_words), .def = "drop",
     .expect = "drop or forward"},
    {"admin", "listen", HOSTPORT_IN(admin_host, admin_port), .flags = F_EMPTY_NULL | F_RESTART,
     .def = "127.0.0.1:9090", .flag = "--admin", .expect = HOSTPORT_EXPECT " or empty for off"},
    {"auth", "key_header", TOKEN_IN(key_header), .def = "Authorization", .expect = "a header name"},
    {"auth", "anonymous_plan", STRING_IN(anonymous_plan), .flags = F_EMPTY_NULL, .def = "",
     .expect = "a plan name or empty"},
    {"auth", "forward_key", FLAG_IN(forward_key, bool_words), .def = "no", .expect = "yes or no"},
    {"auth", "key_query", TOKEN_IN(key_query), .flags = F_EMPTY_NULL, .def = "",
     .expect = "a query parameter name, or empty for off"},
    {"auth", "ws_refusal", FLAG_IN(ws_refusal_close, ws_refusal_words), .def = "status", .expect = "status or close"},
    {"plans", "db", STRING_IN(db), .flags = F_RESTART, .def = "plans.db", .flag = "--db", .expect = "a file path"},
    {"plans", "refresh_ms", INT64_IN(refresh_ms, 1, MAX_TIMEOUT_MS), .flags = F_RESTART, .def = "1000"},
    {"plans", "follow", FLAG_IN(follow_redis, follow_words), .flags = F_RESTART, .def = "none",
     .expect = "none or redis"},
    {"limits", "store", ENUM_IN(store, store_words), .flags = F_RESTART, .def = "memory", .expect = "memory or redis"},
    {"limits", "redis_mode", ENUM_IN(redis_mode, redis_mode_words), .flags = F_RESTART, .def = "single",
     .expect = "single or cluster"},
    {"limits", "redis", VALUE_IN(D_REDIS_URL, config_set_redis_url, redis_url), .flags = F_RESTART,
     .def = "redis://127.0.0.1:6379/0", .flag = "--redis",
     .expect = "redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:///path"},
    {"limits", "redis_ca_file", STRING_IN(redis_ca_file), .flags = F_EMPTY_NULL | F_READABLE | F_RESTART, .def = "",
     .expect = A_FILE},
    {"limits", "key_prefix", STRING_IN(key_prefix), .flags = F_EMPTY_OK | F_RESTART, .def = "tierproxy:",
     .expect = "a key prefix"},
    {"limits", "on_store_error", ENUM_IN(rate_on_store_error, store_error_words), .def = "local",
     .expect = "open, closed or local"},
    {"limits", "concurrency_on_store_error", ENUM_IN(concurrency_on_store_error, store_error_words), .def = "local",
     .expect = "open, closed or local"},
    {"limits", "local_share", VALUE_IN(D_SHARE, config_set_share, local_share), .def = "1.0",
     .expect = "a number greater than 0 and at most 1"},
    {"limits", "lease_ttl_ms", INT64_IN(lease_ttl_ms, 1, MAX_TIMEOUT_MS), .flags = F_RESTART, .def = "30000"},
    {"limits", "memory_max_subjects", INT64_IN(memory_max_subjects, 1, INT64_C(1000000000)), .flags = F_RESTART,
     .def = "1000000"},
    {"limits", "headers", VALUE_IN(D_STYLES, config_set_styles, headers), .def = "ietf",
     .expect = "a comma-separated list of draft, ietf, x; or off"},
    {"log", "access", VALUE_IN(D_ACCESS_LOG, config_set_access_log, access_log), .flags = F_RESTART, .def = "stdout",
     .expect = "stdout, off or a file path"},
    {"log", "level", WORDS_IN(D_WORD, config_set_word, log_level, level_words), .def = "info",
     .expect = "debug, info, warn or error"},
};
const size_t config_n_directives = sizeof(config_directives) / sizeof(config_directives[0]);

const char *const config_sections[] = {"proxy", "admin", "auth", "plans", "limits", "log"};
const size_t config_n_sections = sizeof(config_sections) / sizeof(config_sections[0]);

const struct directive *config_find_directive(const char *section, const char *key)
{
    for (size_t i = 0; i < config_n_directives; i++)
        if (strcmp(config_directives[i].section, section) == 0 && strcmp(config_directives[i].key, key) == 0)
            return &config_directives[i];
    return NULL;
}

bool config_known_section(const char *s)
{
    for (size_t i = 0; i < config_n_sections; i++)
        if (strcmp(config_sections[i], s) == 0)
            return true;
    return false;
}

void config_env_name(const struct directive *d, char *buf, size_t buflen)
{
    size_t o = (size_t)snprintf(buf, buflen, "TIERPROXY_%s_%s", d->section, d->key);
    for (size_t i = 0; i < o && i < buflen; i++)
        buf[i] = (char)toupper((unsigned char)buf[i]);
}

void config_report(struct config_report *r, const char *where, const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (r->count++ == 0 && r->first != NULL && r->first_len > 0)
        snprintf(r->first, r->first_len, "%s%s%s", where, where[0] != '\0' ? ": " : "", why);
    if (r->fn != NULL)
        r->fn(r->ctx, where, why);
}

void config_table_free(struct proxy_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
        char *field = (char *)cfg + d->offset;
        switch (d->type) {
        case D_URLS:
        case D_PATHS:
            config_strv_free(*(char ***)field, *(size_t *)((char *)cfg + d->offset2));
            break;
        case D_CIDRS:
            free(*(struct cidr **)field);
            break;
        case D_HOSTPORT:
        case D_STRING:
        case D_TOKEN:
        case D_WORD:
        case D_REDIS_URL:
        case D_ACCESS_LOG:
            free(*(char **)field);
            break;
        case D_INT:
        case D_INT64:
        case D_BOOL:
        case D_ENUM:
        case D_STYLES:
        case D_SHARE:
            break;
        }
    }
    for (size_t i = 0; cfg->origins != NULL && i < config_n_directives; i++)
        free(cfg->origins[i].value);
    free(cfg->config_path);
    free(cfg->origins);
    memset(cfg, 0, sizeof(*cfg));
}

int config_set_origin(struct proxy_config *cfg, const struct directive *d, enum origin_kind kind, int line,
                      const char *flag, const char *value)
{
    char *text = NULL;
    if (value != NULL) {
        text = d->type == D_REDIS_URL || d->type == D_URLS ? config_masked_copy(value) : strdup(value);
        if (text == NULL)
            return -ENOMEM;
        char *trimmed = config_trim(text);
        memmove(text, trimmed, strlen(trimmed) + 1);
    }
    struct config_origin *o = &cfg->origins[d - config_directives];
    free(o->value);
    *o = (struct config_origin){kind, line, flag, text};
    return 0;
}

