/* The gate (proxy/gate.h) from plain structs, no server: SPEC's lines on auth, anonymous
 * clients, exempt paths, routes, the verdict and what the upstream receives. The
 * snapshot comes from a temporary SQLite catalog, as the tiers tests build theirs. */
#include "../tiers/helpers.h"

#include <arpa/inet.h>

#include "proxy/config.h"
#include "proxy/gate.h"
#include "proxy/netaddr.h"
#include "tiers/snapshot.h"

/* One catalog for every test:
 *   plan "pro": 100/s plan-wide, 5/s on "POST /upload", 7/s on "* /admin", 2 concurrent
 *   plan "free" (the anonymous plan): 10/s
 *   plan "quiet": no limits
 *   plan "trial" (shadow): 1/s
 *   alice (pro): keys "alice-key-1", "alice-key-2", revoked "alice-old"
 *   bob (free): key "bob-key"; carol (quiet): "carol-key"; dave (trial): "dave-key"
 *   plan "metered" (priority 8): 100/min, quota 50/month, 3 concurrent, cost 10 on "POST /batch"
 *   erin (metered): "erin-key"; frank (metered, own rate 500/min and own 40/min on
 *   "POST /batch"): "frank-key" */
static struct tmpdb db;
static struct snapshot *snap;
static int64_t plan_wide_limit, upload_limit, admin_limit, pro_concurrency;
static int64_t metered_rate, metered_quota, metered_concurrency, frank_rate, frank_batch;

static int64_t add_limit_full(struct catalog *cat, const struct catalog_limit *l)
{
    int64_t id = 0;
    if (catalog_limit_add(cat, l, &id))
        fail_msg("limit_add: %s", catalog_errmsg(cat));
    return id;
}

static int setup(void **state)
{
    (void)state;
    tmpdb_make(&db);
    struct catalog *cat = tmpdb_begin(&db);
    int64_t pro = add_plan(cat, "pro");
    plan_wide_limit = add_limit(cat, pro, 'r', 100, 1000, NULL, NULL);
    upload_limit = add_limit(cat, pro, 'r', 5, 1000, "POST", "/upload");
    admin_limit = add_limit(cat, pro, 'r', 7, 1000, "*", "/admin");
    pro_concurrency = add_limit(cat, pro, 'c', 2, 0, NULL, NULL);
    int64_t free_plan = add_plan(cat, "free");
    add_limit(cat, free_plan, 'r', 10, 1000, NULL, NULL);
    int64_t quiet = add_plan(cat, "quiet");
    int64_t trial = add_plan(cat, "trial");
    add_limit(cat, trial, 'r', 1, 1000, NULL, NULL);
    assert_int_equal(catalog_plan_set_shadow(cat, trial, true), 0);
    add_user(cat, "alice", pro);
    add_user(cat, "bob", free_plan);
    add_user(cat, "carol", quiet);
    add_user(cat, "dave", trial);
    add_key(cat, "alice", "alice-key-1");
    add_key(cat, "alice", "alice-key-2");
    assert_int_equal(catalog_key_revoke(cat, add_key(cat, "alice", "alice-old")), 0);
    add_key(cat, "bob", "bob-key");
    add_key(cat, "carol", "carol-key");
    add_key(cat, "dave", "dave-key");
    int64_t metered = add_plan(cat, "metered");
    assert_int_equal(catalog_plan_set_priority(cat, metered, 8), 0);
    metered_rate = add_limit(cat, metered, 'r', 100, 60000, NULL, NULL);
    metered_quota = add_limit_full(cat, &(struct catalog_limit){
        .plan_id = metered, .kind = CATALOG_LIMIT_QUOTA, .amount = 50, .period = LIMIT_PERIOD_MONTH});
    metered_concurrency = add_limit(cat, metered, 'c', 3, 0, NULL, NULL);
    struct catalog_cost batch = {.plan_id = metered, .route_method = "POST", .route_prefix = "/batch", .cost = 10};
    assert_int_equal(catalog_cost_set(cat, &batch, NULL), 0);
    add_user(cat, "erin", metered);
    add_user(cat, "frank", metered);
    add_key(cat, "erin", "erin-key");
    add_key(cat, "frank", "frank-key");
    frank_rate = add_limit_full(cat, &(struct catalog_limit){
        .user_id = "frank", .kind = CATALOG_LIMIT_RATE, .amount = 500, .window_ms = 60000});
    frank_batch = add_limit_full(cat, &(struct catalog_limit){
        .user_id = "frank", .kind = CATALOG_LIMIT_RATE, .amount = 40, .window_ms = 60000,
        .route_method = "POST", .route_prefix = "/batch"});
    tmpdb_commit(cat);
    char err[256];
    if (snapshot_load(db.path, &snap, err, sizeof(err)) != 0)
        fail_msg("snapshot_load: %s", err);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    snapshot_unref(snap);
    tmpdb_remove(&db);
    return 0;
}

