/* The screen of a request head (head_screen.h gives the rules): a single pass over the
 * bytes with a small state machine (struct scan), no allocation and no I/O. A scan reads at
 * most the head's size limit and stops at the first byte that decides: the head is
 * accepted whole, refused with one status and error code, or not complete yet. */
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
    enum state st;
    const char *version; /* where the request line's version starts */
    bool in_request_line;
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    bool have_length;
    uint64_t content_length;
    bool have_single; /* a field head_screen_single_field names was seen */
    size_t entry_bytes; /* what libmicrohttpd keeps of the head besides its bytes */
};

static struct head_screen refuse(struct scan *s, unsigned status, const char *error_code, enum head_fault fault);

static struct head_screen finish(struct scan *s)
{
    if (s->result.target_len == 0) { /* the request line was not read whole */
        s->result.method = s->result.target = NULL;
        s->result.method_len = 0;
    }
    return s->result;
}

static struct head_screen refuse(struct scan *s, unsigned status, const char *error_code, enum head_fault fault)
{
    s->result.outcome = HEAD_REFUSED;
    s->result.status = status;
    s->result.error_code = error_code;
    s->result.fault = fault;
    return finish(s);
}

/* The head has ended; too many entries for libmicrohttpd's pool are refused now, not as
 * soon as they are over: a head that is also too long gets the answer for its length. */
