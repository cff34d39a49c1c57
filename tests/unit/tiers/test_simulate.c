/* The access-log replay: parsing a line and its times, what counts as checked or skipped,
 * and the counting: rejections per request and user, the order of the replay, concurrency
 * slots given back when requests end, the plan each line is replayed against, and the
 * report in JSON. */
#include "helpers.h"

#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "store/limiter.h"
#include "tiers/simulate.h"

/* 2026-11-25T12:00:00.000Z in Unix ms */
#define BASE_MS INT64_C(1795608000000)

static void iso(int64_t ms_from_base, char *buf, size_t len)
{
    int64_t ms = BASE_MS + ms_from_base;
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
}

/* An access-log line checked at `at` (ms from BASE_MS) that ended `took` ms later. */
static char *log_line(int64_t at, int64_t took, const char *user, const char *plan, const char *method,
                      const char *path, const char *decision, bool with_decision_time)
{
    static char buf[1024];
    char ended[40], decided[40], dt[80] = "";
    iso(at + took, ended, sizeof(ended));
    iso(at, decided, sizeof(decided));
    if (with_decision_time)
        snprintf(dt, sizeof(dt), ",\"decision_time\":\"%s\"", decided);
    snprintf(buf, sizeof(buf),
             "{\"time\":\"%s\",\"client\":\"10.0.0.%d\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
             "\"user\":\"%s\",\"plan\":\"%s\",\"decision\":\"%s\"%s,\"upstream_ms\":1,\"total_ms\":%" PRId64
             ",\"bytes_sent\":10}",
             ended, (int)(at % 7), method, path, strcmp(decision, "rejected") == 0 ? 429 : 200, user, plan,
             decision, dt, took);
    return buf;
}

static char *simple(int64_t at, const char *user)
{
    return log_line(at, 2, user, "free", "GET", "/v1/x", "allowed", true);
}

static int add(struct simulation *sim, uint64_t lineno, const char *text)
{
    char err[256];
    return simulation_add(sim, lineno, text, strlen(text), err, sizeof(err));
}

static struct simulate_options rate_options(int64_t rate, int64_t window_ms, enum limit_kind kind)
{
    struct simulate_options o = {.n_given = 1};
    o.given[0] = (struct limit_rule){.id = 1, .kind = kind, .rate = rate, .window_ms = window_ms};
    return o;
}

/* ---- parsing ---- */

