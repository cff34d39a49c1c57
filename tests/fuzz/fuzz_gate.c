/* Fuzzes the gate (proxy/gate.h) on what a client controls: method, target and header
 * fields, through request_target_parse, gate_admit, gate_verdict and
 * gate_upstream_headers, over a small catalog (users "alice" on "pro", keys "k1" and
 * "k2"; "free" as the anonymous plan). For any input: the gate answers one of its actions;
 * what it checks names a subject and at most LIMITER_MAX_RULES rules; the upstream gets no
 * hop-by-hop field (but a handshake's Connection/Upgrade), no client X-Tier-* field, no key
 * unless forward_key, no underscored name unless they are forwarded, and exactly one
 * X-Forwarded-For, which ends with the peer. The key_query parameter (api_key) is taken out
 * of the target whole, and no Sec-WebSocket-Protocol or Referer the upstream gets carries a
 * key (ws_auth.h).
 *
 * Input: 1 byte of switches (bit 0 method POST/GET, 1 key_header X-Api-Key, 2 anonymous
 * plan, 3 forward_key, 4 underscores forward, 5 peer trusted, 6 path_case insensitive,
 * 7 websocket), then lines: the target, then "name:value" fields. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proxy/field_name.h"
#include "proxy/gate.h"
#include "proxy/http1.h"
#include "proxy/netaddr.h"
#include "proxy/ws_auth.h"
#include "store/catalog/catalog.h"
#include "tiers/apikey.h"
#include "tiers/snapshot.h"

#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FIELDS 64

static struct snapshot *snap;

static void add_key(struct catalog *cat, const char *user, const char *key)
{
    struct catalog_key k = { .user_id = user, .label = "" };
    CHECK(apikey_hash(key, strlen(key), k.hash) == 0);
    int64_t id;
    CHECK(catalog_key_add(cat, &k, &id) == 0);
}

static void make_snapshot(void)
{
    char dir[] = "/tmp/fuzz-gate.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof(path), "%s/plans.db", dir);
    char err[256];
    struct catalog *cat = NULL;
    CHECK(catalog_open(path, CATALOG_CREATE, &cat, err, sizeof(err)) == 0);
    CHECK(catalog_begin(cat, true) == 0);
    int64_t pro, free_plan, id;
    CHECK(catalog_plan_add(cat, &(struct catalog_plan){ .name = "pro" }, &pro) == 0);
    CHECK(catalog_plan_add(cat, &(struct catalog_plan){ .name = "free" }, &free_plan) == 0);
    struct catalog_limit limits[] = {
        { .plan_id = pro, .amount = 100, .window_ms = 1000, .algorithm = LIMIT_SLIDING_LOG, .kind = CATALOG_LIMIT_RATE },
        { .plan_id = pro, .amount = 5, .window_ms = 1000, .algorithm = LIMIT_SLIDING_LOG, .kind = CATALOG_LIMIT_RATE,
          .route_method = "POST", .route_prefix = "/upload" },
        { .plan_id = pro, .amount = 7, .window_ms = 1000, .algorithm = LIMIT_SLIDING_LOG, .kind = CATALOG_LIMIT_RATE,
          .route_method = "*", .route_prefix = "/admin" },
        { .plan_id = pro, .amount = 2, .algorithm = LIMIT_SLIDING_LOG, .kind = CATALOG_LIMIT_CONCURRENCY },
        { .plan_id = pro, .amount = 9, .window_ms = 1000, .algorithm = LIMIT_SLIDING_LOG,
          .kind = CATALOG_LIMIT_WS_MESSAGES },
        { .plan_id = free_plan, .amount = 10, .window_ms = 1000, .algorithm = LIMIT_SLIDING_LOG,
          .kind = CATALOG_LIMIT_RATE },
    };
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
        CHECK(catalog_limit_add(cat, &limits[i], &id) == 0);
    CHECK(catalog_user_add(cat, &(struct catalog_user){ .id = "alice", .plan_id = pro }) == 0);
    add_key(cat, "alice", "k1");
    add_key(cat, "alice", "k2");
    CHECK(catalog_commit(cat) == 0);
    catalog_close(cat);
    CHECK(snapshot_load(path, &snap, err, sizeof(err)) == 0);
    unlink(path);
    rmdir(dir);
}

/* What the upstream received, checked field by field as it is emitted. */
struct seen {
    const struct proxy_config *cfg;
    bool websocket;
    size_t xff;
    size_t tier_user, tier_plan;
    char *arena;
    size_t arena_used, arena_cap;
};

static int check_field(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len)
{
    struct seen *s = ctx;
    bool upgrade_pair = s->websocket && (field_name_equal_folded(name, name_len, "Connection") ||
                                         field_name_equal_folded(name, name_len, "Upgrade"));
    CHECK(upgrade_pair || !http1_is_hop_by_hop(name, name_len));
    if (field_name_equal_folded(name, name_len, "X-Tier-User"))
        s->tier_user++;
    else if (field_name_equal_folded(name, name_len, "X-Tier-Plan"))
        s->tier_plan++;
    else
        CHECK(!field_name_has_prefix_folded(name, name_len, "X-Tier-"));
    CHECK(s->cfg->forward_key || !field_name_equal_folded(name, name_len, s->cfg->key_header));
    CHECK(s->cfg->underscores_forward || !field_name_has_underscore(name, name_len));
    struct gate_header field = { name, name_len, value, value_len };
    struct ws_auth_key offered;
    const char *marker;
    size_t marker_len;
    ws_auth_protocol_key(&field, 1, &offered);
    CHECK(offered.found == 0 && !ws_auth_offered_marker(&field, 1, &marker, &marker_len));
    if (field_name_equal_folded(name, name_len, "Referer") && memchr(value, '\0', value_len) == NULL) {
        char *copy = strndup(value, value_len), *stripped = malloc(value_len + 1);
        CHECK(copy != NULL && stripped != NULL);
        CHECK(strcmp(ws_auth_query_strip(copy, s->cfg->key_query, stripped), copy) == 0);
        free(copy);
        free(stripped);
    }
    if (field_name_equal_folded(name, name_len, "X-Forwarded-For")) {
        CHECK(memcmp(name, "X-Forwarded-For", name_len) == 0); /* the proxy's own, never a client's */
        s->xff++;
    }
    return 0;
}

