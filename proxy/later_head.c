/* The screen of a later head in libmicrohttpd's pool (later_head.h, which lists what of
 * libmicrohttpd 0.9.75's pool it relies on). Pure: it reads the pool and writes nothing to
 * it, but for later_head_drop_query, which cuts the query after its '?'. It owns no memory:
 * every pointer in struct later_head points into the pool. A NUL with non-zero bytes after
 * it is the client's and refuses the head (400). */
#include "proxy/later_head.h"

#include <string.h>

static void refuse(struct later_head *lh, unsigned status, const char *error_code, enum head_fault fault)
{
    lh->outcome = LATER_HEAD_REFUSED;
    lh->screen = (struct head_screen){
        .outcome = HEAD_REFUSED, .status = status, .error_code = error_code, .fault = fault,
    };
}

static bool all_zero(const char *p, const char *end)
{
    return p == end || (*p == 0 && memcmp(p, p + 1, (size_t)(end - p - 1)) == 0);
}

/* The method before the target: the request line starts after the empty lines before it
 * (all NULs now), and the method ends at the NUL that was its space. False when a NUL lies
 * inside it. */
static bool find_method(const char *pool, const char *uri, struct later_head *lh)
{
    const char *end = uri;
    while (end > pool && end[-1] == ' ') /* libmicrohttpd skips spaces before the target */
        end--;
    if (end == pool || end[-1] != 0)
        return false;
    end--;
    const char *start = pool;
    while (start < end && *start == 0)
        start++;
    if (start == end || memchr(start, 0, (size_t)(end - start)) != NULL)
        return false;
    lh->method = start;
    lh->method_len = (size_t)(end - start);
    return true;
}

/* The version after the target: "HTTP/1." and a digit (libmicrohttpd took no other), its
 * space and the line's end NULs now. Where the field lines start, or NULL when the target
 * holds a NUL (libmicrohttpd's target then ends early). */
static const char *after_version(const char *uri, size_t target_len, const char *pool_end, struct later_head *lh)
{
    if (pool_end - uri - (ptrdiff_t)target_len < 12)
        return NULL;
    const char *v = uri + target_len + 1;
    if (memcmp(v, "HTTP/1.", 7) != 0 || v[7] < '0' || v[7] > '9' || v[8] != 0)
        return NULL;
    if (v[9] != 0)
        return v + 9; /* an LF alone ended the line */
    /* CR LF; or an LF, then a NUL or nothing yet (only zeros after): settled at the end */
    lh->end_may_be_one_less = all_zero(v + 10, pool_end);
    return v + 10;
}

void later_head_screen(const char *pool, size_t pool_size, const char *uri, struct later_head *out)
{
    const char *pool_end = pool + pool_size;
    *out = (struct later_head){ .outcome = LATER_HEAD_INCOMPLETE };
    size_t target_len = strnlen(uri, (size_t)(pool_end - uri));
    const char *fields = after_version(uri, target_len, pool_end, out);
    if (!find_method(pool, uri, out) || fields == NULL) {
        refuse(out, 400, "malformed_request", HEAD_FAULT_SYNTAX);
        return;
    }
    out->fields = fields;
    out->line_bytes = (size_t)(fields - pool);
    if (out->line_bytes >= MAX_HEAD_BYTES) {
        refuse(out, 414, "uri_too_long", HEAD_FAULT_SIZE);
        return;
    }
    out->max_fields = MAX_HEAD_BYTES - out->line_bytes;
    out->query = memchr(uri, '?', target_len);
    out->entry_bytes = head_screen_query_entry_bytes(uri, target_len);

    const char *zero = memchr(fields, 0, (size_t)(pool_end - fields));
    const char *received_end = zero != NULL ? zero : pool_end;
    out->received = (size_t)(received_end - fields);
    struct head_screen hs = head_screen_fields(fields, (size_t)(received_end - fields), out->max_fields,
                                               out->entry_bytes);
    if (hs.outcome == HEAD_INCOMPLETE && !all_zero(received_end, pool_end))
        hs = (struct head_screen){ .outcome = HEAD_REFUSED, .status = 400, .error_code = "malformed_request",
                                   .fault = HEAD_FAULT_SYNTAX }; /* a NUL with more after it */
    later_head_complete(out, &hs);
}

void later_head_drop_query(const struct later_head *lh)
{
    if (lh->query != NULL)
        ((char *)lh->query)[1] = '\0'; /* libmicrohttpd's args start after the '?' */
}

void later_head_complete(struct later_head *lh, const struct head_screen *fields)
{
    switch (fields->outcome) {
    case HEAD_ACCEPTABLE:
        lh->outcome = LATER_HEAD_ACCEPTABLE;
        lh->end = lh->fields + fields->head_len;
        break;
    case HEAD_REFUSED:
        lh->outcome = LATER_HEAD_REFUSED;
        lh->screen = *fields;
        break;
    case HEAD_INCOMPLETE:
        lh->outcome = LATER_HEAD_INCOMPLETE;
        break;
    }
}

bool later_head_parsed_alike(const struct later_head *lh, const char *method, size_t header_size)
{
    const char *end = method + header_size;
    return end == lh->end || (lh->end_may_be_one_less && end == lh->end - 1);
}
