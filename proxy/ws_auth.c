/* Where a browser puts its API key (ws_auth.h). Pure: no libmicrohttpd, no I/O, no state;
 * it writes only into what the caller hands it (the target's buffer, which only shrinks, a
 * struct ws_auth_key, the sink's or the scratch's memory). Keys found in several places
 * that differ, or one longer than WS_AUTH_KEY_MAX, are a conflict: nothing here picks one.
 * What goes to the sink never carries the key: a Sec-WebSocket-Protocol list goes without
 * the proxy's elements, a Referer without the key parameter. */
#include "proxy/ws_auth.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "tiers/request_target.h"

#define SUBPROTOCOL_FIELD "Sec-WebSocket-Protocol"

static bool field_is(const struct gate_header *h, const char *name)
{
    size_t len = strlen(name);
    return h->name_len == len && strncasecmp(h->name, name, len) == 0;
}

/* The byte at s[*i] of a form-encoded name or value, decoded ("%41" is 'A', '+' a space, a
 * '%' without two hex digits itself, as URLSearchParams reads it); advances *i. */
static char decoded_byte(const char *s, size_t len, size_t *i)
{
    char c = s[*i];
    if (c == '+') {
        (*i)++;
        return ' ';
    }
    if (c == '%' && *i + 2 < len) {
        int hi = request_target_hex_value((unsigned char)s[*i + 1]),
            lo = request_target_hex_value((unsigned char)s[*i + 2]);
        if (hi >= 0 && lo >= 0) {
            *i += 3;
            return (char)(hi << 4 | lo);
        }
    }
    (*i)++;
    return c;
}

/* True when s[0, len), decoded, is name. */
static bool decodes_to(const char *s, size_t len, const char *name)
{
    size_t n = strlen(name), j = 0;
    for (size_t i = 0; i < len;) {
        char c = decoded_byte(s, len, &i);
        if (j >= n || c != name[j])
            return false;
        j++;
    }
    return j == n;
}

/* One more occurrence of a key, key[0, len) (empty: given as nothing). */
static void note_key(struct ws_auth_key *out, const char *key, size_t len)
{
    out->found++;
    if (len == 0)
        return;
    if (out->key == NULL) {
        out->key = key;
        out->len = len;
    } else if (out->len != len || memcmp(out->key, key, len) != 0) {
        out->conflict = true;
    }
}

/* A parameter's value decoded into out->decoded, then noted; a second non-empty one is
 * decoded beside the first only to be compared. */
static void note_query_value(struct ws_auth_key *out, const char *v, size_t len)
{
    char other[WS_AUTH_KEY_MAX];
    char *buf = out->key == NULL ? out->decoded : other;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (n == WS_AUTH_KEY_MAX) {
            out->found++;
            out->conflict = true; /* too long to be a key */
            return;
        }
        buf[n++] = decoded_byte(v, len, &i);
    }
    note_key(out, buf, n);
}

/* Writes the query q[0, len) (without its '?') into dst without the parameters called
 * name, noting their values in rec (may be NULL). dst may be q: what is written never
 * overtakes what is read. Returns the length written. */
static size_t strip_query(char *dst, const char *q, size_t len, const char *name, struct ws_auth_key *rec)
{
    size_t at = 0;
    bool first = true;
    for (size_t pos = 0; pos <= len;) {
        const char *seg = q + pos;
        const char *amp = memchr(seg, '&', len - pos);
        size_t seg_len = amp != NULL ? (size_t)(amp - seg) : len - pos;
        const char *eq = memchr(seg, '=', seg_len);
        size_t name_len = eq != NULL ? (size_t)(eq - seg) : seg_len;
        if (decodes_to(seg, name_len, name)) {
            if (rec != NULL)
                note_query_value(rec, seg + name_len + (eq != NULL), seg_len - name_len - (eq != NULL));
        } else {
            if (!first)
                dst[at++] = '&';
            memmove(dst + at, seg, seg_len);
            at += seg_len;
            first = false;
        }
        pos += seg_len + 1;
    }
    return at;
}

