/* Renders RateLimit response headers in the configured style. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Styles are bits: `headers = draft, ietf` is HEADERS_DRAFT | HEADERS_IETF. */
enum header_style {
    HEADERS_OFF = 0,
    HEADERS_DRAFT = 1u << 0, /* RateLimit-Limit/-Remaining/-Reset/-Policy of the closest limit */
    HEADERS_IETF = 1u << 1,  /* draft-ietf-httpapi-ratelimit-headers-11 structured fields */
    HEADERS_X = 1u << 2,     /* X-RateLimit-Limit/-Remaining/-Reset (Unix time) */
};
#define HEADERS_ALL (HEADERS_DRAFT | HEADERS_IETF | HEADERS_X)

/* Returns 0 and sets *pstyle for one name: "draft", "ietf", "x", "off"; -EINVAL otherwise. */
int header_style_parse(const char *text, enum header_style *pstyle);

/* Parses a comma-separated list of styles ("draft, ietf") into a set of bits in *pstyles.
 * "off" alone is the empty set. Returns 0, or -EINVAL with the reason in why: an unknown
 * or empty name, a name given twice, or "off" combined with another style. */
int header_styles_parse(const char *text, unsigned *pstyles, char *why, size_t whylen);

struct ratelimit_item {
    const char *name;        /* policy name for ietf ("free-1min", "pro-POST /upload-10s") */
    int64_t limit;           /* rate + burst, or the concurrency N */
    int64_t remaining;
    int64_t reset_ms;        /* ms until one more request frees up */
    int64_t window_ms;       /* 0 for a concurrency limit */
    bool concurrency;        /* ietf: qu="concurrent-requests" */
    bool rejected;           /* this limit refused the request */
};

/* The index of the limit closest to running out, the one the draft and x styles and the
 * access log's limit/remaining describe. One rule: a limit that refused the request comes
 * first; then rate limits before concurrency limits (a count of requests open right now
 * has no window to pace by, so it is shown only when it refuses or is all there is); then
 * the fewest remaining; then the longest reset; then the earlier item. Among refusing
 * limits this picks a rate limit (the error code says rate_limit_exceeded then) with the
 * longest wait. n must be >= 1. */
size_t ratelimit_closest(const struct ratelimit_item *items, size_t n);

typedef void header_add_fn(void *arg, const char *name, const char *value);

/* Adds the headers of every style in styles (HEADERS_* bits) for items[0..n) through
 * add(). draft and x describe only ratelimit_closest(); ietf lists every item in
 * RateLimit-Policy and RateLimit. Where draft and ietf share RateLimit-Policy, it is one
 * field: the draft item first, then the ietf items. now_unix_ms is the clock for x's
 * Unix-time reset. Nothing is added for HEADERS_OFF or n == 0. */
void ratelimit_headers_render(unsigned styles, const struct ratelimit_item *items, size_t n,
                              int64_t now_unix_ms, header_add_fn *add, void *arg);


/* The name an ietf item carries for a limit named `name` (characters a structured-field
 * string cannot hold become '?'), without the sf-string's quotes and escapes: what a 429's
 * "violated-policies" lists. Returns a copy the caller frees, or NULL when out of memory. */
char *ratelimit_policy_name(const char *name);

/* Whole seconds a client should wait: ceil(reset_ms / 1000), at least 1. */
int64_t ratelimit_retry_after_s(int64_t reset_ms);
