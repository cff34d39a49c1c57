/* The Transfer-Encoding reading of transfer_coding.h. It owns nothing but the counts in
 * struct transfer_coding: pure, no allocation, no I/O. The verdict reads the counts alone,
 * once every field was added: faulty framing (400) wins over an unsupported coding (501),
 * and "chunked" alone passes only as libmicrohttpd reads it (first_is_plain). */
#include "proxy/transfer_coding.h"

#include <string.h>
#include <strings.h>

#include "proxy/http_token.h"

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* One list element, OWS trimmed: a token, or a token and parameters (";" and more). */
static void add_element(struct transfer_coding *tc, const char *e, size_t len)
{
    while (len > 0 && ows(*e)) {
        e++;
        len--;
    }
    while (len > 0 && ows(e[len - 1]))
        len--;
    if (len == 0)
        return; /* an empty element: ignored (RFC 9110 5.6.1) */
    size_t name = 0;
    while (name < len && http_token_char((unsigned char)e[name]))
        name++;
    size_t rest = name;
    while (rest < len && ows(e[rest]))
        rest++;
    if (name == 0 || (rest < len && e[rest] != ';'))
        tc->malformed = true;
    bool chunked = len == 7 && name == len && strncasecmp(e, "chunked", 7) == 0;
    tc->codings++;
    tc->chunked += chunked;
    tc->chunked_last = chunked;
}

void transfer_coding_add(struct transfer_coding *tc, const char *value, size_t len)
{
    if (tc->fields++ == 0)
        tc->first_is_plain = len == 7 && strncasecmp(value, "chunked", 7) == 0;
    size_t start = 0;
    for (;;) {
        const char *comma = memchr(value + start, ',', len - start);
        size_t stop = comma != NULL ? (size_t)(comma - value) : len;
        add_element(tc, value + start, stop - start);
        if (comma == NULL)
            break;
        start = stop + 1;
    }
}

enum transfer_coding_verdict transfer_coding_verdict(const struct transfer_coding *tc, bool http_1_0)
{
    if (tc->fields == 0)
        return TRANSFER_CODING_NONE;
    if (http_1_0 || tc->malformed || !tc->chunked_last || tc->chunked > 1)
        return TRANSFER_CODING_BAD_FRAMING;
    if (tc->codings > 1)
        return TRANSFER_CODING_UNSUPPORTED;
    /* chunked alone, but maybe as ", chunked" or "chunked " or on a second field line */
    return tc->first_is_plain ? TRANSFER_CODING_CHUNKED : TRANSFER_CODING_BAD_FRAMING;
}
