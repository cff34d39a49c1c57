/* Renders RateLimit response headers in the configured style. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum header_style {
    HEADERS_DRAFT = 0,   /* RateLimit-Limit/-Remaining/-Reset/-Policy of the closest limit */
    HEADERS_IETF,        /* draft-ietf-httpapi-ratelimit-headers-11 structured fields */
    HEADERS_X,           /* X-RateLimit-Limit/-Remaining/-Reset (Unix time) */
    HEADERS_OFF,
};

/* Returns 0 and sets *pstyle for "draft", "ietf", "x", "off"; -EINVAL otherwise. */
int header_style_parse(const char *text, enum header_style *pstyle);

struct ratelimit_item {
    const char *name;        /* policy name for ietf ("free", "free-12") */
    int64_t limit;           /* rate + burst, or the concurrency N */
    int64_t remaining;
    int64_t reset_ms;        /* ms until one more request frees up */
    int64_t window_ms;       /* 0 for a concurrency limit */
    bool concurrency;        /* ietf: qu="concurrent-requests" */
};

typedef void header_add_fn(void *arg, const char *name, const char *value);

/* Adds the headers for items[0..n) through add(). draft and x describe only the item
 * closest to running out (an exhausted one, else rate before concurrency, then least
 * remaining, then longest reset); ietf lists every item in
 * RateLimit-Policy and RateLimit. now_unix_ms is the clock for x's Unix-time reset.
 * Nothing is added for HEADERS_OFF or n == 0. */
void ratelimit_headers_render(enum header_style style, const struct ratelimit_item *items, size_t n,
                              int64_t now_unix_ms, header_add_fn *add, void *arg);

/* Whole seconds a client should wait: ceil(reset_ms / 1000), at least 1. */
int64_t ratelimit_retry_after_s(int64_t reset_ms);