static struct head_screen accept_head(struct scan *s, size_t head_len)
{
    if (s->entry_bytes > MAX_HEAD_ENTRY_BYTES)
        return refuse(s, 431, "request_header_too_large", HEAD_FAULT_ENTRIES);
    s->result.outcome = HEAD_ACCEPTABLE;
    s->result.head_len = head_len;
    return s->result;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* "HTTP/" DIGIT "." DIGIT: 1 for 1.x (RFC 9110 2.5: a 1.x minor version the server does not
 * know is served as the highest it does, 1.1), 0 for another version, -1 for no version. */
static int version_kind(const char *v, size_t n)
{
    if (n != 8 || v[0] != 'H' || v[1] != 'T' || v[2] != 'T' || v[3] != 'P' || v[4] != '/' || !is_digit(v[5]) ||
        v[6] != '.' || !is_digit(v[7]))
        return -1;
    return v[5] == '1' ? 1 : 0;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

size_t head_screen_query_entry_bytes(const char *target, size_t len)
{
    const char *query = memchr(target, '?', len);
    if (query == NULL || query + 1 == target + len)
        return 0;
    size_t entries = 1;
    for (const char *p = query + 1; (p = memchr(p, '&', (size_t)(target + len - p))) != NULL; p++)
        entries++;
    return entries * HEAD_ENTRY_BYTES;
}

size_t head_screen_cookie_entry_bytes(const char *value, size_t len)
{
    size_t entries = 1;
    for (size_t i = 0; i < len; i++)
        entries += value[i] == ';' || value[i] == ',';
    return entries * HEAD_ENTRY_BYTES + ((len + 1 + 15) & ~(size_t)15);
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

bool head_screen_host_ok(const char *value, size_t len)
{
    while (len > 0 && is_space(*value)) {
        value++;
        len--;
    }
    while (len > 0 && is_space(value[len - 1]))
        len--;
    return http1_host_ok(value, len);
}

/* A field line has ended: 0, or the refusal's status (its fault in *fault). */
static unsigned field_done(struct scan *s, enum head_fault *fault)
{
    *fault = HEAD_FAULT_SYNTAX;
    s->entry_bytes += HEAD_ENTRY_BYTES;
    if (head_screen_single_field(s->name, s->name_len)) {
        if (s->have_single || !head_screen_host_ok(s->value, s->value_len))
            return 400;
        s->have_single = true;
    } else if (http1_name_is(s->name, s->name_len, "Cookie")) {
        s->entry_bytes += head_screen_cookie_entry_bytes(s->value, s->value_len);
    } else if (http1_name_is(s->name, s->name_len, "Content-Length")) {
        *fault = HEAD_FAULT_LENGTH;
        unsigned status = content_length_field(s);
        if (status != 0)
            return status;
    }
    return 0;
}

static const char *field_error_code(unsigned status)
{
    return status == 413 ? "request_too_large" : "malformed_request";
}

/* The steps below return true once the head is decided, with the answer in s->result. */
static bool refused(struct scan *s, unsigned status, const char *error_code, enum head_fault fault)
{
    refuse(s, status, error_code, fault);
    return true;
}

static bool malformed(struct scan *s)
{
    return refused(s, 400, "malformed_request", HEAD_FAULT_SYNTAX);
}

static bool accepted(struct scan *s, size_t head_len)
{
    accept_head(s, head_len);
    return true;
}

/* Before the request line: empty lines, then the method's first character. */
static bool scan_leading(struct scan *s, const char *p)
{
    unsigned char c = (unsigned char)*p;
    if (s->st == S_LEADING_CR) {
        if (c != '\n')
            return malformed(s);
        s->st = S_LEADING;
    } else if (c == '\r')
        s->st = S_LEADING_CR;
    else if (c == '\n')
        ;
    else if (method_char(c)) {
        s->result.method = p;
        s->st = S_METHOD;
    } else
        return malformed(s);
    return false;
}

/* The method, the spaces after it, and the target up to the space that ends it. */
static bool scan_method_target(struct scan *s, const char *p)
{
    unsigned char c = (unsigned char)*p;
    switch (s->st) {
    case S_METHOD:
        if (c == ' ') {
            s->result.method_len = (size_t)(p - s->result.method);
            s->st = S_AFTER_METHOD;
        } else if (!method_char(c))
            return malformed(s);
        break;
    case S_AFTER_METHOD:
        if (c == ' ')
            break;
        if (!target_char(c))
            return malformed(s);
        s->result.target = p;
        s->st = S_TARGET;
        break;
    default: /* S_TARGET */
        if (c == ' ') {
            s->result.target_len = (size_t)(p - s->result.target);
            s->entry_bytes = head_screen_query_entry_bytes(s->result.target, s->result.target_len);
            s->st = S_AFTER_TARGET;
        } else if (!target_char(c)) /* CR or LF here: an HTTP/0.9 request */
            return malformed(s);
        break;
    }
    return false;
}

/* The spaces after the target, then the version up to the end of the request line. */
static bool scan_version(struct scan *s, const char *p)
{
    unsigned char c = (unsigned char)*p;
    if (s->st == S_AFTER_TARGET) {
        if (c == ' ')
            return false;
        s->version = p;
        s->st = S_VERSION;
    }
    size_t seen = (size_t)(p - s->version);
    if (c == ' ' || c == '\r' || c == '\n') {
        int kind = version_kind(s->version, seen);
        if (kind < 0)
            return malformed(s);
        if (kind == 0)
            return refused(s, 505, "http_version_not_supported", HEAD_FAULT_VERSION);
        if (c == ' ') /* libmicrohttpd reads it as part of the version, and refuses it */
            return refused(s, 400, "malformed_request", HEAD_FAULT_AFTER_VERSION);
        s->st = c == '\r' ? S_LINE_CR : S_FIELD_START;
        if (c == '\n')
            s->in_request_line = false;
    } else if (c < 0x20 || c == 0x7f || seen >= VERSION_MAX)
        return malformed(s);
    return false;
}

/* A field line has ended: checked, the next line starts, or the head is refused. */
static bool end_field(struct scan *s)
{
    enum head_fault fault;
    unsigned status = field_done(s, &fault);
    if (status != 0)
        return refused(s, status, field_error_code(status), fault);
    s->st = S_FIELD_START;
    return false;
}

/* The LF after a line's CR, or the start of a line: a field's name, or the blank line
 * that ends the head (data[i] is *p). */
static bool scan_line_start(struct scan *s, const char *p, size_t i)
{
    unsigned char c = (unsigned char)*p;
    switch (s->st) {
    case S_LINE_CR:
        if (c != '\n')
            return malformed(s); /* a bare CR */
        if (!s->in_request_line)
            return end_field(s);
        s->in_request_line = false;
        s->st = S_FIELD_START;
        return false;
    case S_END_CR:
        if (c != '\n')
            return malformed(s);
        return accepted(s, i + 1);
    default: /* S_FIELD_START */
        if (c == '\r')
            s->st = S_END_CR;
        else if (c == '\n')
            return accepted(s, i + 1);
        else if (http_token_char(c)) {
            s->name = p; /* SP or HT here would be obs-fold (RFC 9112 5.2): refused */
            s->st = S_NAME;
        } else
            return malformed(s);
        return false;
    }
}

/* A field's name up to its colon; *pi moves over the name's characters at once. */
static bool scan_name(struct scan *s, const char *data, size_t *pi, size_t n)
{
    size_t i = *pi;
    while (i < n && http_token_char((unsigned char)data[i]))
        i++;
    *pi = i;
    if (i == n)
        return false;
    const char *p = data + i;
    unsigned char c = (unsigned char)*p;
    if (c == ':') {
        s->name_len = (size_t)(p - s->name);
        s->value = p + 1;
        s->st = S_VALUE;
    } else if (c == '\r' || c == '\n')
        return refused(s, 400, "malformed_request", HEAD_FAULT_NO_COLON);
    else if (!http_token_char(c))
        return malformed(s);
    return false;
}

/* A field's value up to the CR or LF that ends its line; *pi moves over it at once. */
static bool scan_value(struct scan *s, const char *data, size_t *pi, size_t n)
{
    size_t i = *pi + http1_value_span(data + *pi, n - *pi);
    *pi = i;
    if (i == n)
        return false;
    const char *p = data + i;
    unsigned char c = (unsigned char)*p;
    if (c != '\r' && c != '\n')
        return malformed(s);
    s->value_len = (size_t)(p - s->value);
    if (c == '\n')
        return end_field(s);
    s->st = S_LINE_CR;
    return false;
}

/* One step of the scan at data[*i], by the part of the head it is in. */
static bool step(struct scan *s, const char *data, size_t *i, size_t n)
{
    const char *p = data + *i;
    switch (s->st) {
    case S_LEADING:
    case S_LEADING_CR:
        return scan_leading(s, p);
    case S_METHOD:
    case S_AFTER_METHOD:
    case S_TARGET:
        return scan_method_target(s, p);
    case S_AFTER_TARGET:
    case S_VERSION:
        return scan_version(s, p);
    case S_LINE_CR:
    case S_FIELD_START:
    case S_END_CR:
        return scan_line_start(s, p, *i);
    case S_NAME:
        return scan_name(s, data, i, n);
    case S_VALUE:
        return scan_value(s, data, i, n);
    }
    return false;
}

/* The scan from state st over data[0, len), at most max bytes of it. */
static struct head_screen run(struct scan *s, enum state st, const char *data, size_t len, size_t max)
{
    size_t n = len < max ? len : max;

    s->st = st;
    for (size_t i = 0; i < n; i++)
        if (step(s, data, &i, n))
            return s->result;
    if (len >= max)
        return s->in_request_line ? refuse(s, 414, "uri_too_long", HEAD_FAULT_SIZE)
                                  : refuse(s, 431, "request_header_too_large", HEAD_FAULT_SIZE);
    return finish(s);
}

struct head_screen head_screen(const char *data, size_t len, size_t max_head)
{
    struct scan s = { .result = { .outcome = HEAD_INCOMPLETE }, .in_request_line = true };
    return run(&s, S_LEADING, data, len, max_head);
}

struct head_screen head_screen_fields(const char *data, size_t len, size_t max_bytes, size_t entry_bytes)
{
    struct scan s = { .result = { .outcome = HEAD_INCOMPLETE }, .entry_bytes = entry_bytes };
    return run(&s, S_FIELD_START, data, len, max_bytes);
}