/* A request under test: its configuration, target, fields and peer, all in one place. */
struct fixture {
    struct proxy_config cfg;
    char *exempt[4];
    struct cidr trusted[4];
    char target_buf[512];
    struct request_target target;
    struct gate_header headers[16];
    struct sockaddr_storage peer;
    struct gate_request req;
};

static void fixture_init(struct fixture *f, const char *method, const char *raw_target, const char *peer)
{
    memset(f, 0, sizeof(*f));
    f->cfg.key_header = "Authorization";
    f->cfg.lease_ttl_ms = 30000;
    f->cfg.exempt_paths = f->exempt;
    f->cfg.trusted_proxies = f->trusted;
    assert_int_equal(request_target_parse(method, raw_target, strlen(raw_target), f->target_buf,
                                          sizeof(f->target_buf), &f->target),
                     0);
    assert_int_equal(sockaddr_from_ip_port(peer, 40000, &f->peer), 0);
    f->req = (struct gate_request){
        .method = method, .target = &f->target, .headers = f->headers,
        .peer = (const struct sockaddr *)&f->peer, .cfg = &f->cfg,
    };
}

static void add_field(struct fixture *f, const char *name, const char *value)
{
    assert_true(f->req.n_headers < sizeof(f->headers) / sizeof(f->headers[0]));
    f->headers[f->req.n_headers++] = (struct gate_header){ name, strlen(name), value, strlen(value) };
}

static void trust(struct fixture *f, const char *range)
{
    assert_int_equal(cidr_parse(range, &f->trusted[f->cfg.n_trusted_proxies]), 0);
    f->cfg.n_trusted_proxies++;
}

static void exempt(struct fixture *f, const char *prefix)
{
    f->exempt[f->cfg.n_exempt_paths++] = (char *)prefix;
}

static enum gate_action admit(struct fixture *f, struct gate_admission *adm)
{
    return gate_admit(&f->req, snap, adm);
}

static void assert_refused(struct fixture *f, unsigned status, const char *code)
{
    struct gate_admission adm;
    assert_int_equal(admit(f, &adm), GATE_REFUSE);
    assert_int_equal(adm.refusal.status, status);
    assert_string_equal(adm.refusal.error_code, code);
    assert_int_equal(adm.refusal.www_authenticate, status == 401);
}

/* ---- auth ---- */

static void test_bearer_key_names_its_user(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/v1/items", "192.0.2.1");
    add_field(&f, "authorization", "bearer   alice-key-1  ");
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_string_equal(adm.check.user_id, "alice");
    assert_string_equal(adm.check.plan->name, "pro");
    assert_string_equal(adm.check.subject, "u:alice");
}

static void test_keys_of_one_user_share_limits(void **state)
{
    (void)state;
    struct fixture a, b;
    fixture_init(&a, "GET", "/", "192.0.2.1");
    add_field(&a, "Authorization", "Bearer alice-key-1");
    fixture_init(&b, "GET", "/", "198.51.100.9");
    add_field(&b, "Authorization", "Bearer alice-key-2");
    struct gate_admission x, y;
    assert_int_equal(admit(&a, &x), GATE_CHECK);
    assert_int_equal(admit(&b, &y), GATE_CHECK);
    assert_string_equal(x.check.subject, y.check.subject);
    assert_int_equal(x.check.n, y.check.n);
}

static void test_missing_key_is_401(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    assert_refused(&f, 401, "missing_api_key");
    add_field(&f, "Authorization", "Basic YWxpY2U6eA=="); /* not Bearer: no key presented */
    assert_refused(&f, 401, "missing_api_key");
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer   ");
    assert_refused(&f, 401, "missing_api_key");
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Beareralice-key-1");
    assert_refused(&f, 401, "missing_api_key");
}

static void test_invalid_and_revoked_keys_are_401(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer nobody-has-this");
    assert_refused(&f, 401, "invalid_api_key");
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-old");
    assert_refused(&f, 401, "invalid_api_key");
}

