#include "proxy/head_screen.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "proxy/http1.h"
#include "proxy/http_token.h"

enum state {
    S_LEADING,     /* before the request line: empty lines allowed */
    S_LEADING_CR,
    S_METHOD,
    S_AFTER_METHOD,
    S_TARGET,
    S_AFTER_TARGET,
    S_VERSION,
    S_AFTER_VERSION,
    S_LINE_CR,     /* a CR ending the request line or a field line */
    S_FIELD_START,
    S_NAME,
    S_VALUE,
    S_END_CR,      /* the CR of the blank line ending the head */
};

/* The longest version field looked at: "HTTP/1.1" and a little over, to tell a wrong
 * version (505) from a line that is no HTTP (400). */
#define VERSION_MAX 8

static bool method_char(unsigned char c)
{
    return http_token_char(c) && !(c >= 'a' && c <= 'z');
}

static bool target_char(unsigned char c)
{
    return c > 0x20 && c != 0x7f;
}

bool head_screen_method_ok(const char *method, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!method_char((unsigned char)method[i]))
            return false;
    return true;
}

bool head_screen_target_ok(const char *target, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!target_char((unsigned char)target[i]))
            return false;
    return true;
}

bool head_screen_single_field(const char *name, size_t len)
{
    return len == 4 && strncasecmp(name, "Host", 4) == 0;
}

struct scan {
    struct head_screen result;
    bool in_request_line;
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    bool have_length;
    uint64_t content_length;
    bool have_single; /* a field head_screen_single_field names was seen */
};

static struct head_screen finish(struct scan *s)
{
    if (s->result.target_len == 0) { /* the request line was not read whole */
        s->result.method = s->result.target = NULL;
        s->result.method_len = 0;
    }
    return s->result;
}

static struct head_screen refuse(struct scan *s, unsigned status, const char *error_code)
{
    s->result.outcome = HEAD_REFUSED;
    s->result.status = status;
    s->result.error_code = error_code;
    return finish(s);
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* "HTTP/" DIGIT "." DIGIT: 1 for 1.0 and 1.1, 0 for another version, -1 for no version. */
static int version_kind(const char *v, size_t n)
{
    if (n != 8 || v[0] != 'H' || v[1] != 'T' || v[2] != 'T' || v[3] != 'P' || v[4] != '/' || !is_digit(v[5]) ||
        v[6] != '.' || !is_digit(v[7]))
        return -1;
    return v[5] == '1' && (v[7] == '0' || v[7] == '1') ? 1 : 0;
}

/* Checks a Content-Length field value (OWS around it); 0, or the refusal's status. */
static unsigned content_length_field(struct scan *s)
{
    int64_t length;
    int rc = http1_content_length(s->value, s->value_len, &length);
    if (rc == -ERANGE)
        return 413;
    if (rc < 0 || (s->have_length && s->content_length != (uint64_t)length))
        return 400;
    s->have_length = true;
    s->content_length = (uint64_t)length;
    return 0;
}

/* A field line has ended: 0, or the refusal's status (field_error_code names it). */
static unsigned field_done(struct scan *s)
{
    if (head_screen_single_field(s->name, s->name_len)) {
        if (s->have_single)
            return 400;
        s->have_single = true;
    }
    if (s->name_len == sizeof("Content-Length") - 1 && strncasecmp(s->name, "Content-Length", s->name_len) == 0)
        return content_length_field(s);
    return 0;
}

static const char *field_error_code(unsigned status)
{
    return status == 413 ? "request_too_large" : "malformed_request";
}

struct head_screen head_screen(const char *data, size_t len, size_t max_head)
{
    struct scan s = { .result = { .outcome = HEAD_INCOMPLETE }, .in_request_line = true };
    enum state st = S_LEADING;
    const char *version = NULL;
    size_t n = len < max_head ? len : max_head;

