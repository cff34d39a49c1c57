/* The gate's decisions (gate.h says what it decides and why it is pure): it owns no state
 * of its own; each call reads the request model and the configuration it is given and
 * writes only the caller's out-parameters and sink. What the limiter is asked about and
 * what the upstream receives come from the same parsed fields, so a header the gate judged
 * is the header that is forwarded. */
#include "proxy/gate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "proxy/field_name.h"
#include "proxy/http1.h"
#include "proxy/netaddr.h"
#include "proxy/ratelimit_headers.h"
#include "proxy/ws_auth.h"
#include "tiers/plan_rules.h"

static bool name_is(const struct gate_header *h, const char *name)
{
    size_t len = strlen(name);
    return h->name_len == len && strncasecmp(h->name, name, len) == 0;
}

/* The first field called name, as a lookup on the connection finds it, or NULL. */
static const struct gate_header *first_field(const struct gate_request *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (name_is(&req->headers[i], name))
            return &req->headers[i];
    return NULL;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* The API key the client presented (value[0, *plen)), or NULL: the bare value of
 * key_header, or after "Bearer " when key_header is Authorization. */
static const char *presented_key(const struct gate_request *req, size_t *plen)
{
    const char *key_header = req->cfg->key_header;
    const struct gate_header *h = first_field(req, key_header);
    if (h == NULL)
        return NULL;
    const char *value = h->value, *end = h->value + h->value_len;
    if (strcasecmp(key_header, "Authorization") == 0) {
        if (h->value_len < 7 || strncasecmp(value, "Bearer", 6) != 0 || !is_space(value[6]))
            return NULL;
        value += 6;
    }
    while (value < end && is_space(*value))
        value++;
    while (end > value && is_space(end[-1]))
        end--;
    /* A key never holds a NUL: what a C string of the value would show stops there. */
    const char *nul = memchr(value, '\0', (size_t)(end - value));
    if (nul != NULL)
        end = nul;
    while (end > value && is_space(end[-1]))
        end--;
    if (end == value)
        return NULL;
    *plen = (size_t)(end - value);
    return value;
}

void gate_client_address(const struct gate_request *req, char *buf, size_t buflen)
{
    const struct proxy_config *cfg = req->cfg;
    buf[0] = '\0';
    if (req->peer == NULL || buflen == 0)
        return;
    sockaddr_to_text(req->peer, buf, buflen);
    if (!cidr_match_sockaddr(cfg->trusted_proxies, cfg->n_trusted_proxies, req->peer))
        return;
    /* Every X-Forwarded-For field is one list (RFC 9110 5.3): the fields are walked from
       the last, each from its right; the first untrusted address wins, and when all are
       trusted the left-most of the earliest field that has one does. */
    for (size_t i = req->n_headers; i-- > 0;) {
        const struct gate_header *h = &req->headers[i];
        if (!name_is(h, "X-Forwarded-For"))
            continue;
        char found[64];
        size_t value_len = h->value_len;
        const char *nul = memchr(h->value, '\0', value_len);
        if (nul != NULL)
            value_len = (size_t)(nul - h->value);
        if (!xff_client_address(h->value, value_len, cfg->trusted_proxies, cfg->n_trusted_proxies, found,
                                sizeof(found) < buflen ? sizeof(found) : buflen))
            continue;
        snprintf(buf, buflen, "%s", found);
        if (!cidr_match_text(cfg->trusted_proxies, cfg->n_trusted_proxies, found, strlen(found)))
            return;
    }
}

static bool is_exempt(const struct proxy_config *cfg, const struct request_target *t)
{
    for (size_t i = 0; i < cfg->n_exempt_paths; i++)
        if (request_target_has_prefix(t->match, t->match_len, cfg->exempt_paths[i], strlen(cfg->exempt_paths[i]),
                                      cfg->path_case_insensitive))
            return true;
    return false;
}

static enum gate_action refuse(struct gate_admission *out, unsigned status, const char *error_code)
{
    out->action = GATE_REFUSE;
    out->refusal.status = status;
    out->refusal.error_code = error_code;
    out->refusal.www_authenticate = status == 401;
    /* the access log tells a request without a key from one whose key is unknown */
    out->refusal.decision = strcmp(error_code, "missing_api_key") == 0   ? "missing_key"
                            : strcmp(error_code, "invalid_api_key") == 0 ? "invalid_key"
                                                                         : NULL;
    return out->action;
}

/* prefix then text into subject (size > strlen(prefix)), text cut to fit as snprintf
 * would cut it; without snprintf, which cost about 0.6k instructions a request. */
static void subject_write(char *subject, size_t size, const char *prefix, const char *text)
{
    size_t prefix_len = strlen(prefix), text_len = strlen(text);
    if (text_len > size - 1 - prefix_len)
        text_len = size - 1 - prefix_len;
    memcpy(subject, prefix, prefix_len);
    memcpy(subject + prefix_len, text, text_len);
    subject[prefix_len + text_len] = '\0';
}

enum gate_action gate_admit(const struct gate_request *req, const struct snapshot *snap, struct gate_admission *out)
{
    const struct proxy_config *cfg = req->cfg;
    memset(out, 0, sizeof(*out));
    if (is_exempt(cfg, req->target)) {
        out->action = GATE_EXEMPT;
        return out->action;
    }
    if (snap == NULL)
        return refuse(out, 503, "catalog_unavailable");

    struct gate_check *c = &out->check;
    size_t key_len = 0;
    const char *key = presented_key(req, &key_len);
    /* the key may also come in the query or a subprotocol: one key wherever it comes */
    if (ws_auth_presented_key(req->headers, req->n_headers, req->websocket, key, key_len, req->query_key, &key,
                              &key_len) != 0)
        return refuse(out, 401, "invalid_api_key");
    if (key != NULL) {
        const struct tier_user *user = snapshot_find_key(snap, key, key_len);
        if (user == NULL)
            return refuse(out, 401, "invalid_api_key");
        c->plan = tier_user_plan(user);   /* the user's own limits in place of the plan's */
        c->user_id = user->id;
        subject_write(c->subject, sizeof(c->subject), "u:", user->id);
    } else if (cfg->anonymous_plan != NULL) {
        c->plan = snapshot_find_plan(snap, cfg->anonymous_plan);
        if (c->plan == NULL)
            return refuse(out, 401, "missing_api_key");
        char addr[64];
        gate_client_address(req, addr, sizeof(addr));
        c->user_id = "anonymous";
        subject_write(c->subject, sizeof(c->subject), GATE_ANONYMOUS_PREFIX, addr);
    } else {
        return refuse(out, 401, "missing_api_key");
    }

    const struct tier_limit *ws = NULL;
    c->n = tier_plan_rules(c->plan, req->method, req->target->match, req->target->match_len,
                           cfg->path_case_insensitive, cfg->lease_ttl_ms, c->rules, c->checked, &ws);
    if (ws != NULL && req->websocket) {
        c->has_ws_rule = true;
        c->ws_rule = ws->rule;
    }
    for (size_t i = 0; i < c->n; i++)
        c->has_concurrency |= c->rules[i].kind == LIMIT_CONCURRENCY;
    out->action = c->n == 0 ? GATE_UNLIMITED : GATE_CHECK;
    return out->action;
}

/* The store did not answer: forward or refuse by [limits] on_store_error. */
static void verdict_without_store(const struct gate_check *check, const struct proxy_config *cfg,
                                  struct gate_outcome *out)
{
    out->store_error = true;
    out->decision = "store_unavailable";
    bool has_rate = false;
    for (size_t i = 0; i < check->n; i++)
        has_rate |= check->rules[i].kind != LIMIT_CONCURRENCY;
    /* a kind left "local" here had nothing to decide it with (the fallback failed): open */
    bool open = (!has_rate || cfg->rate_on_store_error != LIMITER_STORE_ERROR_CLOSED) &&
                (!check->has_concurrency || cfg->concurrency_on_store_error != LIMITER_STORE_ERROR_CLOSED);
    if (open) {
        out->action = GATE_FORWARD;
    } else {
        out->action = GATE_UNAVAILABLE;
        out->error_code = "limiter_unavailable";
    }
}

/* A limit refused: which kind, and how long the client waits; a shadow plan forwards. */
static void verdict_over_limit(const struct gate_check *check, bool websocket, const struct limiter_result *result,
                               struct gate_outcome *out)
{
    bool rate_rejected = false, quota_rejected = false;
    int64_t wait_ms = 0;
    for (size_t i = 0; i < result->n && i < check->n; i++) {
        const struct limit_verdict *v = &result->verdicts[i];
        if (v->allowed)
            continue;
        rate_rejected |= check->rules[i].kind != LIMIT_CONCURRENCY;
        quota_rejected |= check->rules[i].kind == LIMIT_QUOTA;
        if (v->reset_ms > wait_ms)
            wait_ms = v->reset_ms;
    }
    static const char *const type_names[] = { "http", "concurrency", "ws_connection", "ws_message" };
    out->over_limit = true;
    /* A quota counts under "http" in /metrics (SPEC's four limit types); the access log
       and the rejection warning say "quota". */
    out->limit_type = rate_rejected ? LIMIT_HIT_HTTP : websocket ? LIMIT_HIT_WS_CONNECTION : LIMIT_HIT_CONCURRENCY;
    out->limit_type_name = quota_rejected ? "quota" : type_names[out->limit_type];
    if (check->plan != NULL && check->plan->shadow) {
        out->action = GATE_FORWARD;
        out->decision = "shadow";
        return;
    }
    out->action = GATE_LIMITED;
    out->decision = result->local ? "local" : "rejected";
    /* Over a quota, the period's end is what the client waits for (Retry-After: the
       longest wait of every refusing limit) */
    out->error_code = quota_rejected ? "quota_exceeded" : rate_rejected ? "rate_limit_exceeded"
                                                                        : "concurrency_limit_exceeded";
    out->retry_after_s = ratelimit_retry_after_s(wait_ms);
}

void gate_verdict(const struct gate_check *check, bool websocket, const struct limiter_result *result,
                  const struct proxy_config *cfg, struct gate_outcome *out)
{
    memset(out, 0, sizeof(*out));
    if (result->status != LIMITER_DECIDED) {
        verdict_without_store(check, cfg, out);
        return;
    }
    /* decided by this proxy alone while the store was away: logged as "local", counted as a
       store error, answered (headers, 429) from the local state */
    out->local = result->local;
    out->store_error = result->local;
    if (result->allowed) {
        out->action = GATE_FORWARD;
        out->decision = result->local ? "local" : "allowed";
        out->lease_held = check->has_concurrency;
        return;
    }
    verdict_over_limit(check, websocket, result, out);
}

/* Whether name[0, len) is one of the comma-separated tokens of a Connection field. */
static bool named_in_connection(const struct gate_header *connection, const char *name, size_t name_len)
{
    if (connection == NULL)
        return false;
    const char *p = connection->value, *end = connection->value + connection->value_len;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        const char *start = p;
        while (p < end && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        if ((size_t)(p - start) == name_len && name_len > 0 && strncasecmp(start, name, name_len) == 0)
            return true;
    }
    return false;
}

static int emit(const struct gate_header_sink *sink, const char *name, const char *value, size_t value_len)
{
    return sink->emit(sink->ctx, name, strlen(name), value, value_len);
}

/* What the pass over the client's fields learns for the fields the proxy adds after them. */
struct header_pass {
    const struct gate_request *req;
    const struct gate_header_sink *sink;
    const char *key_header;          /* dropped: [auth] forward_key is off */
    const struct gate_header *connection;
    bool trusted_peer;               /* [proxy] trusted_proxies holds the peer */
    const char *host;                /* the Host sent upstream, NULL while none */
    size_t host_len;
    bool kept_xf_proto, kept_xf_host; /* a trusted peer's, sent as it came */
};

/* Fields never forwarded as they came: hop-by-hop, framing, underscored (unless
 * forwarded), the proxy's own X-Tier-*, and the key's header. */
static bool dropped_field(const struct header_pass *hp, const struct gate_header *h, bool underscored)
{
    const char *name = h->name;
    size_t len = h->name_len;
    if (http1_is_hop_by_hop(name, len) || named_in_connection(hp->connection, name, len))
        return true;
    if (name_is(h, "Content-Length") || name_is(h, "Expect"))
        return true;
    /* Applications behind CGI-like stacks read "_" as "-": an underscored name is
       dropped, or, when forwarded, never one that spells a header the proxy sets,
       strips or trusts. */
    if (underscored && !hp->req->cfg->underscores_forward)
        return true;
    if (field_name_has_prefix_folded(name, len, "X-Tier-"))
        return true;
    return hp->key_header != NULL && field_name_equal_folded(name, len, hp->key_header);
}

static bool spells_forwarding_field(const char *name, size_t len)
{
    return field_name_equal_folded(name, len, "X-Forwarded-For") ||
           field_name_equal_folded(name, len, "X-Forwarded-Proto") ||
           field_name_equal_folded(name, len, "X-Forwarded-Host") || field_name_equal_folded(name, len, "Host");
}

/* The client's field i, forwarded, rewritten or dropped. Returns 0 or -ENOMEM. */
static int pass_client_field(struct header_pass *hp, size_t i)
{
    const struct gate_request *req = hp->req;
    const struct gate_header *h = &req->headers[i];
    const char *name = h->name, *value = h->value;
    size_t len = h->name_len, value_len = h->value_len;
    bool underscored = field_name_has_underscore(name, len);
    if (dropped_field(hp, h, underscored))
        return 0;
    int rewritten = ws_auth_emit_field(req->headers, req->n_headers, i, req->cfg->key_query, hp->sink); /* no key */
    if (rewritten != 0)
        return rewritten < 0 ? -ENOMEM : 0;
    if (underscored && spells_forwarding_field(name, len))
        return 0;
    if (name_is(h, "X-Forwarded-For"))
        return 0; /* every field of it is one list, sent once below */
    if (name_is(h, "X-Forwarded-Proto")) {
        if (!hp->trusted_peer)
            return 0;
        hp->kept_xf_proto = true;
    } else if (name_is(h, "X-Forwarded-Host")) {
        if (!hp->trusted_peer)
            return 0;
        hp->kept_xf_host = true;
    } else if (name_is(h, "Host")) {
        if (req->target->authority != NULL) {
            value = req->target->authority;
            value_len = req->target->authority_len;
        }
        hp->host = value;
        hp->host_len = value_len;
    }
    return hp->sink->emit(hp->sink->ctx, name, len, value, value_len) < 0 ? -ENOMEM : 0;
}

/* A trusted peer's whole list, every field in order, then the peer: uncut (the head
   that carried it is capped, so the list is too). Returns 0 or -ENOMEM. */
static int emit_forwarded_for(const struct header_pass *hp)
{
    const struct gate_request *req = hp->req;
    char peer_text[64] = "";
    if (req->peer != NULL)
        sockaddr_to_text(req->peer, peer_text, sizeof(peer_text));
    size_t peer_len = strlen(peer_text);
    size_t chain_len = 0; /* of a trusted peer's X-Forwarded-For fields joined with ", " */
    for (size_t i = 0; hp->trusted_peer && i < req->n_headers; i++)
        if (name_is(&req->headers[i], "X-Forwarded-For"))
            chain_len += (chain_len > 0 ? 2 : 0) + req->headers[i].value_len;
    char *xff = hp->sink->alloc(hp->sink->ctx, chain_len + peer_len + 3);
    if (xff == NULL)
        return -ENOMEM;
    size_t at = 0;
    for (size_t i = 0; hp->trusted_peer && i < req->n_headers; i++) {
        const struct gate_header *h = &req->headers[i];
        if (!name_is(h, "X-Forwarded-For"))
            continue;
        if (at > 0) {
            memcpy(xff + at, ", ", 2);
            at += 2;
        }
        memcpy(xff + at, h->value, h->value_len);
        at += h->value_len;
    }
    if (at > 0) {
        memcpy(xff + at, ", ", 2);
        at += 2;
    }
    memcpy(xff + at, peer_text, peer_len + 1);
    at += peer_len;
    return emit(hp->sink, "X-Forwarded-For", xff, at) < 0 ? -ENOMEM : 0;
}

/* The fields the proxy adds after X-Forwarded-For. Returns 0 or -ENOMEM. */
static int emit_proxy_fields(const struct header_pass *hp, const struct gate_check *check)
{
    const struct gate_header_sink *sink = hp->sink;
    if (!hp->kept_xf_proto && emit(sink, "X-Forwarded-Proto", "http", 4) < 0)
        return -ENOMEM;
    if (hp->host != NULL && !hp->kept_xf_host && emit(sink, "X-Forwarded-Host", hp->host, hp->host_len) < 0)
        return -ENOMEM;
    if (check != NULL && check->plan != NULL) {
        if (emit(sink, "X-Tier-User", check->user_id, strlen(check->user_id)) < 0 ||
            emit(sink, "X-Tier-Plan", check->plan->name, strlen(check->plan->name)) < 0)
            return -ENOMEM;
    }
    if (hp->req->websocket) {
        /* The upgrade is the one hop-by-hop exchange a tunnel must pass on. */
        const struct gate_header *upgrade = first_field(hp->req, "Upgrade");
        if (emit(sink, "Connection", "Upgrade", 7) < 0 ||
            (upgrade != NULL ? emit(sink, "Upgrade", upgrade->value, upgrade->value_len)
                             : emit(sink, "Upgrade", "websocket", 9)) < 0)
            return -ENOMEM;
    }
    return 0;
}

int gate_upstream_headers(const struct gate_request *req, const struct gate_check *check,
                          const struct gate_header_sink *sink)
{
    const struct proxy_config *cfg = req->cfg;
    struct header_pass hp = {
        .req = req,
        .sink = sink,
        .key_header = cfg->forward_key ? NULL : cfg->key_header,
        .connection = first_field(req, "Connection"),
        .trusted_peer = req->peer != NULL && cidr_match_sockaddr(cfg->trusted_proxies, cfg->n_trusted_proxies, req->peer),
    };
    for (size_t i = 0; i < req->n_headers; i++)
        if (pass_client_field(&hp, i) < 0)
            return -ENOMEM;
    const char *authority = req->target->authority;
    if (hp.host == NULL && authority != NULL) { /* an HTTP/1.0 request without Host */
        hp.host = authority;
        hp.host_len = req->target->authority_len;
        if (emit(sink, "Host", authority, hp.host_len) < 0)
            return -ENOMEM;
    }
    if (emit_forwarded_for(&hp) < 0)
        return -ENOMEM;
    return emit_proxy_fields(&hp, check);
}