static void test_key_header_takes_the_bare_key(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    f.cfg.key_header = "X-Api-Key";
    add_field(&f, "x-api-key", " bob-key ");
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_string_equal(adm.check.user_id, "bob");
    /* Authorization is then nobody's key */
    fixture_init(&f, "GET", "/", "192.0.2.1");
    f.cfg.key_header = "X-Api-Key";
    add_field(&f, "Authorization", "Bearer bob-key");
    assert_refused(&f, 401, "missing_api_key");
    /* and "Bearer " in X-Api-Key is part of the key */
    fixture_init(&f, "GET", "/", "192.0.2.1");
    f.cfg.key_header = "X-Api-Key";
    add_field(&f, "X-Api-Key", "Bearer bob-key");
    assert_refused(&f, 401, "invalid_api_key");
}

static void test_no_catalog_is_503(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/v1", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    struct gate_admission adm;
    assert_int_equal(gate_admit(&f.req, NULL, &adm), GATE_REFUSE);
    assert_int_equal(adm.refusal.status, 503);
    assert_string_equal(adm.refusal.error_code, "catalog_unavailable");
}

/* ---- anonymous clients ---- */

static void test_anonymous_plan_per_client_ip(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "192.0.2.7");
    f.cfg.anonymous_plan = "free";
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_string_equal(adm.check.subject, "ip:192.0.2.7");
    assert_string_equal(adm.check.user_id, "anonymous");
    assert_string_equal(adm.check.plan->name, "free");
    /* an untrusted peer's X-Forwarded-For is not believed */
    add_field(&f, "X-Forwarded-For", "203.0.113.50");
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_string_equal(adm.check.subject, "ip:192.0.2.7");
    /* a key still wins over the anonymous plan, and a bad key is still refused */
    add_field(&f, "Authorization", "Bearer nope");
    assert_refused(&f, 401, "invalid_api_key");
}

static void test_anonymous_plan_missing_from_catalog_is_401(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "192.0.2.7");
    f.cfg.anonymous_plan = "gone";
    assert_refused(&f, 401, "missing_api_key");
}

static void test_trusted_proxy_rightmost_untrusted(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "10.0.0.1");
    f.cfg.anonymous_plan = "free";
    trust(&f, "10.0.0.0/8");
    add_field(&f, "X-Forwarded-For", "198.51.100.1, 203.0.113.9 , 10.1.1.1");
    char addr[64];
    gate_client_address(&f.req, addr, sizeof(addr));
    assert_string_equal(addr, "203.0.113.9");
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_string_equal(adm.check.subject, "ip:203.0.113.9");
}

static void test_several_xff_fields_are_one_list(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "10.0.0.1");
    trust(&f, "10.0.0.0/8");
    add_field(&f, "X-Forwarded-For", "198.51.100.1, 203.0.113.9");
    add_field(&f, "Accept", "*/*");
    add_field(&f, "x-forwarded-for", "10.2.2.2, 10.3.3.3");
    char addr[64];
    gate_client_address(&f.req, addr, sizeof(addr));
    assert_string_equal(addr, "203.0.113.9");
    /* all trusted: the left-most of the whole list */
    fixture_init(&f, "GET", "/", "10.0.0.1");
    trust(&f, "10.0.0.0/8");
    add_field(&f, "X-Forwarded-For", "10.9.9.9");
    add_field(&f, "X-Forwarded-For", "10.2.2.2, 10.3.3.3");
    gate_client_address(&f.req, addr, sizeof(addr));
    assert_string_equal(addr, "10.9.9.9");
    /* no usable item: the peer */
    fixture_init(&f, "GET", "/", "10.0.0.1");
    trust(&f, "10.0.0.0/8");
    add_field(&f, "X-Forwarded-For", " , ");
    gate_client_address(&f.req, addr, sizeof(addr));
    assert_string_equal(addr, "10.0.0.1");
}

/* ---- exempt paths ---- */

static void test_exempt_paths(void **state)
{
    (void)state;
    struct gate_admission adm;
    struct fixture f;
    fixture_init(&f, "GET", "/health/live", "192.0.2.1");
    exempt(&f, "/health");
    assert_int_equal(admit(&f, &adm), GATE_EXEMPT); /* a prefix, no key needed */
    fixture_init(&f, "GET", "/Health", "192.0.2.1");
    exempt(&f, "/health");
    assert_refused(&f, 401, "missing_api_key"); /* path_case = sensitive (the default) */
    f.cfg.path_case_insensitive = true;
    assert_int_equal(admit(&f, &adm), GATE_EXEMPT);
    /* matched on the normalised path */
    fixture_init(&f, "GET", "/v1/..//%68ealth?x=1", "192.0.2.1");
    exempt(&f, "/health");
    assert_int_equal(admit(&f, &adm), GATE_EXEMPT);
    fixture_init(&f, "GET", "/api/health", "192.0.2.1");
    exempt(&f, "/health");
    assert_refused(&f, 401, "missing_api_key");
    /* exempt even with no catalog loaded */
    fixture_init(&f, "GET", "/health", "192.0.2.1");
    exempt(&f, "/health");
    assert_int_equal(gate_admit(&f.req, NULL, &adm), GATE_EXEMPT);
}