void ws_auth_query_take(struct request_target *t, const char *name, struct ws_auth_key *out)
{
    memset(out, 0, sizeof(*out));
    if (name == NULL || t->forward_len <= t->path_len || t->forward[t->path_len] != '?')
        return;
    char *query = (char *)t->forward + t->path_len + 1; /* the caller's buffer (request_target.h) */
    size_t kept = strip_query(query, query, t->forward_len - t->path_len - 1, name, out);
    t->forward_len = kept > 0 ? t->path_len + 1 + kept : t->path_len;
    ((char *)t->forward)[t->forward_len] = '\0';
}

int ws_auth_query_take_into(struct request_target *t, const char *name, struct scratch *scratch,
                            struct ws_auth_key **out)
{
    if (name == NULL)
        return 0;
    *out = scratch_alloc(scratch, sizeof(**out));
    if (*out == NULL)
        return -ENOMEM;
    ws_auth_query_take(t, name, *out);
    return 0;
}

char *ws_auth_query_strip(const char *target, const char *name, char *out)
{
    const char *mark = name != NULL ? strchr(target, '?') : NULL;
    if (mark == NULL) {
        memmove(out, target, strlen(target) + 1);
        return out;
    }
    size_t path_len = (size_t)(mark - target);
    memmove(out, target, path_len);
    size_t kept = strip_query(out + path_len + 1, mark + 1, strlen(mark + 1), name, NULL);
    if (kept > 0)
        out[path_len] = '?';
    out[path_len + (kept > 0 ? 1 + kept : 0)] = '\0';
    return out;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The next non-empty element of the list value *p .. end (RFC 9110 5.6.1), trimmed;
 * false when there is none. */
static bool next_element(const char **p, const char *end, const char **el, size_t *len)
{
    while (*p < end) {
        const char *s = *p;
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *e = comma != NULL ? comma : end;
        *p = comma != NULL ? comma + 1 : end;
        while (s < e && is_ows(*s))
            s++;
        while (e > s && is_ows(e[-1]))
            e--;
        if (e > s) {
            *el = s;
            *len = (size_t)(e - s);
            return true;
        }
    }
    return false;
}

static bool is_key_protocol(const char *el, size_t len)
{
    size_t n = sizeof(WS_AUTH_KEY_PROTOCOL) - 1;
    return len >= n && strncasecmp(el, WS_AUTH_KEY_PROTOCOL, n) == 0;
}

static bool is_marker(const char *el, size_t len)
{
    size_t n = sizeof(WS_AUTH_PROTOCOL) - 1;
    return len == n && strncasecmp(el, WS_AUTH_PROTOCOL, n) == 0;
}

void ws_auth_protocol_key(const struct gate_header *headers, size_t n_headers, struct ws_auth_key *out)
{
    memset(out, 0, sizeof(*out));
    size_t prefix = sizeof(WS_AUTH_KEY_PROTOCOL) - 1;
    for (size_t i = 0; i < n_headers; i++) {
        if (!field_is(&headers[i], SUBPROTOCOL_FIELD))
            continue;
        const char *p = headers[i].value, *end = p + headers[i].value_len, *el;
        size_t len;
        while (next_element(&p, end, &el, &len))
            if (is_key_protocol(el, len))
                note_key(out, el + prefix, len - prefix);
    }
}

bool ws_auth_offered_marker(const struct gate_header *headers, size_t n_headers, const char **spelling,
                            size_t *spelling_len)
{
    for (size_t i = 0; i < n_headers; i++) {
        if (!field_is(&headers[i], SUBPROTOCOL_FIELD))
            continue;
        const char *p = headers[i].value, *end = p + headers[i].value_len, *el;
        size_t len;
        while (next_element(&p, end, &el, &len)) {
            if (is_marker(el, len)) {
                *spelling = el;
                *spelling_len = len;
                return true;
            }
        }
    }
    return false;
}

/* Joins key[0, len) to what was presented so far; false when they differ. */
static bool agree(const char **key, size_t *key_len, const char *other, size_t other_len)
{
    if (other == NULL)
        return true;
    if (*key == NULL) {
        *key = other;
        *key_len = other_len;
        return true;
    }
    return *key_len == other_len && memcmp(*key, other, other_len) == 0;
}

int ws_auth_presented_key(const struct gate_header *headers, size_t n_headers, bool websocket,
                          const char *header_key, size_t header_len, const struct ws_auth_key *query,
                          const char **key, size_t *key_len)
{
    *key = header_key;
    *key_len = header_key != NULL ? header_len : 0;
    if (query != NULL && (query->conflict || !agree(key, key_len, query->key, query->len)))
        return 1;
    if (!websocket)
        return 0;
    struct ws_auth_key offered;
    ws_auth_protocol_key(headers, n_headers, &offered);
    if (offered.conflict || !agree(key, key_len, offered.key, offered.len))
        return 1;
    return 0;
}

/* Whether any Sec-WebSocket-Protocol field holds an element of the proxy's; sets *first to
 * the first such field and *room to the bytes its list needs. */
static bool holds_own_protocols(const struct gate_header *headers, size_t n_headers, size_t *first, size_t *room)
{
    bool own = false;
    *room = 0;
    for (size_t i = n_headers; i-- > 0;) {
        const struct gate_header *h = &headers[i];
        if (!field_is(h, SUBPROTOCOL_FIELD))
            continue;
        *first = i;
        *room += 2 * h->value_len + 2; /* each element and its ", " */
        const char *p = h->value, *end = p + h->value_len, *el;
        size_t len;
        while (next_element(&p, end, &el, &len))
            own |= is_key_protocol(el, len) || is_marker(el, len);
    }
    return own;
}

static int emit_protocols(const struct gate_header *headers, size_t n_headers, size_t i,
                          const struct gate_header_sink *sink)
{
    const struct gate_header *h = &headers[i];
    size_t first = 0, room = 0;
    if (!field_is(h, SUBPROTOCOL_FIELD) || !holds_own_protocols(headers, n_headers, &first, &room))
        return 0;
    if (i != first)
        return 1; /* folded into the first */
    char *list = sink->alloc(sink->ctx, room + 1);
    if (list == NULL)
        return -ENOMEM;
    size_t at = 0;
    for (size_t j = first; j < n_headers; j++) {
        if (!field_is(&headers[j], SUBPROTOCOL_FIELD))
            continue;
        const char *p = headers[j].value, *end = p + headers[j].value_len, *el;
        size_t len;
        while (next_element(&p, end, &el, &len)) {
            if (is_key_protocol(el, len) || is_marker(el, len))
                continue;
            if (at > 0) {
                memcpy(list + at, ", ", 2);
                at += 2;
            }
            memcpy(list + at, el, len);
            at += len;
        }
    }
    list[at] = '\0';
    if (at > 0 && sink->emit(sink->ctx, h->name, h->name_len, list, at) < 0)
        return -ENOMEM;
    return 1;
}

/* A Referer that names the key's parameter goes without it. */
static int emit_referer(const struct gate_header *h, const char *key_query, const struct gate_header_sink *sink)
{
    if (key_query == NULL || memchr(h->value, '?', h->value_len) == NULL)
        return 0;
    char *copy = sink->alloc(sink->ctx, 2 * (h->value_len + 1));
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, h->value, h->value_len);
    copy[h->value_len] = '\0'; /* a NUL inside ends the value here, as it ends it upstream */
    char *stripped = ws_auth_query_strip(copy, key_query, copy + h->value_len + 1);
    return sink->emit(sink->ctx, h->name, h->name_len, stripped, strlen(stripped)) < 0 ? -ENOMEM : 1;
}

int ws_auth_emit_field(const struct gate_header *headers, size_t n_headers, size_t i, const char *key_query,
                       const struct gate_header_sink *sink)
{
    if (field_is(&headers[i], "Referer"))
        return emit_referer(&headers[i], key_query, sink);
    return emit_protocols(headers, n_headers, i, sink);
}