static void test_time_parses_to_unix_ms(void **state)
{
    int64_t ms = 0;
    assert_int_equal(simulate_parse_time("2026-11-25T12:00:00.000Z", &ms), 0);
    assert_int_equal(ms, BASE_MS);
    assert_int_equal(simulate_parse_time("1970-01-01T00:00:00.001Z", &ms), 0);
    assert_int_equal(ms, 1);
    assert_int_equal(simulate_parse_time("2024-02-29T23:59:59.999Z", &ms), 0);
    assert_int_equal(ms, INT64_C(1709251199999));
    static const char *const bad[] = {
        "2026-11-25T12:00:00Z", "2026-11-25 12:00:00.000Z", "2026-13-25T12:00:00.000Z",
        "2026-11-25T24:00:00.000Z", "2026-11-25T12:00:00.000", "1969-12-31T23:59:59.999Z",
        "2026-11-2xT12:00:00.000Z", "", "2026-11-25T12:00:00.000Z ",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(simulate_parse_time(bad[i], &ms), -EINVAL);
    assert_int_equal(simulate_parse_time(NULL, &ms), -EINVAL);
}

static void test_a_checked_line_is_replayed_at_its_decision_time(void **state)
{
    struct simulate_line line;
    json_t *doc = NULL;
    char err[256];
    const char *text = log_line(500, 40, "alice", "free", "POST", "/up?x=1", "shadow", true);
    assert_int_equal(simulate_parse_line(text, strlen(text), &line, &doc, err, sizeof(err)), 0);
    assert_true(line.checked);
    assert_true(line.logged_rejected);   /* a shadow plan's rejection */
    assert_int_equal(line.decided_ms, BASE_MS + 500);
    assert_int_equal(line.ended_ms, BASE_MS + 540);
    assert_string_equal(line.user, "alice");
    assert_string_equal(line.plan, "free");
    assert_string_equal(line.method, "POST");
    assert_string_equal(line.path, "/up?x=1");
    json_decref(doc);

    /* without decision_time: its start, the end minus total_ms */
    text = log_line(500, 40, "alice", "free", "GET", "/", "allowed", false);
    assert_int_equal(simulate_parse_line(text, strlen(text), &line, &doc, err, sizeof(err)), 0);
    assert_int_equal(line.decided_ms, BASE_MS + 500);
    assert_false(line.logged_rejected);
    json_decref(doc);
}

static void test_lines_not_sent_to_the_limiter_are_not_checked(void **state)
{
    static const char *const decisions[] = {"exempt", "unauthenticated", "malformed", "client_closed", "error"};
    for (size_t i = 0; i < sizeof(decisions) / sizeof(decisions[0]); i++) {
        char text[256];
        snprintf(text, sizeof(text), "{\"time\":\"x\",\"status\":401,\"user\":null,\"decision\":\"%s\"}", decisions[i]);
        struct simulate_line line;
        json_t *doc = NULL;
        char err[256];
        assert_int_equal(simulate_parse_line(text, strlen(text), &line, &doc, err, sizeof(err)), 0);
        assert_false(line.checked);
        json_decref(doc);
    }
    static const char *const checked[] = {"allowed", "rejected", "shadow", "store_unavailable", "local"};
    for (size_t i = 0; i < sizeof(checked) / sizeof(checked[0]); i++) {
        char *text = log_line(0, 1, "bob", "free", "GET", "/", checked[i], true);
        struct simulate_line line;
        json_t *doc = NULL;
        char err[256];
        assert_int_equal(simulate_parse_line(text, strlen(text), &line, &doc, err, sizeof(err)), 0);
        assert_true(line.checked);
        json_decref(doc);
    }
}

static void test_what_is_no_access_log_line_says_why(void **state)
{
    static const struct { const char *text, *why; } cases[] = {
        {"tierproxy: configuration ok", "not JSON"},
        {"[1,2]", "not a JSON object"},
        {"{\"time\":\"2026-11-25T12:00:00.000Z\",\"level\":\"warn\"}", "no \"decision\""},
        {"{\"status\":200,\"decision\":\"allowed\",\"user\":\"a\",\"method\":\"GET\",\"path\":\"/\","
         "\"time\":\"yesterday\",\"total_ms\":1}", "\"time\""},
        {"{\"status\":200,\"decision\":\"allowed\",\"method\":\"GET\",\"path\":\"/\","
         "\"time\":\"2026-11-25T12:00:00.000Z\",\"total_ms\":1}", "\"user\""},
        {"{\"status\":200,\"decision\":\"allowed\",\"user\":\"a\",\"method\":\"GET\",\"path\":\"/\","
         "\"time\":\"2026-11-25T12:00:00.000Z\"}", "\"total_ms\""},
        {"{\"status\":200,\"decision\":\"allowed\",\"user\":7,\"method\":\"GET\",\"path\":\"/\"}", "string"},
        {"{\"status\":200,\"decision\":\"allowed\",\"user\":\"a\",\"method\":\"GET\",\"path\":\"/\","
         "\"time\":\"2026-11-25T12:00:00.000Z\",\"decision_time\":\"soon\"}", "\"decision_time\""},
        {"{\"time\":\"2026-11-25T12:00:00.000Z\",\"status\":200,\"user\":\"a\",\"decision\":\"all", "not JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct simulate_line line;
        json_t *doc = NULL;
        char err[256] = "";
        assert_int_equal(simulate_parse_line(cases[i].text, strlen(cases[i].text), &line, &doc, err, sizeof(err)),
                         -EINVAL);
        assert_null(doc);
        if (strstr(err, cases[i].why) == NULL)
            fail_msg("case %zu: \"%s\" does not say %s", i, err, cases[i].why);
    }
}

/* ---- counting ---- */

static void test_rejections_are_counted_per_request_and_user(void **state)
{
    struct simulate_options o = rate_options(2, 1000, LIMIT_SLIDING_LOG);
    struct simulation *sim = NULL;
    assert_int_equal(simulation_create(&o, &sim), 0);
    /* alice: 0 100 300 500 1500 -> 300 and 500 over 2/s; bob: 200 400; carol 600 */
    assert_int_equal(add(sim, 1, simple(0, "alice")), 0);
    assert_int_equal(add(sim, 2, simple(100, "alice")), 0);
    assert_int_equal(add(sim, 3, simple(200, "bob")), 0);
    assert_int_equal(add(sim, 4, simple(300, "alice")), 0);
    assert_int_equal(add(sim, 5, log_line(400, 2, "bob", "free", "GET", "/", "rejected", true)), 0);
    assert_int_equal(add(sim, 6, simple(500, "alice")), 0);
    assert_int_equal(add(sim, 7, simple(600, "carol")), 0);
    assert_int_equal(add(sim, 8, "{\"status\":401,\"decision\":\"unauthenticated\",\"user\":null}"), 0);
    assert_int_equal(add(sim, 9, "garbage"), 1);
    assert_int_equal(add(sim, 10, simple(1500, "alice")), 0);
    simulation_skip(sim);   /* line 11: too long */
    const struct simulate_report *rep = NULL;
    assert_int_equal(simulation_run(sim, &rep), 0);
    assert_int_equal(rep->lines, 11);
    assert_int_equal(rep->requests, 8);
    assert_int_equal(rep->not_checked, 1);
    assert_int_equal(rep->skipped, 2);
    assert_int_equal(rep->rejected, 2);
    assert_int_equal(rep->n_rejected_lines, 2);
    assert_int_equal(rep->rejected_lines[0], 4);
    assert_int_equal(rep->rejected_lines[1], 6);
    assert_int_equal(rep->users, 3);
    assert_int_equal(rep->users_rejected, 1);
    assert_int_equal(rep->logged_rejected, 1);      /* bob's, which 2/s allows */
    assert_int_equal(rep->newly_rejected, 2);
    assert_int_equal(rep->no_longer_rejected, 1);
    assert_int_equal(rep->n_top, 1);
    assert_string_equal(rep->top[0].user, "alice");
    assert_null(rep->top[0].client);
    assert_int_equal(rep->top[0].requests, 5);
    assert_int_equal(rep->top[0].rejected, 2);
    assert_int_equal(simulation_run(sim, &rep), -EINVAL);   /* once */
    simulation_destroy(sim);
}

static void on_done(void *arg, const struct limiter_result *result)
{
    *(bool *)arg = result->allowed;
}

static void test_each_kind_is_the_memory_stores(void **state)
{
    /* 20 requests 100 ms apart against 3/s, replayed and checked one by one through a
     * memory limiter of the test's own: the same verdicts. (Sliding log: 0 100 200, then
     * 1000 1100 1200; fixed window alike; token bucket: also 400 700 1000 1400 1700;
     * sliding window: 0 100 200, then 1100 1400 1700.) */
    static const struct { enum limit_kind kind; int rejected; } cases[] = {
        {LIMIT_SLIDING_LOG, 14}, {LIMIT_FIXED_WINDOW, 14}, {LIMIT_TOKEN_BUCKET, 12}, {LIMIT_SLIDING_WINDOW, 14},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct simulate_options o = rate_options(3, 1000, cases[c].kind);
        struct simulation *sim = NULL;
        assert_int_equal(simulation_create(&o, &sim), 0);
        for (int i = 0; i < 20; i++)
            assert_int_equal(add(sim, (uint64_t)i + 1, simple(i * 100, "alice")), 0);
        const struct simulate_report *rep = NULL;
        assert_int_equal(simulation_run(sim, &rep), 0);
        /* the same requests through a limiter of its own, one by one */
        struct memory_store *store = memory_store_create();
        struct limiter *limiter = limiter_memory_create(store);
        int expect = 0;
        for (int i = 0; i < 20; i++) {
            bool allowed = false;
            assert_int_equal(limiter_check(limiter, "u:alice", 7, o.given, 1, BASE_MS + i * 100, on_done, &allowed),
                             0);
            expect += !allowed;
        }
        limiter_destroy(limiter);
        memory_store_destroy(store);
        assert_int_equal((int)rep->rejected, expect);
        assert_int_equal((int)rep->rejected, cases[c].rejected);
        simulation_destroy(sim);
    }
}

static void test_requests_are_replayed_in_the_order_they_were_checked(void **state)
{
    /* The log is in the order requests ended: line 1 was checked at 300, line 2 at 0. */
    struct simulate_options o = rate_options(1, 1000, LIMIT_SLIDING_LOG);
    struct simulation *sim = NULL;
    assert_int_equal(simulation_create(&o, &sim), 0);
    assert_int_equal(add(sim, 1, log_line(300, 5, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 2, log_line(0, 900, "alice", "free", "GET", "/", "allowed", true)), 0);
    /* same millisecond: the log's order */
    assert_int_equal(add(sim, 3, log_line(2000, 1, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 4, log_line(2000, 1, "alice", "free", "GET", "/", "allowed", true)), 0);
    const struct simulate_report *rep = NULL;
    assert_int_equal(simulation_run(sim, &rep), 0);
    assert_int_equal(rep->n_rejected_lines, 2);
    assert_int_equal(rep->rejected_lines[0], 1);
    assert_int_equal(rep->rejected_lines[1], 4);
    simulation_destroy(sim);
}

static void test_a_concurrency_slot_is_held_until_the_request_ended(void **state)
{
    struct simulate_options o = {.n_given = 1};
    o.given[0] = (struct limit_rule){.id = 2, .kind = LIMIT_CONCURRENCY, .rate = 1, .window_ms = 30000};
    struct simulation *sim = NULL;
    assert_int_equal(simulation_create(&o, &sim), 0);
    /* checked..ended: 0..1000, 100..400 (rejected), 500..600 (rejected), 1000..1050
     * (the first ended that ms: allowed), 1020..1030 (rejected), 1050 (allowed); bob's
     * own slot meanwhile. */
    assert_int_equal(add(sim, 1, log_line(0, 1000, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 2, log_line(100, 300, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 3, log_line(500, 100, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 4, log_line(1000, 50, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 5, log_line(1020, 10, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 6, log_line(1050, 10, "alice", "free", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 7, log_line(100, 10, "bob", "free", "GET", "/", "allowed", true)), 0);
    const struct simulate_report *rep = NULL;
    assert_int_equal(simulation_run(sim, &rep), 0);
    assert_int_equal(rep->n_rejected_lines, 3);
    assert_int_equal(rep->rejected_lines[0], 2);
    assert_int_equal(rep->rejected_lines[1], 3);
    assert_int_equal(rep->rejected_lines[2], 5);
    simulation_destroy(sim);
}

static void test_bad_options_are_refused(void **state)
{
    struct simulation *sim = NULL;
    struct simulate_options none = {0};
    assert_int_equal(simulation_create(&none, &sim), -EINVAL);   /* no rules and no catalog */
    struct simulate_options o = rate_options(0, 1000, LIMIT_SLIDING_LOG);
    assert_int_equal(simulation_create(&o, &sim), -EINVAL);
    o = rate_options(1, 1000, LIMIT_SLIDING_LOG);
    o.given[1] = o.given[0];
    o.n_given = 2;
    assert_int_equal(simulation_create(&o, &sim), -EINVAL);      /* one id twice */
}

/* ---- reading a file ---- */

static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *buf = calloc(1, (size_t)n + 1);
    rewind(f);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    return buf;
}

static void test_a_file_with_an_overlong_line_and_a_cut_last_line(void **state)
{
    struct tmpdb dir;
    tmpdb_make(&dir);
    char path[128];
    snprintf(path, sizeof(path), "%s/access.log", dir.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", simple(0, "alice"));
    for (int i = 0; i < SIMULATE_MAX_LINE + 10; i++)
        fputc('x', f);
    fputc('\n', f);
    fprintf(f, "\n%s\n", simple(10, "alice"));
    const char *cut = simple(20, "alice");
    fwrite(cut, 1, 30, f);
    fclose(f);

    struct simulate_options o = rate_options(1, 60000, LIMIT_SLIDING_LOG);
    FILE *out = tmpfile(), *diag = tmpfile();
    char err[256] = "";
    assert_int_equal(simulate_file(path, &o, "1/min", true, out, diag, err, sizeof(err)), 0);
    char *report = slurp(out), *said = slurp(diag);
    json_t *doc = json_loads(report, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "lines")), 4);   /* the blank one is not counted */
    assert_int_equal(json_integer_value(json_object_get(doc, "skipped")), 2);
    assert_int_equal(json_integer_value(json_object_get(doc, "requests")), 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(doc, "rejected_lines"), 0)), 4);
    char want[256];
    snprintf(want, sizeof(want), "tierctl: %s:2: skipped: longer than %d bytes\n", path, SIMULATE_MAX_LINE);
    assert_non_null(strstr(said, want));
    snprintf(want, sizeof(want), "tierctl: %s:5: skipped: incomplete last line", path);
    assert_non_null(strstr(said, want));
    json_decref(doc);
    free(report);
    free(said);
    fclose(out);
    fclose(diag);

    /* a missing file: one line saying which and why */
    out = tmpfile();
    diag = tmpfile();
    snprintf(path, sizeof(path), "%s/absent.log", dir.dir);
    assert_int_equal(simulate_file(path, &o, "1/min", false, out, diag, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "absent.log: No such file"));
    fclose(out);
    fclose(diag);
    snprintf(path, sizeof(path), "%s/access.log", dir.dir);
    unlink(path);
    tmpdb_remove(&dir);
}

/* ---- against the catalog ---- */

struct catalog_fixture {
    struct tmpdb db;
    struct snapshot *snap;
};

static int catalog_setup(void **state)
{
    struct catalog_fixture *f = calloc(1, sizeof(*f));
    tmpdb_make(&f->db);
    struct catalog *cat = tmpdb_begin(&f->db);
    int64_t tiny = add_plan(cat, "tiny");
    int64_t roomy = add_plan(cat, "roomy");
    int64_t anon = add_plan(cat, "anon");
    add_limit(cat, tiny, 'r', 100, 60000, NULL, NULL);
    add_limit(cat, tiny, 'r', 1, 60000, "POST", "/upload");
    add_limit(cat, tiny, 'w', 1, 1000, NULL, NULL);
    add_limit(cat, roomy, 'r', 100, 60000, NULL, NULL);
    add_limit(cat, anon, 'r', 1, 60000, NULL, NULL);
    add_user(cat, "alice", tiny);
    add_user(cat, "bob", roomy);
    tmpdb_commit(cat);
    char err[256];
    if (snapshot_load(f->db.path, &f->snap, err, sizeof(err)) != 0)
        fail_msg("snapshot_load: %s", err);
    *state = f;
    return 0;
}

static int catalog_teardown(void **state)
{
    struct catalog_fixture *f = *state;
    snapshot_unref(f->snap);
    tmpdb_remove(&f->db);
    free(f);
    return 0;
}

static void test_routes_match_the_path_as_the_proxy_matched_it(void **state)
{
    struct catalog_fixture *f = *state;
    struct simulate_options o = {.snap = f->snap};
    struct simulation *sim = NULL;
    assert_int_equal(simulation_create(&o, &sim), 0);
    /* alice's POST /upload route: 1/min. Query, dot segments, double slashes and
     * percent-encoding do not hide a request from it; GET is not on it. */
    assert_int_equal(add(sim, 1, log_line(0, 1, "alice", "old", "POST", "/upload/a?x=1", "allowed", true)), 0);
    assert_int_equal(add(sim, 2, log_line(10, 1, "alice", "old", "POST", "/x/..//upload/b", "allowed", true)), 0);
    assert_int_equal(add(sim, 3, log_line(20, 1, "alice", "old", "POST", "/%75pload/c", "allowed", true)), 0);
    assert_int_equal(add(sim, 4, log_line(30, 1, "alice", "old", "GET", "/upload/d", "allowed", true)), 0);
    assert_int_equal(add(sim, 5, log_line(40, 1, "alice", "old", "POST", "/uploa%zz", "allowed", true)), 0);
    const struct simulate_report *rep = NULL;
    assert_int_equal(simulation_run(sim, &rep), 0);
    assert_int_equal(rep->n_rejected_lines, 2);
    assert_int_equal(rep->rejected_lines[0], 2);
    assert_int_equal(rep->rejected_lines[1], 3);
    simulation_destroy(sim);
}

static void test_each_line_meets_its_users_plan_or_the_plan_it_names(void **state)
{
    struct catalog_fixture *f = *state;
    struct simulate_options o = {.snap = f->snap};
    struct simulation *sim = NULL;
    assert_int_equal(simulation_create(&o, &sim), 0);
    /* bob is on roomy now, whatever the log says; ghost is gone: the plan named (anon,
     * 1/min); ghost2's plan is gone too; anonymous clients count per address. */
    assert_int_equal(add(sim, 1, log_line(0, 1, "bob", "anon", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 2, log_line(10, 1, "bob", "anon", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 3, log_line(20, 1, "ghost", "anon", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 4, log_line(30, 1, "ghost", "anon", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 5, log_line(40, 1, "ghost2", "gone", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 6, log_line(1, 1, "anonymous", "anon", "GET", "/", "allowed", true)), 0);  /* 10.0.0.1 */
    assert_int_equal(add(sim, 7, log_line(2, 1, "anonymous", "anon", "GET", "/", "allowed", true)), 0);  /* 10.0.0.2 */
    assert_int_equal(add(sim, 8, log_line(8, 1, "anonymous", "anon", "GET", "/", "allowed", true)), 0);  /* 10.0.0.1 */
    const struct simulate_report *rep = NULL;
    assert_int_equal(simulation_run(sim, &rep), 0);
    assert_int_equal(rep->requests, 7);
    assert_int_equal(rep->no_plan, 1);
    assert_int_equal(rep->users, 4);   /* bob, ghost, and two anonymous addresses */
    assert_int_equal(rep->n_rejected_lines, 2);
    assert_int_equal(rep->rejected_lines[0], 4);
    assert_int_equal(rep->rejected_lines[1], 8);
    assert_int_equal(rep->n_top, 2);
    /* equal rejections: more requests first, then by name */
    assert_string_equal(rep->top[0].user, "anonymous");
    assert_string_equal(rep->top[0].client, "10.0.0.1");
    assert_string_equal(rep->top[1].user, "ghost");

    json_t *doc = simulate_report_json(rep, "access.log", "each user's plan");
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "rejected")), 2);
    assert_int_equal(json_integer_value(json_object_get(doc, "no_plan")), 1);
    json_t *top = json_object_get(doc, "top_users");
    assert_int_equal(json_array_size(top), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(top, 0), "client")), "10.0.0.1");
    assert_null(json_object_get(json_array_get(top, 1), "client"));
    assert_int_equal(json_integer_value(json_array_get(json_object_get(doc, "rejected_lines"), 1)), 8);
    json_decref(doc);
    simulation_destroy(sim);

    /* --plan: everyone on tiny (100/min): nothing rejected */
    o.plan = snapshot_find_plan(f->snap, "tiny");
    assert_int_equal(simulation_create(&o, &sim), 0);
    assert_int_equal(add(sim, 1, log_line(0, 1, "ghost2", "gone", "GET", "/", "allowed", true)), 0);
    assert_int_equal(add(sim, 2, log_line(10, 1, "ghost2", "gone", "GET", "/", "allowed", true)), 0);
    assert_int_equal(simulation_run(sim, &rep), 0);
    assert_int_equal(rep->requests, 2);
    assert_int_equal(rep->rejected, 0);
    simulation_destroy(sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_parses_to_unix_ms),
        cmocka_unit_test(test_a_checked_line_is_replayed_at_its_decision_time),
        cmocka_unit_test(test_lines_not_sent_to_the_limiter_are_not_checked),
        cmocka_unit_test(test_what_is_no_access_log_line_says_why),
        cmocka_unit_test(test_rejections_are_counted_per_request_and_user),
        cmocka_unit_test(test_each_kind_is_the_memory_stores),
        cmocka_unit_test(test_requests_are_replayed_in_the_order_they_were_checked),
        cmocka_unit_test(test_a_concurrency_slot_is_held_until_the_request_ended),
        cmocka_unit_test(test_bad_options_are_refused),
        cmocka_unit_test(test_a_file_with_an_overlong_line_and_a_cut_last_line),
        cmocka_unit_test_setup_teardown(test_routes_match_the_path_as_the_proxy_matched_it, catalog_setup,
                                        catalog_teardown),
        cmocka_unit_test_setup_teardown(test_each_line_meets_its_users_plan_or_the_plan_it_names, catalog_setup,
                                        catalog_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
