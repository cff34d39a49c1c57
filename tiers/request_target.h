/* The request target (RFC 9112 3.2) as exempt paths, route limits and the upstream all see
 * it: what is matched is what is forwarded (SPEC "One request model").
 *
 * Pure: no libmicrohttpd, libcurl or I/O, so the gate and unit tests use it with plain
 * strings.
 *
 * The rules, after Envoy's normalize_path + merge_slashes and nginx's location matching:
 * - origin-form "/path?query" is taken as it is;
 * - absolute-form "http://host/path?query" (http or https, any case) becomes "/path?query"
 *   ("/" when the path is empty) and its authority replaces Host (RFC 9112 3.2.2); an
 *   authority that is empty, carries userinfo or characters no host has is refused;
 * - asterisk-form "*" only with OPTIONS, forwarded as "*";
 * - anything else (authority-form, a relative path) is refused;
 * - a control character, a space or a fragment ("#") anywhere is refused (RFC 9112 3.2
 *   allows none; Envoy refuses fragments too, since upstreams disagree on where one ends
 *   the path);
 * - in the path: "%00", an encoded slash or backslash ("%2F", "%5C", any case) or a raw
 *   backslash is refused;
 * - repeated slashes are merged, then "." and ".." segments removed (RFC 3986 5.2.4),
 *   never above the root; a segment that is a dot once its percent-encoded unreserved
 *   characters are decoded ("%2e", ".%2E") is a dot segment too, as Envoy's normalize_path
 *   and every upstream that decodes see it;
 * - what is left is forwarded with its percent-encodings as they came, byte for byte;
 * - it is matched with percent-encoded unreserved characters (ALPHA DIGIT - . _ ~,
 *   RFC 3986 6.2.2.2) decoded, so "/%75pload" meets the route "/upload": the two spellings
 *   are the same URI to the upstream (RFC 3986 6.2.2), so what is matched is what is
 *   forwarded;
 * - the query (from the first "?") is forwarded untouched and is not part of the path.
 * Refused targets get 400 {"error_code":"bad_request_target"}. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct request_target {
    const char *forward;   /* what the upstream receives: the normalised path, then the query
                              as sent; NUL-terminated, in the caller's buffer */
    size_t forward_len;
    size_t path_len;       /* forward[0, path_len) is the path */
    const char *match;     /* the same path with unreserved characters decoded: what exempt
                              paths and routes are compared with; NUL-terminated */
    size_t match_len;
    const char *authority; /* absolute-form: "host[:port]", inside the raw target; else NULL */
    size_t authority_len;
    bool asterisk;         /* "OPTIONS *" */
};

/* The buffer request_target_parse needs for a raw target of raw_len bytes. */
static inline size_t request_target_buffer_size(size_t raw_len)
{
    /* forward and match, each: an absolute-form target with an empty path gains "/", and the NUL */
    return 2 * (raw_len + 2);
}

/* Parses and normalises raw[0, raw_len) for a request with this method into out (at least
 * request_target_buffer_size(raw_len) bytes). Returns 0 with *t filled, or -1 when the
 * target is refused (*t is then left zeroed). */
/* The value of one hex digit (either case), or -1. */
int request_target_hex_value(unsigned char c);

int request_target_parse(const char *method, const char *raw, size_t raw_len, char *out, size_t out_size,
                         struct request_target *t);

/* Whether path starts with prefix: bytes compared as they are, or ASCII letters in any case
 * when ignore_case ([proxy] path_case = insensitive). A plain prefix, like an nginx prefix
 * location: "/v1" matches "/v1x" too. */
bool request_target_has_prefix(const char *path, size_t path_len, const char *prefix, size_t prefix_len,
                               bool ignore_case);