/* ---- routes ---- */

static bool checks_limit(const struct gate_admission *adm, int64_t id)
{
    for (size_t i = 0; i < adm->check.n; i++)
        if (adm->check.rules[i].id == id)
            return true;
    return false;
}

static void test_routes_select_limits(void **state)
{
    (void)state;
    struct gate_admission adm;
    struct fixture f;
    fixture_init(&f, "POST", "/upload/big", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_true(checks_limit(&adm, plan_wide_limit));
    assert_true(checks_limit(&adm, upload_limit));
    assert_true(checks_limit(&adm, pro_concurrency));
    assert_false(checks_limit(&adm, admin_limit));
    assert_true(adm.check.has_concurrency);
    /* another method: not the POST route */
    fixture_init(&f, "GET", "/upload", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_false(checks_limit(&adm, upload_limit));
    /* "* /admin" meets every method; the path as normalised ("/x/../%61dmin") */
    fixture_init(&f, "DELETE", "/x/../%61dmin/users", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_true(checks_limit(&adm, admin_limit));
    /* path case */
    fixture_init(&f, "POST", "/UPLOAD", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_false(checks_limit(&adm, upload_limit));
    f.cfg.path_case_insensitive = true;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_true(checks_limit(&adm, upload_limit));
    /* a plan without limits: forwarded unchecked */
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer carol-key");
    assert_int_equal(admit(&f, &adm), GATE_UNLIMITED);
    assert_string_equal(adm.check.user_id, "carol");
}

static void test_route_method_is_case_sensitive(void **state)
{
    (void)state;
    struct gate_admission adm;
    struct fixture f;
    /* methods are case-sensitive (RFC 9110 9.1): "post" is not POST */
    fixture_init(&f, "post", "/upload", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    assert_false(checks_limit(&adm, upload_limit));
}

/* ---- the verdict ---- */

static struct limiter_result decided(bool allowed, size_t n)
{
    struct limiter_result r = { .status = LIMITER_DECIDED, .allowed = allowed, .n = n };
    for (size_t i = 0; i < n; i++)
        r.verdicts[i] = (struct limit_verdict){ .allowed = true, .limit = 10, .remaining = 5, .reset_ms = 100 };
    return r;
}

static void test_verdicts(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "POST", "/upload", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    struct gate_outcome out;

    struct limiter_result res = decided(true, adm.check.n);
    gate_verdict(&adm.check, false, &res, &f.cfg, &out);
    assert_int_equal(out.action, GATE_FORWARD);
    assert_string_equal(out.decision, "allowed");
    assert_true(out.lease_held);

    /* a rate limit refuses: 429 rate_limit_exceeded, Retry-After rounds up */
    res = decided(false, adm.check.n);
    for (size_t i = 0; i < adm.check.n; i++)
        if (adm.check.rules[i].id == upload_limit)
            res.verdicts[i] = (struct limit_verdict){ .allowed = false, .limit = 5, .remaining = 0, .reset_ms = 1500 };
    gate_verdict(&adm.check, false, &res, &f.cfg, &out);
    assert_int_equal(out.action, GATE_LIMITED);
    assert_string_equal(out.error_code, "rate_limit_exceeded");
    assert_string_equal(out.limit_type_name, "http");
    assert_int_equal(out.retry_after_s, 2);
    assert_false(out.lease_held);

    /* only the concurrency limit refuses */
    res = decided(false, adm.check.n);
    for (size_t i = 0; i < adm.check.n; i++)
        if (adm.check.rules[i].id == pro_concurrency)
            res.verdicts[i] = (struct limit_verdict){ .allowed = false, .limit = 2, .remaining = 0, .reset_ms = 1000 };
    gate_verdict(&adm.check, false, &res, &f.cfg, &out);
    assert_int_equal(out.action, GATE_LIMITED);
    assert_string_equal(out.error_code, "concurrency_limit_exceeded");
    assert_string_equal(out.limit_type_name, "concurrency");
    gate_verdict(&adm.check, true, &res, &f.cfg, &out);
    assert_string_equal(out.limit_type_name, "ws_connection");

    /* the store fails: closed by default, open per kind as configured */
    struct limiter_result down = { .status = LIMITER_UNAVAILABLE };
    gate_verdict(&adm.check, false, &down, &f.cfg, &out);
    assert_int_equal(out.action, GATE_UNAVAILABLE);
    assert_string_equal(out.error_code, "limiter_unavailable");
    f.cfg.rate_on_store_error = LIMITER_STORE_ERROR_OPEN;
    gate_verdict(&adm.check, false, &down, &f.cfg, &out);
    assert_int_equal(out.action, GATE_UNAVAILABLE); /* the concurrency limit still fails closed */
    f.cfg.concurrency_on_store_error = LIMITER_STORE_ERROR_OPEN;
    gate_verdict(&adm.check, false, &down, &f.cfg, &out);
    assert_int_equal(out.action, GATE_FORWARD);
    assert_string_equal(out.decision, "store_unavailable");
    assert_false(out.lease_held);

    /* local: the fallback's decision stands, logged "local", counted as a store error */
    f.cfg.rate_on_store_error = f.cfg.concurrency_on_store_error = LIMITER_STORE_ERROR_LOCAL;
    struct limiter_result local = res;
    local.local = true;
    gate_verdict(&adm.check, false, &local, &f.cfg, &out);
    assert_int_equal(out.action, GATE_LIMITED);
    assert_string_equal(out.decision, "local");
    assert_true(out.local && out.store_error);
    local.allowed = true;
    for (size_t i = 0; i < local.n; i++)
        local.verdicts[i].allowed = true;
    gate_verdict(&adm.check, false, &local, &f.cfg, &out);
    assert_int_equal(out.action, GATE_FORWARD);
    assert_string_equal(out.decision, "local");
    assert_true(out.lease_held);
    /* local, but the fallback could not decide either: forwarded (not refused) */
    gate_verdict(&adm.check, false, &down, &f.cfg, &out);
    assert_int_equal(out.action, GATE_FORWARD);
}

/* ---- quotas, costs, users' own limits ---- */

/* The rule checked for the catalog limit with that id. */
static const struct limit_rule *rule_of(const struct gate_check *c, int64_t id)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->checked[i]->id == id)
            return &c->rules[i];
    return NULL;
}

/* Admits METHOD TARGET with "Authorization: Bearer <key>"; the field's value lives in
 * bearer until the next call. */
static void admit_as(struct fixture *f, const char *key, const char *method, const char *target,
                     struct gate_admission *adm)
{
    static char bearer[64];
    fixture_init(f, method, target, "192.0.2.1");
    snprintf(bearer, sizeof(bearer), "Bearer %s", key);
    add_field(f, "Authorization", bearer);
    assert_int_equal(admit(f, adm), GATE_CHECK);
}

static void test_cost_applies_to_rate_and_quota_not_concurrency(void **state)
{
    (void)state;
    struct fixture f;
    struct gate_admission adm;
    admit_as(&f, "erin-key", "POST", "/batch/lookup", &adm);
    assert_int_equal(adm.check.n, 3);
    assert_int_equal(limit_rule_cost(rule_of(&adm.check, metered_rate)), 10);
    const struct limit_rule *quota = rule_of(&adm.check, metered_quota);
    assert_non_null(quota);
    assert_int_equal(quota->kind, LIMIT_QUOTA);
    assert_int_equal(quota->period, LIMIT_PERIOD_MONTH);
    assert_int_equal(quota->rate, 50);
    assert_int_equal(limit_rule_cost(quota), 10);
    const struct limit_rule *slots = rule_of(&adm.check, metered_concurrency);
    assert_int_equal(slots->kind, LIMIT_CONCURRENCY);
    assert_int_equal(limit_rule_cost(slots), 1);
    assert_int_equal(adm.check.plan->priority, 8);
    /* another method or path: cost 1 */
    admit_as(&f, "erin-key", "GET", "/batch/lookup", &adm);
    assert_int_equal(limit_rule_cost(rule_of(&adm.check, metered_rate)), 1);
    assert_int_equal(limit_rule_cost(rule_of(&adm.check, metered_quota)), 1);
}

static void test_quota_refusal_is_quota_exceeded_until_the_period_ends(void **state)
{
    (void)state;
    struct fixture f;
    struct gate_admission adm;
    admit_as(&f, "erin-key", "GET", "/x", &adm);
    for (size_t i = 0; i < adm.check.n; i++)
        if (adm.check.rules[i].id == metered_quota)
            assert_string_equal(adm.check.checked[i]->name, "metered-month");   /* the ietf item's name */
    struct limiter_result res = decided(false, adm.check.n);
    const int64_t ten_days_ms = 10LL * 86400000 + 300;
    for (size_t i = 0; i < adm.check.n; i++)
        if (adm.check.rules[i].id == metered_quota)
            res.verdicts[i] = (struct limit_verdict){ .allowed = false, .limit = 50, .remaining = 0, .reset_ms = ten_days_ms };
    struct gate_outcome out;
    gate_verdict(&adm.check, false, &res, &f.cfg, &out);
    assert_int_equal(out.action, GATE_LIMITED);
    assert_string_equal(out.error_code, "quota_exceeded");
    assert_int_equal(out.retry_after_s, 10 * 86400 + 1);
    assert_string_equal(out.limit_type_name, "quota");
    assert_int_equal(out.limit_type, LIMIT_HIT_HTTP);   /* /metrics keeps SPEC's four types */
    /* a rate limit refusing too: still the quota's code, the longest wait */
    for (size_t i = 0; i < adm.check.n; i++)
        if (adm.check.rules[i].id == metered_rate)
            res.verdicts[i] = (struct limit_verdict){ .allowed = false, .limit = 100, .remaining = 0, .reset_ms = 2000 };
    gate_verdict(&adm.check, false, &res, &f.cfg, &out);
    assert_string_equal(out.error_code, "quota_exceeded");
    assert_int_equal(out.retry_after_s, 10 * 86400 + 1);
}

static void test_user_limits_replace_the_plans_of_their_kind_and_route(void **state)
{
    (void)state;
    struct fixture f;
    struct gate_admission adm;
    admit_as(&f, "frank-key", "GET", "/x", &adm);
    assert_string_equal(adm.check.plan->name, "metered");
    assert_string_equal(adm.check.user_id, "frank");
    assert_null(rule_of(&adm.check, metered_rate));          /* replaced by frank's own rate */
    assert_int_equal(rule_of(&adm.check, frank_rate)->rate, 500);
    assert_int_equal(rule_of(&adm.check, frank_rate)->id, metered_rate);   /* and its count goes on */
    assert_non_null(rule_of(&adm.check, metered_quota));     /* other kinds stay the plan's */
    assert_non_null(rule_of(&adm.check, metered_concurrency));
    assert_null(rule_of(&adm.check, frank_batch));            /* a route limit, not this route */
    /* on his route: his route limit joins, with the plan's cost */
    admit_as(&f, "frank-key", "POST", "/batch", &adm);
    assert_int_equal(rule_of(&adm.check, frank_batch)->rate, 40);
    assert_int_equal(rule_of(&adm.check, frank_batch)->id, frank_batch);   /* it replaces none */
    assert_int_equal(limit_rule_cost(rule_of(&adm.check, frank_batch)), 10);
    assert_int_equal(limit_rule_cost(rule_of(&adm.check, frank_rate)), 10);
    /* erin, on the same plan, keeps the plan's */
    admit_as(&f, "erin-key", "GET", "/x", &adm);
    assert_non_null(rule_of(&adm.check, metered_rate));
    assert_null(rule_of(&adm.check, frank_rate));
}

static void test_shadow_plan_forwards(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer dave-key");
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    struct limiter_result res = decided(false, adm.check.n);
    res.verdicts[0].allowed = false;
    struct gate_outcome out;
    gate_verdict(&adm.check, false, &res, &f.cfg, &out);
    assert_int_equal(out.action, GATE_FORWARD);
    assert_string_equal(out.decision, "shadow");
    assert_true(out.over_limit);
    assert_string_equal(out.limit_type_name, "http");
}

/* ---- what the upstream receives ---- */

struct collected {
    char lines[32][256];
    size_t n;
    char arena[4096];
    size_t used;
};

static int collect(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len)
{
    struct collected *c = ctx;
    assert_true(c->n < 32);
    snprintf(c->lines[c->n++], sizeof(c->lines[0]), "%.*s: %.*s", (int)name_len, name, (int)value_len, value);
    return 0;
}

static void *arena_alloc(void *ctx, size_t n)
{
    struct collected *c = ctx;
    assert_true(c->used + n <= sizeof(c->arena));
    c->used += n;
    return c->arena + c->used - n;
}

static void upstream(struct fixture *f, const struct gate_check *check, struct collected *c)
{
    memset(c, 0, sizeof(*c));
    struct gate_header_sink sink = { .emit = collect, .alloc = arena_alloc, .ctx = c };
    assert_int_equal(gate_upstream_headers(&f->req, check, &sink), 0);
}

static bool received(const struct collected *c, const char *line)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->lines[i], line) == 0)
            return true;
    return false;
}

