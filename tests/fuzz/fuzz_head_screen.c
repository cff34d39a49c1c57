/* Fuzzes the head screen, whole (a first head) and its field lines alone (a later head's,
 * head_screen_fields). For any bytes: the outcome is one of three; a refusal carries a
 * status the proxy knows and an error code; the request line, when given, lies inside the
 * input, and an acceptable head's length too. A head that is acceptable stays acceptable
 * with more bytes after it, and none of its prefixes is refused (a good head is never
 * refused while it arrives). The limit comes from the first input byte, so the size
 * refusals are reached too.
 *
 * Input: 1 byte of limit (x64 bytes, 0 meaning MAX_HEAD_BYTES), then the bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/head_screen.h"

#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_one(const char *p, size_t n, size_t max, struct head_screen hs)
{
    switch (hs.outcome) {
    case HEAD_INCOMPLETE:
        CHECK(n < max);
        break;
    case HEAD_ACCEPTABLE:
        CHECK(hs.method != NULL && hs.target != NULL);
        CHECK(hs.head_len > 0 && hs.head_len <= n);
        break;
    case HEAD_REFUSED:
        CHECK(hs.status == 400 || hs.status == 413 || hs.status == 414 || hs.status == 431 || hs.status == 505);
        CHECK(hs.error_code != NULL);
        break;
    default:
        CHECK(!"an outcome out of range");
    }
    if (hs.method != NULL) {
        CHECK(hs.method >= p && hs.method + hs.method_len <= p + n && hs.method_len > 0);
        CHECK(hs.target >= p && hs.target + hs.target_len <= p + n && hs.target_len > 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t max = data[0] == 0 ? MAX_HEAD_BYTES : (size_t)data[0] * 64;
    /* A copy of its own size, so ASan sees any read past the end. */
    size_t n = size - 1;
    char *p = malloc(n > 0 ? n : 1);
    CHECK(p != NULL);
    memcpy(p, data + 1, n);

    struct head_screen whole = head_screen(p, n, max);
    check_one(p, n, max, whole);
    if (whole.outcome == HEAD_ACCEPTABLE) {
        for (size_t k = 0; k < n; k += 1 + k / 8) {
            struct head_screen part = head_screen(p, k, max);
            check_one(p, k, max, part);
            CHECK(part.outcome != HEAD_REFUSED);
        }
    } else if (whole.outcome == HEAD_REFUSED && whole.status != 414 && whole.status != 431) {
        /* Refused for what it holds, not for its size: more bytes do not change that. */
        char *more = malloc(n + 8);
        CHECK(more != NULL);
        memcpy(more, p, n);
        memcpy(more + n, "\r\n\r\nGET ", 8);
        struct head_screen longer = head_screen(more, n + 8, max);
        CHECK(longer.outcome == HEAD_REFUSED);
        free(more);
    }
    struct head_screen fields = head_screen_fields(p, n, max, 0);
    CHECK(fields.method == NULL);
    if (fields.outcome == HEAD_ACCEPTABLE)
        CHECK(fields.head_len > 0 && fields.head_len <= n);
    else if (fields.outcome == HEAD_REFUSED)
        CHECK(fields.status == 400 || fields.status == 413 || fields.status == 431);
    else
        CHECK(fields.outcome == HEAD_INCOMPLETE && n < max);
    free(p);
    return 0;
}
