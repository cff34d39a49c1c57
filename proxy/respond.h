/* The proxy's own answers: JSON error bodies and RateLimit headers. */
#pragma once
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/request.h"

/* The body of every JSON error, {"error_code": code}, into buf; its length (snprintf's). */
int respond_error_body(char *buf, size_t cap, const char *error_code);

/* Both record the body length in r->bytes_sent.
 * A JSON error response {"error_code": code} with Content-Type: application/json.
 * Returns NULL on allocation failure. */
struct MHD_Response *respond_error(struct request *r, const char *error_code);

/* A 429 body for code "rate_limit_exceeded" or "concurrency_limit_exceeded", with
 * Retry-After. */
struct MHD_Response *respond_limited(struct request *r, const char *error_code, int64_t retry_after_s);

/* Adds r's RateLimit headers (from its verdict) to response, in the configured style. */
void respond_add_ratelimit_headers(const struct request *r, struct MHD_Response *response);

/* Whole seconds until every rejecting rule of r's verdict has a slot free. */
int64_t respond_retry_after_s(const struct request *r);