static bool received_name(const struct collected *c, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < c->n; i++)
        if (strncasecmp(c->lines[i], name, len) == 0 && c->lines[i][len] == ':')
            return true;
    return false;
}

static void test_upstream_drops_hop_by_hop_and_connection_named(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Host", "api.example");
    add_field(&f, "Connection", "keep-alive, X-Secret");
    add_field(&f, "Keep-Alive", "timeout=5");
    add_field(&f, "TE", "trailers");
    add_field(&f, "Proxy-Authorization", "Basic eA==");
    add_field(&f, "X-Secret", "1");
    add_field(&f, "Content-Length", "3");
    add_field(&f, "Expect", "100-continue");
    add_field(&f, "Accept", "text/plain");
    upstream(&f, NULL, &c);
    assert_true(received(&c, "Host: api.example"));
    assert_true(received(&c, "Accept: text/plain"));
    const char *gone[] = { "Connection", "Keep-Alive", "TE", "Proxy-Authorization", "X-Secret", "Content-Length",
                           "Expect", "Upgrade" };
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
        assert_false(received_name(&c, gone[i]));
}

static void test_upstream_key_stripped_unless_forward_key(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Authorization", "Bearer alice-key-1");
    upstream(&f, NULL, &c);
    assert_false(received_name(&c, "Authorization"));
    f.cfg.forward_key = true;
    upstream(&f, NULL, &c);
    assert_true(received(&c, "Authorization: Bearer alice-key-1"));
    /* a custom key header, and its underscore spelling, are stripped too */
    fixture_init(&f, "GET", "/", "192.0.2.1");
    f.cfg.key_header = "X-Api-Key";
    f.cfg.underscores_forward = true;
    add_field(&f, "X-Api-Key", "bob-key");
    add_field(&f, "X_Api_Key", "bob-key");
    add_field(&f, "Authorization", "Bearer other");
    upstream(&f, NULL, &c);
    assert_false(received_name(&c, "X-Api-Key"));
    assert_false(received_name(&c, "X_Api_Key"));
    assert_true(received(&c, "Authorization: Bearer other"));
}

