/* The check of an upstream's 101 (ws_101.h). Pure: no I/O, no state of its own; it fills
 * the caller's ws_101_expect and ws_101. An expectation has has_key set only when the whole
 * Sec-WebSocket-Accept was computed, so a failed SHA-1 or a client without a key makes
 * every 101 invalid rather than trusted. The counts of Upgrade and Sec-WebSocket-Accept
 * fields are kept so that a repeated field also fails ws_101_valid. */
#include "proxy/ws_101.h"

#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "proxy/http1.h"

/* RFC 6455 1.3 */
static const char websocket_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

void ws_101_expect_key(struct ws_101_expect *e, const char *key, size_t key_len)
{
    *e = (struct ws_101_expect){ .has_key = false };
    if (key == NULL)
        return;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md != NULL && EVP_DigestInit_ex(md, EVP_sha1(), NULL) == 1 && EVP_DigestUpdate(md, key, key_len) == 1 &&
              EVP_DigestUpdate(md, websocket_guid, sizeof(websocket_guid) - 1) == 1 &&
              EVP_DigestFinal_ex(md, digest, &digest_len) == 1 && digest_len == 20;
    EVP_MD_CTX_free(md);
    if (ok && EVP_EncodeBlock((unsigned char *)e->accept, digest, 20) == WS_ACCEPT_LEN)
        e->has_key = true;
}

void ws_101_expect_from(struct ws_101_expect *e, const struct gate_header *headers, size_t n_headers)
{
    for (size_t i = 0; i < n_headers; i++) {
        if (!http1_name_is(headers[i].name, headers[i].name_len, "Sec-WebSocket-Key"))
            continue;
        const char *v = headers[i].value;
        size_t len = headers[i].value_len;
        while (len > 0 && (*v == ' ' || *v == '\t')) {
            v++;
            len--;
        }
        while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
            len--;
        ws_101_expect_key(e, v, len);
        return;
    }
    ws_101_expect_key(e, NULL, 0);
}

/* True when a Sec-WebSocket-Extensions value (RFC 6455 9.1: extensions separated by
 * commas, each a token and its ;parameters) names permessage-deflate. */
static bool names_permessage_deflate(const char *v, size_t vlen)
{
    static const char name[] = "permessage-deflate";
    const size_t nlen = sizeof(name) - 1;
    const char *end = v + vlen;
    for (const char *p = v; p < end;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *token = p;
        while (p < end && *p != ';' && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        if ((size_t)(p - token) == nlen && strncasecmp(token, name, nlen) == 0)
            return true;
        while (p < end && *p != ',') /* its parameters */
            p++;
    }
    return false;
}

void ws_101_field(struct ws_101 *seen, const struct ws_101_expect *e, const char *name, size_t name_len,
                  const char *value, size_t value_len)
{
    if (http1_name_is(name, name_len, "Upgrade")) {
        seen->upgrades++;
        seen->upgrade_websocket = http1_name_is(value, value_len, "websocket");
    } else if (http1_name_is(name, name_len, "Sec-WebSocket-Accept")) {
        seen->accepts++;
        seen->accept_matches = e->has_key && value_len == WS_ACCEPT_LEN && memcmp(value, e->accept, WS_ACCEPT_LEN) == 0;
    } else if (http1_name_is(name, name_len, "Sec-WebSocket-Extensions") && names_permessage_deflate(value, value_len)) {
        seen->per_message_deflate = true;
    }
}

bool ws_101_valid(const struct ws_101 *seen)
{
    return seen->upgrades == 1 && seen->upgrade_websocket && seen->accepts == 1 && seen->accept_matches;
}