static void *arena_alloc(void *ctx, size_t n)
{
    struct seen *s = ctx;
    free(s->arena); /* the list is checked as emitted: one allocation is live at a time */
    s->arena = malloc(n > 0 ? n : 1);
    s->arena_cap = n;
    return s->arena;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (snap == NULL)
        make_snapshot();
    if (size < 1)
        return 0;
    uint8_t switches = data[0];
    /* A copy of its own size, so ASan sees any read past the end. */
    size_t n = size - 1;
    char *input = malloc(n > 0 ? n : 1);
    CHECK(input != NULL);
    memcpy(input, data + 1, n);

    const char *method = (switches & 1) ? "POST" : "GET";
    struct cidr trusted;
    CHECK(cidr_parse("10.0.0.0/8", &trusted) == 0);
    char *exempt[] = { "/health" };
    struct proxy_config cfg = {
        .key_header = (switches & 2) ? "X-Api-Key" : "Authorization",
        .anonymous_plan = (switches & 4) ? "free" : NULL,
        .forward_key = (switches & 8) != 0,
        .underscores_forward = (switches & 16) != 0,
        .trusted_proxies = &trusted,
        .n_trusted_proxies = 1,
        .path_case_insensitive = (switches & 64) != 0,
        .exempt_paths = exempt,
        .n_exempt_paths = 1,
        .lease_ttl_ms = 30000,
        .key_query = "api_key",
    };
    struct sockaddr_storage peer;
    CHECK(sockaddr_from_ip_port((switches & 32) ? "10.0.0.1" : "192.0.2.1", 40000, &peer) == 0);

    const char *end = input + n;
    const char *line_end = memchr(input, '\n', n);
    size_t target_len = line_end != NULL ? (size_t)(line_end - input) : n;
    struct gate_header fields[MAX_FIELDS];
    size_t n_fields = 0;
    for (const char *p = line_end != NULL ? line_end + 1 : end; p < end && n_fields < MAX_FIELDS;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (e == NULL)
            e = end;
        const char *colon = memchr(p, ':', (size_t)(e - p));
        if (colon != NULL)
            fields[n_fields++] = (struct gate_header){ p, (size_t)(colon - p), colon + 1, (size_t)(e - colon - 1) };
        p = e + 1;
    }

    size_t cap = request_target_buffer_size(target_len);
    char *out = malloc(cap);
    CHECK(out != NULL);
    struct request_target target;
    if (request_target_parse(method, input, target_len, out, cap, &target) == 0) {
        struct ws_auth_key query_key, again;
        ws_auth_query_take(&target, cfg.key_query, &query_key);
        CHECK(strlen(target.forward) == target.forward_len && target.forward_len >= target.path_len);
        ws_auth_query_take(&target, cfg.key_query, &again);
        CHECK(again.found == 0); /* taken whole: nothing of it is left to forward */
        struct gate_request req = {
            .method = method, .target = &target, .headers = fields, .n_headers = n_fields,
            .peer = (const struct sockaddr *)&peer, .websocket = (switches & 128) != 0,
            .query_key = &query_key, .cfg = &cfg,
        };
        struct gate_admission adm;
        enum gate_action action = gate_admit(&req, snap, &adm);
        CHECK(action == adm.action);
        const struct gate_check *check = NULL;
        switch (action) {
        case GATE_EXEMPT:
            break;
        case GATE_REFUSE:
            CHECK(adm.refusal.status == 401 && adm.refusal.www_authenticate && adm.refusal.error_code != NULL);
            break;
        case GATE_UNLIMITED:
        case GATE_CHECK:
            check = &adm.check;
            CHECK(check->plan != NULL && check->user_id != NULL);
            CHECK(strncmp(check->subject, "u:", 2) == 0 || strncmp(check->subject, "ip:", 3) == 0);
            CHECK(check->n <= LIMITER_MAX_RULES && (check->n == 0) == (action == GATE_UNLIMITED));
            {
                struct limiter_result res = { .status = LIMITER_DECIDED, .allowed = false, .n = check->n };
                for (size_t i = 0; i < check->n; i++)
                    res.verdicts[i] = (struct limit_verdict){ .allowed = i % 2 == 0, .limit = 5, .reset_ms = 1500 };
                struct gate_outcome outcome;
                gate_verdict(check, req.websocket, &res, &cfg, &outcome);
                CHECK(outcome.decision != NULL);
                CHECK(check->n < 2 || outcome.action == GATE_LIMITED);
            }
            break;
        default:
            CHECK(false);
        }
        struct seen seen = { .cfg = &cfg, .websocket = req.websocket };
        struct gate_header_sink sink = { .emit = check_field, .alloc = arena_alloc, .ctx = &seen };
        CHECK(gate_upstream_headers(&req, check, &sink) == 0);
        CHECK(seen.xff == 1);
        CHECK(seen.tier_user == (check != NULL ? 1u : 0u) && seen.tier_plan == seen.tier_user);
        free(seen.arena);
    }
    free(out);
    free(input);
    return 0;
}