static void test_upstream_x_tier_stripped_then_added(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    f.cfg.underscores_forward = true;
    add_field(&f, "Authorization", "Bearer alice-key-1");
    add_field(&f, "X-Tier-User", "root");
    add_field(&f, "x-tier-plan", "unlimited");
    add_field(&f, "X_Tier_User", "root");
    add_field(&f, "X-Tier-Anything", "1");
    struct gate_admission adm;
    assert_int_equal(admit(&f, &adm), GATE_CHECK);
    upstream(&f, &adm.check, &c);
    assert_true(received(&c, "X-Tier-User: alice"));
    assert_true(received(&c, "X-Tier-Plan: pro"));
    for (size_t i = 0; i < c.n; i++)
        assert_true(strncasecmp(c.lines[i], "X_Tier", 6) != 0 && strstr(c.lines[i], "root") == NULL &&
                    strstr(c.lines[i], "unlimited") == NULL && strncmp(c.lines[i], "X-Tier-Anything", 15) != 0);
    /* an exempt request (no check): no X-Tier-* at all */
    upstream(&f, NULL, &c);
    assert_false(received_name(&c, "X-Tier-User"));
    assert_false(received_name(&c, "X-Tier-Plan"));
}

static void test_upstream_underscores(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "X_Custom", "1");
    add_field(&f, "X_Forwarded_For", "6.6.6.6");
    add_field(&f, "Ho_st", "evil");
    upstream(&f, NULL, &c);
    assert_false(received_name(&c, "X_Custom")); /* dropped by default, like nginx */
    f.cfg.underscores_forward = true;
    upstream(&f, NULL, &c);
    assert_true(received(&c, "X_Custom: 1"));
    /* never one that spells a header the proxy sets or trusts */
    assert_false(received_name(&c, "X_Forwarded_For"));
    assert_true(received(&c, "X-Forwarded-For: 192.0.2.1"));
}

