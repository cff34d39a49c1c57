/* The request target's parse and normalisation (request_target.h gives the rules): pure,
 * writing only the caller's struct and buffers. The forwarded target keeps the client's
 * percent-encodings byte for byte; only the form that is matched decodes the unreserved
 * characters, so what is matched is what is forwarded. */
#include "tiers/request_target.h"

#include <string.h>
#include <strings.h>

int request_target_hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* RFC 3986 2.3 */
static bool unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

/* The characters of an authority without userinfo (RFC 3986 3.2.2, 3.2.3): reg-name,
 * IP-literal in brackets, port. */
static bool authority_char(unsigned char c)
{
    if (unreserved(c))
        return true;
    return strchr("!$&'()*+,;=:[]%", c) != NULL && c != '\0';
}

bool request_target_has_prefix(const char *path, size_t path_len, const char *prefix, size_t prefix_len,
                               bool ignore_case)
{
    if (prefix_len > path_len)
        return false;
    /* strncasecmp folds ASCII letters only: the proxy never calls setlocale, so it runs in
       the C locale (and neither string holds a NUL before prefix_len). */
    return ignore_case ? strncasecmp(path, prefix, prefix_len) == 0 : memcmp(path, prefix, prefix_len) == 0;
}

/* A path being written twice, as forwarded (fwd) and as matched (match). */
struct path_out {
    char *fwd, *match;
    size_t f, m;
};

/* Removes the last segment written, and the '/' that ends it, from one output. */
static size_t pop_segment(const char *out, size_t o)
{
    if (o > 1) {
        o--; /* the '/' that ends the segment before */
        while (o > 1 && out[o - 1] != '/')
            o--;
    }
    return o;
}

/* Normalises the path in[0, len) (starting with '/', or empty) into out->fwd and
 * out->match, which have room for len + 1 bytes each. Returns 0, or -1 to refuse. */
static int normalise_path(const char *in, size_t len, struct path_out *out)
{
    out->fwd[0] = out->match[0] = '/';
    out->f = out->m = 1;
    size_t i = 0;
    while (i < len) {
        if (in[i] == '/') {
            i++;
            continue; /* repeated slashes merge */
        }
        size_t seg_f = out->f, seg_m = out->m;
        while (i < len && in[i] != '/') {
            unsigned char c = (unsigned char)in[i];
            if (c == '\\')
                return -1;
            if (c == '%' && len - i >= 3) {
                int hi = request_target_hex_value((unsigned char)in[i + 1]),
                    lo = request_target_hex_value((unsigned char)in[i + 2]);
                if (hi >= 0 && lo >= 0) {
                    unsigned char v = (unsigned char)(hi * 16 + lo);
                    if (v == 0 || v == '/' || v == '\\')
                        return -1;
                    memcpy(out->fwd + out->f, in + i, 3);
                    out->f += 3;
                    if (unreserved(v)) {
                        out->match[out->m++] = (char)v;
                    } else {
                        memcpy(out->match + out->m, in + i, 3);
                        out->m += 3;
                    }
                    i += 3;
                    continue;
                }
            }
            out->fwd[out->f++] = (char)c;
            out->match[out->m++] = (char)c;
            i++;
        }
        size_t seg_len = out->m - seg_m;
        const char *seg = out->match + seg_m;
        bool dot = seg_len == 1 && seg[0] == '.';
        bool dot_dot = seg_len == 2 && seg[0] == '.' && seg[1] == '.';
        if (dot || dot_dot) {
            out->f = seg_f;
            out->m = seg_m;
            if (dot_dot) {
                out->f = pop_segment(out->fwd, out->f);
                out->m = pop_segment(out->match, out->m);
            }
            continue;
        }
        if (i < len) { /* a '/' follows */
            out->fwd[out->f++] = '/';
            out->match[out->m++] = '/';
        }
    }
    return 0;
}

/* Whether the raw target holds a byte no target may: a control character, a space, DEL,
 * or '#' (a fragment is never sent). */
static bool has_refused_byte(const char *raw, size_t raw_len)
{
    for (size_t i = 0; i < raw_len; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c <= 0x20 || c == 0x7f || c == '#')
            return true;
    }
    return false;
}

/* asterisk-form, for OPTIONS only. */
static int parse_asterisk(const char *method, char *out, struct request_target *t)
{
    if (method == NULL || strcmp(method, "OPTIONS") != 0)
        return -1;
    out[0] = '*';
    out[1] = '\0';
    t->forward = t->match = out;
    t->forward_len = t->path_len = t->match_len = 1;
    t->asterisk = true;
    return 0;
}

/* absolute-form: "http://" or "https://" and an authority without userinfo, then the path
 * at *ppath; origin-form (a leading '/') has no authority (*pauthority NULL). Returns 0,
 * or -1 to refuse. */
static int split_authority(const char *raw, size_t raw_len, const char **pauthority, size_t *pauthority_len,
                           const char **ppath)
{
    const char *end = raw + raw_len;
    size_t scheme_len;
    *pauthority = NULL;
    *pauthority_len = 0;
    *ppath = raw;
    if (raw[0] == '/')
        return 0;
    if (raw_len >= 7 && strncasecmp(raw, "http://", 7) == 0)
        scheme_len = 7;
    else if (raw_len >= 8 && strncasecmp(raw, "https://", 8) == 0)
        scheme_len = 8;
    else
        return -1;
    const char *authority = raw + scheme_len, *p = authority;
    while (p < end && *p != '/' && *p != '?')
        p++;
    size_t authority_len = (size_t)(p - authority);
    if (authority_len == 0)
        return -1;
    for (size_t k = 0; k < authority_len; k++)
        if (!authority_char((unsigned char)authority[k]))
            return -1; /* '@' (userinfo) among them */
    *pauthority = authority;
    *pauthority_len = authority_len;
    *ppath = p;
    return 0;
}

int request_target_parse(const char *method, const char *raw, size_t raw_len, char *out, size_t out_size,
                         struct request_target *t)
{
    memset(t, 0, sizeof(*t));
    if (raw == NULL || raw_len == 0 || out_size < request_target_buffer_size(raw_len))
        return -1;
    if (has_refused_byte(raw, raw_len))
        return -1;
    if (raw_len == 1 && raw[0] == '*')
        return parse_asterisk(method, out, t);

    const char *p, *end = raw + raw_len;
    const char *authority;
    size_t authority_len;
    if (split_authority(raw, raw_len, &authority, &authority_len, &p) < 0)
        return -1;

    const char *query = memchr(p, '?', (size_t)(end - p));
    const char *path_end = query != NULL ? query : end;
    size_t query_len = (size_t)(end - path_end);
    /* forward: the path, the query, the NUL; then match: the path, the NUL */
    struct path_out po = { .fwd = out, .match = out + raw_len + 2 };
    if (normalise_path(p, (size_t)(path_end - p), &po) < 0)
        return -1;
    memcpy(out + po.f, path_end, query_len);
    out[po.f + query_len] = '\0';
    po.match[po.m] = '\0';

    t->forward = out;
    t->path_len = po.f;
    t->forward_len = po.f + query_len;
    t->match = po.match;
    t->match_len = po.m;
    t->authority = authority;
    t->authority_len = authority_len;
    return 0;
}
