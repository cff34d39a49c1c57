/* RFC 9457 problem details: an error answer's body as application/problem+json, with the
 * members SPEC names: type, title, status, detail, and the proxy's error_code. */
#pragma once
#include <stddef.h>

#define PROBLEM_CONTENT_TYPE "application/problem+json"

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