static void test_upstream_x_forwarded(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    /* an untrusted peer: its X-Forwarded-* are replaced */
    fixture_init(&f, "GET", "/", "192.0.2.1");
    add_field(&f, "Host", "api.example:8080");
    add_field(&f, "X-Forwarded-For", "6.6.6.6");
    add_field(&f, "X-Forwarded-Proto", "https");
    add_field(&f, "X-Forwarded-Host", "evil");
    upstream(&f, NULL, &c);
    assert_true(received(&c, "X-Forwarded-For: 192.0.2.1"));
    assert_true(received(&c, "X-Forwarded-Proto: http"));
    assert_true(received(&c, "X-Forwarded-Host: api.example:8080"));
    assert_false(received(&c, "X-Forwarded-Proto: https"));
    assert_false(received(&c, "X-Forwarded-Host: evil"));
    /* a trusted peer: its list, every field in order, then the peer; its proto and host kept */
    fixture_init(&f, "GET", "/", "10.0.0.1");
    trust(&f, "10.0.0.0/8");
    add_field(&f, "Host", "api.example");
    add_field(&f, "X-Forwarded-For", "198.51.100.1");
    add_field(&f, "X-Forwarded-Proto", "https");
    add_field(&f, "x-forwarded-for", "203.0.113.9, 10.1.1.1");
    upstream(&f, NULL, &c);
    assert_true(received(&c, "X-Forwarded-For: 198.51.100.1, 203.0.113.9, 10.1.1.1, 10.0.0.1"));
    assert_true(received(&c, "X-Forwarded-Proto: https"));
    assert_false(received(&c, "X-Forwarded-Proto: http"));
    size_t xff = 0;
    for (size_t i = 0; i < c.n; i++)
        xff += strncasecmp(c.lines[i], "X-Forwarded-For:", 16) == 0;
    assert_int_equal(xff, 1);
}