    for (size_t i = 0; i < n; i++) {
        const char *p = data + i;
        unsigned char c = (unsigned char)*p;
        switch (st) {
        case S_LEADING:
            if (c == '\r')
                st = S_LEADING_CR;
            else if (c == '\n')
                ;
            else if (method_char(c)) {
                s.result.method = p;
                st = S_METHOD;
            } else
                return refuse(&s, 400, "malformed_request");
            break;
        case S_LEADING_CR:
            if (c != '\n')
                return refuse(&s, 400, "malformed_request");
            st = S_LEADING;
            break;
        case S_METHOD:
            if (c == ' ') {
                s.result.method_len = (size_t)(p - s.result.method);
                st = S_AFTER_METHOD;
            } else if (!method_char(c))
                return refuse(&s, 400, "malformed_request");
            break;
        case S_AFTER_METHOD:
            if (c == ' ')
                break;
            if (!target_char(c))
                return refuse(&s, 400, "malformed_request");
            s.result.target = p;
            st = S_TARGET;
            break;
        case S_TARGET:
            if (c == ' ') {
                s.result.target_len = (size_t)(p - s.result.target);
                st = S_AFTER_TARGET;
            } else if (!target_char(c)) /* CR or LF here: an HTTP/0.9 request */
                return refuse(&s, 400, "malformed_request");
            break;
        case S_AFTER_TARGET:
            if (c == ' ')
                break;
            version = p;
            st = S_VERSION;
            __attribute__((fallthrough));
        case S_VERSION:
            if (c == ' ' || c == '\r' || c == '\n') {
                int kind = version_kind(version, (size_t)(p - version));
                if (kind < 0)
                    return refuse(&s, 400, "malformed_request");
                if (kind == 0)
                    return refuse(&s, 505, "http_version_not_supported");
                st = c == ' ' ? S_AFTER_VERSION : c == '\r' ? S_LINE_CR : S_FIELD_START;
                if (c == '\n')
                    s.in_request_line = false;
            } else if (c < 0x20 || c == 0x7f || (size_t)(p - version) >= VERSION_MAX)
                return refuse(&s, 400, "malformed_request");
            break;
        case S_AFTER_VERSION:
            if (c == '\r')
                st = S_LINE_CR;
            else if (c == '\n') {
                s.in_request_line = false;
                st = S_FIELD_START;
            } else if (c != ' ')
                return refuse(&s, 400, "malformed_request");
            break;
        case S_LINE_CR:
            if (c != '\n')
                return refuse(&s, 400, "malformed_request"); /* a bare CR */
            if (s.in_request_line)
                s.in_request_line = false;
            else {
                unsigned status = field_done(&s);
                if (status != 0)
                    return refuse(&s, status, field_error_code(status));
            }
            st = S_FIELD_START;
            break;
        case S_FIELD_START:
            if (c == '\r')
                st = S_END_CR;
            else if (c == '\n') {
                s.result.outcome = HEAD_ACCEPTABLE;
                return s.result;
            } else if (http_token_char(c)) {
                s.name = p; /* SP or HT here would be obs-fold (RFC 9112 5.2): refused */
                st = S_NAME;
            } else
                return refuse(&s, 400, "malformed_request");
            break;
        case S_NAME:
            if (c == ':') {
                s.name_len = (size_t)(p - s.name);
                s.value = p + 1;
                st = S_VALUE;
            } else if (!http_token_char(c))
                return refuse(&s, 400, "malformed_request");
            break;
        case S_VALUE:
            if (c == '\r' || c == '\n') {
                s.value_len = (size_t)(p - s.value);
                if (c == '\r')
                    st = S_LINE_CR;
                else {
                    unsigned status = field_done(&s);
                    if (status != 0)
                        return refuse(&s, status, field_error_code(status));
                    st = S_FIELD_START;
                }
            } else if (!http1_value_ok((const char *)&c, 1))
                return refuse(&s, 400, "malformed_request");
            break;
        case S_END_CR:
            if (c != '\n')
                return refuse(&s, 400, "malformed_request");
            s.result.outcome = HEAD_ACCEPTABLE;
            return s.result;
        }
    }
    if (len >= max_head)
        return s.in_request_line ? refuse(&s, 414, "uri_too_long") : refuse(&s, 431, "request_header_too_large");
    return finish(&s);
}
