/* Fuzzes the screen of a later head in libmicrohttpd's pool. For any pool contents and any
 * target position: nothing is read outside the pool (a heap block of the pool's size, so
 * ASan sees a read past it), the outcome is one of three, what it points at lies in the
 * pool, and a refusal carries a status the proxy knows. The query cut writes inside the pool.
 *
 * Input: 2 bytes of the target's offset in the pool (little-endian, modulo the pool), then
 * the pool's first bytes (the rest of it zeros, as libmicrohttpd leaves it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/later_head.h"

#include "tests/fuzz/fuzz_check.h"

#define POOL 36864

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const char *p, const char *pool)
{
    return p >= pool && p <= pool + POOL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t at = ((size_t)data[0] | (size_t)data[1] << 8) % POOL;
    char *pool = calloc(1, POOL);
    CHECK(pool != NULL);
    memcpy(pool, data + 2, size - 2 < POOL ? size - 2 : POOL);
    pool[POOL - 1] = 0; /* libmicrohttpd's target is a C string inside its pool */

    struct later_head lh;
    later_head_screen(pool, POOL, pool + at, &lh);
    switch (lh.outcome) {
    case LATER_HEAD_ACCEPTABLE:
        CHECK(inside(lh.fields, pool) && inside(lh.end, pool) && lh.end > lh.fields);
        CHECK(lh.method != NULL && inside(lh.method + lh.method_len, pool));
        break;
    case LATER_HEAD_INCOMPLETE:
        CHECK(inside(lh.fields, pool) && inside(lh.fields + lh.received, pool));
        CHECK(lh.received < lh.max_fields && lh.max_fields <= MAX_HEAD_BYTES);
        break;
    case LATER_HEAD_REFUSED:
        CHECK(lh.screen.status == 400 || lh.screen.status == 413 || lh.screen.status == 414 ||
              lh.screen.status == 431 || lh.screen.status == 505);
        CHECK(lh.screen.error_code != NULL);
        break;
    default:
        CHECK(!"an outcome out of range");
    }
    (void)later_head_problem(&lh, POOL, 0);
    if (lh.query != NULL) {
        CHECK(inside(lh.query + 1, pool) && lh.query + 1 < pool + POOL);
        later_head_drop_query(&lh);
    }
    free(pool);
    return 0;
}
