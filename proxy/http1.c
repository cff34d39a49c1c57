#include "proxy/http1.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "proxy/http_token.h"

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

bool http1_name_ok(const char *name, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!http_token_char((unsigned char)name[i]))
            return false;
    return true;
}

/* VCHAR, obs-text, SP and HTAB. */
bool http1_value_ok(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (!((c >= 0x20 && c != 0x7f) || c == '\t'))
            return false;
    }
    return true;
}

int http1_content_length(const char *value, size_t len, int64_t *length)
{
    while (len > 0 && is_space(*value)) {
        value++;
        len--;
    }
    while (len > 0 && is_space(value[len - 1]))
        len--;
    if (len == 0)
        return -EINVAL;
    int64_t n = 0;
    bool too_big = false;
    for (size_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return -EINVAL;
        int d = value[i] - '0';
        if (n > (INT64_MAX - d) / 10)
            too_big = true; /* read on: a later non-digit still makes it malformed */
        else
            n = n * 10 + d;
    }
    if (too_big)
        return -ERANGE;
    *length = n;
    return 0;
}

int http1_field_line(const char *line, size_t len, struct http1_field *out)
{
    const char *colon = memchr(line, ':', len);
    if (colon == NULL || !http1_name_ok(line, (size_t)(colon - line)))
        return -EINVAL;
    const char *value = colon + 1, *end = line + len;
    if (!http1_value_ok(value, (size_t)(end - value)))
        return -EINVAL;
    while (value < end && is_space(*value))
        value++;
    while (end > value && is_space(end[-1]))
        end--;
    *out = (struct http1_field){
        .name = line, .name_len = (size_t)(colon - line), .value = value, .value_len = (size_t)(end - value),
    };
    return 0;
}

bool http1_name_is(const char *name, size_t len, const char *literal)
{
    return strlen(literal) == len && strncasecmp(name, literal, len) == 0;
}

bool http1_is_hop_by_hop(const char *name, size_t len)
{
    static const char *const hop[] = { "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                                       "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade" };
    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        if (http1_name_is(name, len, hop[i]))
            return true;
    return false;
}

long http1_status_line(const char *line, size_t len)
{
    if (len < 12 || memcmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ')
        return 0;
    long status = 0;
    for (int i = 9; i < 12; i++) {
        if (line[i] < '0' || line[i] > '9')
            return 0;
        status = status * 10 + (line[i] - '0');
    }
    if (len > 12 && line[12] != ' ')
        return 0;
    if (!http1_value_ok(line + 12, len - 12))
        return 0;
    return status >= 100 && status <= 599 ? status : 0;
}