static void test_upstream_absolute_form_host(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    fixture_init(&f, "GET", "http://real.example:81/x", "192.0.2.1");
    add_field(&f, "Host", "ignored.example");
    upstream(&f, NULL, &c);
    assert_true(received(&c, "Host: real.example:81"));
    assert_true(received(&c, "X-Forwarded-Host: real.example:81"));
    /* HTTP/1.0 without Host: the authority is the Host */
    fixture_init(&f, "GET", "http://real.example/x", "192.0.2.1");
    upstream(&f, NULL, &c);
    assert_true(received(&c, "Host: real.example"));
}

static void test_upstream_websocket_keeps_upgrade(void **state)
{
    (void)state;
    struct fixture f;
    struct collected c;
    fixture_init(&f, "GET", "/ws", "192.0.2.1");
    add_field(&f, "Connection", "Upgrade");
    add_field(&f, "Upgrade", "websocket");
    add_field(&f, "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
    f.req.websocket = true;
    upstream(&f, NULL, &c);
    assert_true(received(&c, "Connection: Upgrade"));
    assert_true(received(&c, "Upgrade: websocket"));
    assert_true(received(&c, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="));
    f.req.websocket = false;
    upstream(&f, NULL, &c);
    assert_false(received_name(&c, "Upgrade"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bearer_key_names_its_user),
        cmocka_unit_test(test_keys_of_one_user_share_limits),
        cmocka_unit_test(test_missing_key_is_401),
        cmocka_unit_test(test_invalid_and_revoked_keys_are_401),
        cmocka_unit_test(test_key_header_takes_the_bare_key),
        cmocka_unit_test(test_no_catalog_is_503),
        cmocka_unit_test(test_anonymous_plan_per_client_ip),
        cmocka_unit_test(test_anonymous_plan_missing_from_catalog_is_401),
        cmocka_unit_test(test_trusted_proxy_rightmost_untrusted),
        cmocka_unit_test(test_several_xff_fields_are_one_list),
        cmocka_unit_test(test_exempt_paths),
        cmocka_unit_test(test_routes_select_limits),
        cmocka_unit_test(test_route_method_is_case_sensitive),
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_shadow_plan_forwards),
        cmocka_unit_test(test_cost_applies_to_rate_and_quota_not_concurrency),
        cmocka_unit_test(test_quota_refusal_is_quota_exceeded_until_the_period_ends),
        cmocka_unit_test(test_user_limits_replace_the_plans_of_their_kind_and_route),
        cmocka_unit_test(test_upstream_drops_hop_by_hop_and_connection_named),
        cmocka_unit_test(test_upstream_key_stripped_unless_forward_key),
        cmocka_unit_test(test_upstream_x_tier_stripped_then_added),
        cmocka_unit_test(test_upstream_underscores),
        cmocka_unit_test(test_upstream_x_forwarded),
        cmocka_unit_test(test_upstream_absolute_form_host),
        cmocka_unit_test(test_upstream_websocket_keeps_upgrade),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
