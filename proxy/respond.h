/* The proxy's own answers: RFC 9457 problem bodies (problem.h) for every error, and
 * RateLimit headers. */
#pragma once
#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/gate.h"
#include "proxy/ratelimit_headers.h"
#include "store/limiter.h"

/* Sends the error answer `status` (the problem body of status and error_code) with
 * Connection: close straight on a socket no response has started on, then shuts its
 * sending side. For answers that libmicrohttpd cannot queue: before it has the connection
 * (intake.c) and in the middle of a request body (request.c). The socket's send buffer is
 * empty, so one send() takes it. */
void respond_send_closing(int fd, unsigned status, const char *error_code);

/* All three store the body's length in *body_bytes (for the access log) unless it is NULL,
 * and return NULL on allocation failure. */

/* The problem answer (problem.h) of an error_code whose status is its own
 * (problem_status: upstream_timeout 504, ...). */
struct MHD_Response *respond_error(const char *error_code, uint64_t *body_bytes);

/* The problem body (problem.h) of `status` and error_code, application/problem+json. */
struct MHD_Response *respond_problem(unsigned status, const char *error_code, uint64_t *body_bytes);

/* The 429 of a GATE_LIMITED outcome (its error_code: "rate_limit_exceeded",
 * "quota_exceeded" or "concurrency_limit_exceeded"; its retry_after_s as Retry-After), with
 * a problem body (problem_limited) whose "violated-policies" names every limit of `check`
 * that `result` refused, by the name its ietf RateLimit items carry
 * (ratelimit_policy_name). */
struct MHD_Response *respond_limited(const struct gate_check *check, const struct limiter_result *result,
                                     const struct gate_outcome *out, uint64_t *body_bytes);

/* Adds the RateLimit headers of a decided check (the limits `check` met, the store's
 * `result` on them; none when result is NULL or undecided) in the configured styles
 * (proxy_config.headers). */
void respond_add_ratelimit_headers(unsigned styles, const struct gate_check *check, const struct limiter_result *result,
                                   struct MHD_Response *response);

/* The same fields given to add(arg, name, value) one by one (for a response written without
 * libmicrohttpd, raw_response.c). */
void respond_ratelimit_fields(unsigned styles, const struct gate_check *check, const struct limiter_result *result,
                              header_add_fn *add, void *arg);

/* The verdict of the limit closest to running out (ratelimit_closest's rule), which the
 * draft and x headers and the access log's limit/remaining describe; for a refused request
 * one that refused it. NULL without a decided check. Points into result. */
const struct limit_verdict *respond_closest_verdict(const struct gate_check *check, const struct limiter_result *result);

