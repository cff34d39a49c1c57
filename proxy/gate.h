/* The admission step of a request, pure: from one request model (method, normalised
 * target, header fields in order, peer address, configuration) to who is calling, what
 * applies and what the upstream receives (SPEC "One request model"; STYLE "decide once, on
 * one model, then hand off").
 *
 * No libmicrohttpd, libcurl, hiredis or libevent here: request.c gathers the model from
 * the connection, asks gate_admit, asks the store when the gate says so, and hands the
 * store's answer to gate_verdict; forward.c and websocket.c send what
 * gate_upstream_headers emits. Unit tests and the fuzzer drive it with plain structs.
 *
 * Every X-Forwarded-For field is one list: the limiter's client is its right-most untrusted
 * address (gate_client_address), and the upstream gets the whole list then the peer.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "proxy/config.h"
#include "proxy/header_field.h"
#include "proxy/metrics.h"
#include "store/limiter.h"
#include "tiers/request_target.h"
#include "tiers/snapshot.h"

/* The limiter subject of a keyless client begins with this: the memory store forgets such
 * subjects before keyed users (memory_store_set_evict_first). */
#define GATE_ANONYMOUS_PREFIX "ip:"

struct ws_auth_key;

/* The request model. Everything it points to outlives the gate's answers. */
struct gate_request {
    const char *method;
    const struct request_target *target;  /* request_target_parse's, already accepted */
    const struct gate_header *headers;    /* every field, in the order sent */
    size_t n_headers;
    const struct sockaddr *peer;          /* the connection's peer; NULL when unknown */
    bool websocket;                       /* a WebSocket handshake (GET with Upgrade: websocket) */
    const struct ws_auth_key *query_key;  /* the key_query parameter's key (ws_auth.h), taken out
                                             of the target; NULL when key_query is off */
    const struct proxy_config *cfg;       /* key_header, anonymous_plan, forward_key, exempt_paths,
                                             path_case, trusted_proxies, underscores_in_headers,
                                             lease_ttl, on_store_error */
};

enum gate_action {
    GATE_EXEMPT,     /* an exempt path: forwarded, no plan, no limits */
    GATE_REFUSE,     /* answered here: gate_admission.refusal */
    GATE_UNLIMITED,  /* a plan applies but none of its limits meets this request: forwarded */
    GATE_CHECK,      /* the store decides: gate_admission.check */
};

struct gate_refusal {
    unsigned status;           /* 401 or 503 */
    const char *error_code;    /* "missing_api_key", "invalid_api_key", "catalog_unavailable" */
    const char *decision;      /* for the access log; NULL when none fits ("error") */
    bool www_authenticate;     /* add WWW-Authenticate: Bearer */
};

/* Who is calling and which limits the store checks. */
struct gate_check {
    const struct tier_plan *plan;  /* the user's view of it (tier_user_plan): own limits in place */
    const char *user_id;       /* the user's id, or "anonymous" */
    char subject[160];         /* limiter subject: "u:<id>" (keys of one user share it) or
                                  GATE_ANONYMOUS_PREFIX "<addr>" */
    struct limit_rule rules[LIMITER_MAX_RULES];
    const struct tier_limit *checked[LIMITER_MAX_RULES]; /* the limit each rule came from */
    size_t n;
    bool has_concurrency;
    bool has_ws_rule;          /* a --ws-messages limit for this WebSocket */
    struct limit_rule ws_rule;
};

struct gate_admission {
    enum gate_action action;
    struct gate_refusal refusal;  /* GATE_REFUSE */
    struct gate_check check;      /* GATE_UNLIMITED and GATE_CHECK */
};

/* Step 1, before the store: exempt paths, then the key (from key_header, the key_query
 * parameter or a handshake's subprotocol, the same wherever it comes: ws_auth.h; or the
 * anonymous plan per client address), then the plan's rules for this method and path. snap may be NULL (no catalog
 * loaded yet): only exempt paths pass then. Fills *out and returns out->action. */
enum gate_action gate_admit(const struct gate_request *req, const struct snapshot *snap,
                            struct gate_admission *out);

enum gate_outcome_action {
    GATE_FORWARD,      /* admitted (allowed, shadow, or the store failed open) */
    GATE_LIMITED,      /* 429 */
    GATE_UNAVAILABLE,  /* 503 limiter_unavailable: the store failed closed */
};

struct gate_outcome {
    enum gate_outcome_action action;
    const char *decision;      /* "allowed", "shadow", "rejected", "store_unavailable", "local" */
    bool store_error;          /* the store did not decide (or the local fallback did) */
    bool local;                /* decided by the local fallback: the verdict stands */
    bool lease_held;           /* concurrency slots were taken and must be given back */
    bool over_limit;           /* some limit refused (a shadow plan forwards anyway) */
    enum limit_hit_kind limit_type;   /* when over_limit: what refused */
    const char *limit_type_name;      /* ... as the access log names it ("quota" for a quota,
                                         counted as "http" in limit_type) */
    const char *error_code;    /* GATE_LIMITED: "quota_exceeded" (a quota refused), "rate_limit_exceeded"
                                  or "concurrency_limit_exceeded";
                                  GATE_UNAVAILABLE: "limiter_unavailable" */
    int64_t retry_after_s;     /* GATE_LIMITED: until every refusing limit has room */
};

/* Step 2, once the store answered (or failed: result->status != LIMITER_DECIDED): the
 * outcome of check for a request (websocket: a handshake). on_store_error comes from
 * cfg (rate_on_store_error, concurrency_on_store_error): closed refuses, open and local
 * forward (a local decision comes as a decided result with result->local). */
void gate_verdict(const struct gate_check *check, bool websocket, const struct limiter_result *result,
                  const struct proxy_config *cfg, struct gate_outcome *out);

/* The client's address for per-IP limits: the peer, or, when the peer is a trusted proxy,
 * the right-most X-Forwarded-For address (every field, one list) that is not itself
 * trusted (the left-most when all are). "" when the peer is unknown. */
void gate_client_address(const struct gate_request *req, char *buf, size_t buflen);

/* What the upstream receives (SPEC "What the upstream receives"): the client's fields in
 * order minus hop-by-hop ones (and those Connection names), Content-Length and Expect
 * (the proxy frames the body itself), the key unless forward_key, the proxy's own
 * subprotocols (a key's, and "tierproxy": ws_auth.h), every X-Tier-* field and
 * the X-Forwarded-* fields of an untrusted peer; underscored names dropped unless
 * underscores_in_headers = forward, and then never one that spells a header the proxy sets,
 * strips or trusts; Host replaced by an absolute-form target's authority. Then
 * X-Forwarded-For (a trusted peer's list, then the peer), X-Forwarded-Proto and
 * X-Forwarded-Host (unless a trusted peer sent them), X-Tier-User and X-Tier-Plan when check
 * is not NULL, and for a WebSocket handshake Connection: Upgrade and the client's Upgrade.
 * Returns 0 or -ENOMEM. */
int gate_upstream_headers(const struct gate_request *req, const struct gate_check *check,
                          const struct gate_header_sink *sink);

