/* RFC 9457 problem details: every error answer's body as application/problem+json, with
 * the members SPEC names: type, title, status, detail, and the proxy's error_code; a 429
 * adds retry_after and violated-policies (draft-ietf-httpapi-ratelimit-headers-11).
 *
 * type is about:blank and title the status's reason phrase; each error_code has one status
 * (problem_status), so respond_error(code) needs no other, while answers whose status
 * travels with the code (the head's verdict, the gate's refusal, a handshake's failure)
 * pass both. A 429's type is
 * https://iana.org/assignments/http-problem-types#quota-exceeded; its violated-policies
 * names every limit of the check whose verdict refused, as its ietf RateLimit-Policy item
 * is named (ratelimit_policy_name), whatever [headers] says; a cost-weighted request names
 * the limit it would overrun even when units are left.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define PROBLEM_CONTENT_TYPE "application/problem+json"

/* The problem type draft-ietf-httpapi-ratelimit-headers-11 registers for a request over a
 * quota policy: what every 429 of the proxy is (rate, quota and concurrency limits alike). */
#define PROBLEM_TYPE_QUOTA_EXCEEDED "https://iana.org/assignments/http-problem-types#quota-exceeded"

/* Room enough for every body problem_body writes with its own details. */
#define PROBLEM_BODY_MAX 512

/* Writes the problem body of an answer `status` into buf (cap bytes, NUL-terminated).
 * `type` is "about:blank" and `title` the status's reason phrase (RFC 9457 4.2.1: the
 * error_code says which problem it is); detail NULL takes error_code's own sentence
 * (problem_detail). Returns the body's length, or -1 when it does not fit or memory runs
 * out. */
int problem_body(char *buf, size_t cap, unsigned status, const char *error_code, const char *detail);

/* A sentence for a client about an error_code; a general one for a code it does not know. */
const char *problem_detail(const char *error_code);

/* The status an error_code is answered with: each code is one kind of problem with a
 * status of its own (upstream_timeout 504, limiter_unavailable 503, ...); 500 for a code
 * it does not know. */
unsigned problem_status(const char *error_code);

/* The body of a 429: type PROBLEM_TYPE_QUOTA_EXCEEDED, status 429, error_code
 * ("rate_limit_exceeded", "quota_exceeded" or "concurrency_limit_exceeded"), a detail
 * saying when to try again, retry_after (seconds) and "violated-policies": violated[0, n),
 * the names of the limits the request was over. Returns the JSON text (the caller frees
 * it) with its length in *plen, or NULL when out of memory. */
char *problem_limited(const char *error_code, int64_t retry_after_s, const char *const *violated, size_t n,
                      size_t *plen);
