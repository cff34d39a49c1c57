/* Fuzzes the request-target parser. For any bytes: it accepts or refuses; what it accepts
 * is NUL-terminated inside the buffer, starts with "/" (or is "*" for OPTIONS), holds no
 * empty, "." or ".." segment and none of the refused encodings in its path, has a match
 * path no longer than the forwarded one, and an authority inside the input; normalising
 * it again changes nothing (what is forwarded would be matched the same by the next hop).
 *
 * Input: 1 byte choosing the method (odd: OPTIONS, even: GET), then the raw target. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tiers/request_target.h"

#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* encodings: the forwarded path holds none of the refused ones; the match path, decoded
 * once, may spell one from two ("%2%66" is "%2f" there), which no check compares. */
static void check_path(const char *path, size_t len, bool encodings)
{
    CHECK(len >= 1 && path[0] == '/');
    CHECK(memchr(path, '\0', len) == NULL && memchr(path, '\\', len) == NULL && memchr(path, '?', len) == NULL);
    for (size_t i = 0; i + 1 < len; i++)
        CHECK(!(path[i] == '/' && path[i + 1] == '/'));
    for (size_t i = 0; encodings && i + 2 < len; i++)
        if (path[i] == '%')
            CHECK(!(path[i + 1] == '0' && path[i + 2] == '0') &&
                  strncasecmp(path + i, "%2f", 3) != 0 && strncasecmp(path + i, "%5c", 3) != 0);
    /* no "." or ".." segment */
    for (size_t i = 0; i < len; i++) {
        if (path[i] != '/')
            continue;
        size_t j = i + 1;
        while (j < len && path[j] != '/')
            j++;
        size_t seg = j - i - 1;
        CHECK(!(seg == 1 && path[i + 1] == '.'));
        CHECK(!(seg == 2 && path[i + 1] == '.' && path[i + 2] == '.'));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *method = (data[0] & 1) ? "OPTIONS" : "GET";
    /* A copy of its own size, so ASan sees any read past the end. */
    size_t n = size - 1;
    char *raw = malloc(n > 0 ? n : 1);
    CHECK(raw != NULL);
    memcpy(raw, data + 1, n);
    size_t cap = request_target_buffer_size(n);
    char *out = malloc(cap);
    CHECK(out != NULL);

    struct request_target t;
    int rc = request_target_parse(method, raw, n, out, cap, &t);
    CHECK(rc == 0 || rc == -1);
    if (rc == 0) {
        CHECK(t.forward == out && strlen(t.forward) == t.forward_len && t.forward_len < cap);
        CHECK(t.asterisk || (t.path_len <= t.forward_len && t.match_len <= t.path_len));
        CHECK(t.match >= out && t.match + t.match_len < out + cap && t.match[t.match_len] == '\0');
        if (t.asterisk) {
            CHECK(strcmp(method, "OPTIONS") == 0 && strcmp(t.forward, "*") == 0);
        } else {
            check_path(t.forward, t.path_len, true);
            check_path(t.match, t.match_len, false);
            CHECK(t.path_len == t.forward_len || t.forward[t.path_len] == '?');
            /* the query is the input's tail, byte for byte */
            size_t q = t.forward_len - t.path_len;
            CHECK(q <= n && memcmp(t.forward + t.path_len, raw + n - q, q) == 0);
        }
        if (t.authority != NULL)
            CHECK(t.authority >= raw && t.authority + t.authority_len <= raw + n && t.authority_len > 0 &&
                  memchr(t.authority, '@', t.authority_len) == NULL);
        CHECK(request_target_has_prefix(t.match, t.match_len, t.match, t.match_len, true));

        /* idempotent: the forwarded target parses to itself */
        size_t cap2 = request_target_buffer_size(t.forward_len);
        char *again = malloc(cap2);
        CHECK(again != NULL);
        struct request_target t2;
        CHECK(request_target_parse(method, t.forward, t.forward_len, again, cap2, &t2) == 0);
        CHECK(t2.forward_len == t.forward_len && memcmp(t2.forward, t.forward, t.forward_len) == 0);
        CHECK(t2.match_len == t.match_len && memcmp(t2.match, t.match, t.match_len) == 0);
        free(again);
    } else {
        CHECK(t.forward == NULL);
    }
    free(out);
    free(raw);
    return 0;
}
