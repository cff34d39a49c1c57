"""SPEC "Beyond per-window rates": calendar quotas, request costs, per-user limits, plan
priority, and `tierctl usage` reading the state the proxies use (issue 13)."""
import calendar
import datetime
import hashlib
import json
import sqlite3
import threading
import time

import pytest

from conftest import assert_json_error, free_port, parse_sf_list

THREADS, PER_THREAD, REPEATS, QUOTA = 8, 20, 5, 50


def hammer(proxies_, key, target="/quota"):
    """THREADS client threads, each on its own keep-alive connection to one of the proxies,
    send PER_THREAD requests as fast as they can. Returns every answer."""
    answers = []
    lock = threading.Lock()
    errors = []
    start = threading.Barrier(THREADS)

    def worker(i):
        c = proxies_[i % len(proxies_)].client()
        mine = []
        try:
            start.wait()
            for _ in range(PER_THREAD):
                mine.append(c.get(target, key=key))
        except Exception as e:  # reported below, not swallowed
            errors.append(repr(e))
        finally:
            c.close()
            with lock:
                answers.extend(mine)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    return answers


def quota_rounds(catalog, ps):
    plan = catalog.plan("monthly", "--quota", "%d/month" % QUOTA)
    for rep in range(REPEATS):
        _, key = catalog.user_key(plan)   # a fresh user each round
        if rep == 0:
            time.sleep(0.5)               # the proxies' catalog refresh (refresh_ms 200)
        else:
            time.sleep(0.3)
        answers = hammer(ps, key)
        statuses = [r.status for r in answers]
        assert len(statuses) == THREADS * PER_THREAD
        assert set(statuses) <= {200, 429}, sorted(set(statuses))
        assert statuses.count(200) == QUOTA, "round %d: %d admitted, quota %d/month" % (
            rep, statuses.count(200), QUOTA)
        for r in answers:
            if r.status == 429:
                assert r.json()["error_code"] == "quota_exceeded", r


def test_quota_exact_across_two_proxies_on_one_redis(catalog, proxies, redis):
    prefix = "quota%d:" % id(catalog)
    ps = [proxies.start(catalog, store="redis", redis=redis, key_prefix=prefix) for _ in range(2)]
    quota_rounds(catalog, ps)


def test_quota_exact_under_concurrency_memory(catalog, proxies):
    quota_rounds(catalog, [proxies.start(catalog, store="memory")])


def seconds_to_utc_midnight(t):
    now = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    nxt = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (nxt - now).total_seconds()


def seconds_to_month_end(t):
    now = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    days = calendar.monthrange(now.year, now.month)[1]
    end = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + datetime.timedelta(days=days)
    return (end - now).total_seconds()


def test_quota_429_body_retry_after_and_headers(catalog, start_proxy):
    plan = catalog.plan("q3", "--quota", "3/day")
    _, key = catalog.user_key(plan)
    p = start_proxy(catalog, limits={"headers": "draft, ietf"})
    ok = [p.get("/x", key=key) for _ in range(3)]
    assert [r.status for r in ok] == [200] * 3, ok
    # the quota is a limit like any other in the headers: named after plan and period
    policy = ok[0].header("RateLimit-Policy")
    assert policy is not None and '"q3-day";q=3' in policy, ok[0]
    assert ok[2].header("RateLimit-Remaining") == "0", ok[2]
    r = p.get("/x", key=key)
    ra = r.header("Retry-After")
    assert ra is not None and ra.isdigit(), r
    s = int(ra)
    lo, hi = seconds_to_utc_midnight(r.t_done) - 2, seconds_to_utc_midnight(r.t_sent) + 2
    assert lo <= s <= hi, "Retry-After %d, the day ends in [%d, %d] s" % (s, lo, hi)
    assert_json_error(r, 429)
    body = r.json()
    assert body["error_code"] == "quota_exceeded", body
    assert body["retry_after"] == s, body
    # the access log names what refused
    rejected = []
    for _ in range(50):
        rejected = [e for e in p.access_log_lines() if e.get("status") == 429]
        if rejected:
            break
        time.sleep(0.1)
    assert rejected and rejected[-1].get("limit_type") == "quota", (rejected[-1:], p.access_log_lines()[-1:])


def test_cost_route_under_rate_limit_admits_exactly_ten(catalog, start_proxy):
    plan = catalog.plan("costly", "--rate", "100/min")
    catalog.run("cost", "set", plan, "POST /batch", "10")
    _, key = catalog.user_key(plan)
    p = start_proxy(catalog, limits={"headers": "draft"})
    statuses = [p.request("POST", "/batch/lookup", key=key, body=b"{}").status for _ in range(15)]
    assert statuses == [200] * 10 + [429] * 5, statuses
    # the 100 units are spent: a cost-1 request is refused too
    assert p.get("/x", key=key).status == 429


def test_cost_counts_against_quota_not_concurrency(catalog, start_proxy):
    plan = catalog.plan("costq", "--quota", "100/month", "--concurrency", "2")
    catalog.run("cost", "set", plan, "* /batch", "10")
    _, key = catalog.user_key(plan)
    p = start_proxy(catalog, limits={"headers": "draft"})
    first = p.get("/batch", key=key)
    assert first.status == 200, first
    # the quota's remaining counts units: 100 - 10
    assert first.header("RateLimit-Remaining") in ("90", "1"), first
    statuses = [p.get("/batch", key=key).status for _ in range(12)]
    assert statuses == [200] * 9 + [429] * 3, statuses


def test_longest_cost_prefix_wins(catalog, start_proxy):
    plan = catalog.plan("prefixed", "--rate", "20/min")
    catalog.run("cost", "set", plan, "* /api", "2")
    catalog.run("cost", "set", plan, "POST /api/batch", "5")
    _, key = catalog.user_key(plan)
    _, key2 = catalog.user_key(plan)
    p = start_proxy(catalog)
    # 4 x 5 = 20: the longer prefix's cost applies to POST /api/batch...
    statuses = [p.request("POST", "/api/batch/x", key=key, body=b"1").status for _ in range(5)]
    assert statuses == [200] * 4 + [429], statuses
    # ... and the shorter one's to GET on the same path: 10 x 2 = 20
    statuses = [p.get("/api/batch/x", key=key2).status for _ in range(11)]
    assert statuses == [200] * 10 + [429], statuses


def usage(catalog, user, redis, prefix):
    cp = catalog.run("usage", user, "--json", "--redis", redis.url, "--key-prefix", prefix)
    return json.loads(cp.stdout)


def by_kind(doc, kind):
    found = [lim for lim in doc["limits"] if lim["kind"] == kind]
    assert len(found) == 1, doc
    return found[0]


def test_rejected_request_adds_nothing_and_usage_shows_it(catalog, proxies, redis):
    prefix = "usage%d:" % id(catalog)
    plan = catalog.plan("small", "--quota", "5/month", "--rate", "50/min")
    catalog.run("cost", "set", plan, "POST /batch", "3")
    user, key = catalog.user_key(plan)
    p = proxies.start(catalog, store="redis", redis=redis, key_prefix=prefix)
    assert p.request("POST", "/batch", key=key, body=b"1").status == 200
    before = usage(catalog, user, redis, prefix)
    q = by_kind(before, "quota")
    assert (q["used"], q["remaining"], q["limit"]) == (3, 2, 5), q
    r = p.request("POST", "/batch", key=key, body=b"2")   # 3 more would make 6 > 5
    assert r.status == 429 and r.json()["error_code"] == "quota_exceeded", r
    after = usage(catalog, user, redis, prefix)
    assert by_kind(after, "quota")["used"] == 3, after
    assert by_kind(after, "rate")["used"] == 3, after    # the rate limit counted nothing either
    # two units are left for cost-1 requests
    assert [p.get("/x", key=key).status for _ in range(3)] == [200, 200, 429]
    q = by_kind(usage(catalog, user, redis, prefix), "quota")
    assert (q["used"], q["remaining"]) == (5, 0), q


def test_usage_shows_used_remaining_reset(catalog, proxies, redis):
    prefix = "usage2_%d:" % id(catalog)
    plan = catalog.plan("metered", "--quota", "50/month", "--rate", "10/min")
    user, key = catalog.user_key(plan)
    p = proxies.start(catalog, store="redis", redis=redis, key_prefix=prefix)
    for _ in range(4):
        assert p.get("/x", key=key).status == 200
    t = time.time()
    doc = usage(catalog, user, redis, prefix)
    assert doc["user"] == user and doc["plan"] == plan, doc
    q = by_kind(doc, "quota")
    assert (q["limit"], q["used"], q["remaining"]) == (50, 4, 46), q
    assert q["period"] == "month", q
    end = seconds_to_month_end(t)
    assert end - 5 <= q["reset_s"] <= end + 5, (q, end)
    rate = by_kind(doc, "rate")
    assert (rate["limit"], rate["used"], rate["remaining"]) == (10, 4, 6), rate
    # the text form says the same
    cp = catalog.run("usage", user, "--redis", redis.url, "--key-prefix", prefix)
    assert "50/month" in cp.stdout and "46" in cp.stdout, cp.stdout
    # the proxy's own configuration file tells tierctl where the store is
    cp = catalog.run("usage", user, "--json", "--config", str(p.ini_path))
    assert by_kind(json.loads(cp.stdout), "quota")["used"] == 4, cp.stdout


def test_usage_with_redis_away_names_it_without_its_password(catalog):
    plan = catalog.plan("away", "--quota", "50/month")
    user = catalog.user(plan)
    port = free_port()
    url = "redis://op:s3cret-pw@127.0.0.1:%d/0" % port
    cp = catalog.run("usage", user, "--redis", url, check=False)
    assert cp.returncode == 1, cp
    assert "s3cret-pw" not in cp.stderr + cp.stdout, cp.stderr
    assert "127.0.0.1:%d" % port in cp.stderr, cp.stderr


def test_usage_on_the_memory_store_is_refused_with_the_reason(catalog, proxies):
    plan = catalog.plan("mem", "--quota", "50/month")
    user = catalog.user(plan)
    p = proxies.start(catalog, store="memory")
    cp = catalog.run("usage", user, "--config", str(p.ini_path), check=False)
    assert cp.returncode == 1, cp
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "memory" in lines[0], cp.stderr


def test_user_limit_replaces_the_plans(catalog, start_proxy):
    plan = catalog.plan("base", "--rate", "2/min")
    catalog.limit(plan, "--rate", "1/min", "--route", "POST /upload")
    vip, vip_key = catalog.user_key(plan)
    _, other_key = catalog.user_key(plan)
    catalog.run("user", "limit", "add", vip, "--rate", "5/min")
    catalog.run("user", "limit", "add", vip, "--rate", "3/min", "--route", "POST /upload")
    p = start_proxy(catalog)
    assert [p.get("/x", key=vip_key).status for _ in range(6)] == [200] * 5 + [429]
    assert [p.get("/x", key=other_key).status for _ in range(3)] == [200, 200, 429]
    ups = [p.request("POST", "/upload/f", key=vip_key, body=b"1").status for _ in range(4)]
    # the route's limit is the user's own (3); the route-less rate is already spent above,
    # so only the user's plan-wide limit decides: it has no room left
    assert ups == [429] * 4, ups


def test_user_route_limit_replaces_the_plans_route_limit(catalog, start_proxy):
    plan = catalog.plan("base2", "--rate", "100/min")
    catalog.limit(plan, "--rate", "1/min", "--route", "POST /upload")
    vip, vip_key = catalog.user_key(plan)
    _, other_key = catalog.user_key(plan)
    catalog.run("user", "limit", "add", vip, "--rate", "3/min", "--route", "POST /upload")
    p = start_proxy(catalog)
    ups = [p.request("POST", "/upload/f", key=vip_key, body=b"1").status for _ in range(4)]
    assert ups == [200] * 3 + [429], ups
    ups = [p.request("POST", "/upload/f", key=other_key, body=b"1").status for _ in range(2)]
    assert ups == [200, 429], ups


def test_user_limit_remove_restores_the_plans(catalog, start_proxy):
    plan = catalog.plan("base3", "--rate", "1/min")
    vip, vip_key = catalog.user_key(plan)
    out = catalog.run("user", "limit", "add", vip, "--quota", "4/day").stdout
    limit_id = out.split()[0]
    shown = json.loads(catalog.run("user", "show", vip, "--json").stdout)
    assert [(lim["id"], lim["kind"], lim["amount"], lim["period"]) for lim in shown["limits"]] == \
        [(int(limit_id), "quota", 4, "day")], shown
    # a quota of the user's own adds to the plan's rate (different kinds)
    p = start_proxy(catalog)
    assert [p.get("/x", key=vip_key).status for _ in range(2)] == [200, 429]
    catalog.run("user", "limit", "remove", vip, limit_id)
    assert json.loads(catalog.run("user", "show", vip, "--json").stdout)["limits"] == []


def test_plan_priority(catalog):
    catalog.plan("gold", "--rate", "10/s", "--priority", "9")
    catalog.plan("plain", "--rate", "10/s")
    show = json.loads(catalog.run("plan", "show", "gold", "--json").stdout)
    assert show["priority"] == 9, show
    assert json.loads(catalog.run("plan", "show", "plain", "--json").stdout)["priority"] == 5
    catalog.run("plan", "set", "plain", "--priority", "0")
    plans = {p["name"]: p for p in json.loads(catalog.run("plan", "list", "--json").stdout)}
    assert plans["plain"]["priority"] == 0 and plans["gold"]["priority"] == 9, plans
    assert "priority" in catalog.run("plan", "show", "gold").stdout.lower()
    for bad in ("10", "-1", "x"):
        cp = catalog.run("plan", "set", "plain", "--priority", bad, check=False)
        assert cp.returncode == 2, (bad, cp)


def test_plan_show_lists_quotas_and_costs(catalog):
    catalog.plan("shown", "--rate", "100/min", "--quota", "1000/month")
    catalog.run("cost", "set", "shown", "post /batch", "10")
    doc = json.loads(catalog.run("plan", "show", "shown", "--json").stdout)
    kinds = sorted(lim["kind"] for lim in doc["limits"])
    assert kinds == ["quota", "rate"], doc
    quota = [lim for lim in doc["limits"] if lim["kind"] == "quota"][0]
    assert (quota["amount"], quota["period"]) == (1000, "month"), quota
    assert doc["costs"] == [{"route": "POST /batch", "cost": 10}], doc
    text = catalog.run("plan", "show", "shown").stdout
    assert "1000/month" in text and "POST /batch" in text, text
    catalog.run("cost", "remove", "shown", "POST /batch")
    assert json.loads(catalog.run("plan", "show", "shown", "--json").stdout)["costs"] == []


def export(catalog):
    return catalog.run("export").stdout


@pytest.mark.parametrize("args, status", [
    (("plan", "add", "bad1", "--quota", "50/year"), 2),
    (("plan", "add", "bad2", "--quota", "0/day"), 2),
    (("limit", "add", "base", "--quota", "lots"), 2),
    (("cost", "set", "base", "POST /batch", "11"), 1),          # over the 10/min rate
    (("cost", "set", "base", "* /", "11"), 1),
    (("cost", "set", "base", "POST /batch", "0"), 2),
    (("cost", "set", "nosuch", "POST /batch", "2"), 1),
    (("cost", "remove", "base", "GET /never"), 1),
    (("limit", "add", "base", "--rate", "4/min"), 1),           # under the route's cost 5
    (("limit", "add", "base", "--quota", "4/day", "--route", "* /api"), 1),
    (("user", "limit", "add", "nobody", "--rate", "5/min"), 1),
    (("user", "limit", "add", "u1", "--rate", "3/min"), 1),     # under the cost 5
    (("user", "limit", "remove", "u1", "999"), 1),
    (("user", "limit", "remove", "nobody", "1"), 1),
    (("usage", "nobody", "--redis", "redis://127.0.0.1:1/0"), 1),
])
def test_tierctl_refusals_change_nothing(catalog, args, status):
    catalog.plan("base", "--rate", "10/min")
    catalog.run("cost", "set", "base", "* /api", "5")
    catalog.user("base", "u1")
    before = export(catalog)
    cp = catalog.run(*args, check=False)
    assert cp.returncode == status, cp
    assert cp.stderr.strip(), cp
    if status == 1:
        assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert export(catalog) == before


def test_export_import_carry_quotas_priority_costs_user_limits(catalog, tmp_path):
    catalog.plan("full", "--rate", "100/min", "--quota", "5000/month", "--priority", "7")
    catalog.run("cost", "set", "full", "POST /batch", "20")
    catalog.user("full", "carol")
    catalog.run("user", "limit", "add", "carol", "--quota", "9000/month")
    catalog.run("user", "limit", "add", "carol", "--rate", "40/min", "--route", "POST /batch")
    dump = tmp_path / "cat.json"
    catalog.run("export", str(dump))
    doc = json.loads(dump.read_text())
    other = type(catalog)(tmp_path / "copy.db")
    other.run("import", str(dump))
    assert json.loads(other.run("export").stdout) == doc
    plan = [p for p in doc["plans"] if p["name"] == "full"][0]
    assert plan["priority"] == 7 and plan["costs"] == [{"route": "POST /batch", "cost": 20}], plan
    user = [u for u in doc["users"] if u["id"] == "carol"][0]
    assert sorted(lim["kind"] for lim in user["limits"]) == ["quota", "rate"], user


V1_SCHEMA = """
CREATE TABLE plans (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
  shadow INTEGER NOT NULL DEFAULT 0 CHECK (shadow IN (0, 1)));
CREATE TABLE limits (id INTEGER PRIMARY KEY AUTOINCREMENT,
  plan_id INTEGER NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
  kind TEXT NOT NULL CHECK (kind IN ('rate', 'concurrency', 'ws_messages')),
  algorithm TEXT CHECK (algorithm IN ('sliding-log', 'sliding-window', 'token-bucket', 'fixed-window')),
  amount INTEGER NOT NULL CHECK (amount >= 1), window_ms INTEGER NOT NULL DEFAULT 0 CHECK (window_ms >= 0),
  burst INTEGER NOT NULL DEFAULT 0 CHECK (burst >= 0), route_method TEXT, route_prefix TEXT,
  CHECK ((route_method IS NULL) = (route_prefix IS NULL)));
CREATE INDEX limits_plan ON limits(plan_id);
CREATE TABLE users (id TEXT PRIMARY KEY NOT NULL, plan_id INTEGER NOT NULL REFERENCES plans(id),
  created TEXT NOT NULL);
CREATE INDEX users_plan ON users(plan_id);
CREATE TABLE api_keys (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id TEXT NOT NULL,
  hash BLOB NOT NULL UNIQUE CHECK (length(hash) = 32), label TEXT NOT NULL DEFAULT '',
  created TEXT NOT NULL, revoked TEXT);
CREATE INDEX api_keys_user ON api_keys(user_id);
INSERT INTO plans (id, name) VALUES (1, 'old');
INSERT INTO limits (id, plan_id, kind, algorithm, amount, window_ms) VALUES (1, 1, 'rate', 'sliding-log', 2, 60000);
INSERT INTO limits (id, plan_id, kind, algorithm, amount, window_ms) VALUES (7, 1, 'rate', 'sliding-log', 50, 60000);
DELETE FROM limits WHERE id = 7;
INSERT INTO users (id, plan_id, created) VALUES ('olduser', 1, '2026-01-01T00:00:00Z');
PRAGMA user_version = 1;
"""


def test_old_catalog_is_served_then_upgraded(tmp_path, start_proxy):
    from conftest import Catalog
    catalog = Catalog(tmp_path / "old.db")   # written as schema 1 was, not by tierctl init
    key = "tp_old_catalog_key_0123456789abcdef"
    db = sqlite3.connect(str(catalog.path))
    db.executescript(V1_SCHEMA)
    db.execute("INSERT INTO api_keys (user_id, hash, created) VALUES ('olduser', ?, '2026-01-01T00:00:00Z')",
               (hashlib.sha256(key.encode()).digest(),))
    db.commit()
    db.close()
    # read as it is: a proxy serves it, tierctl shows it (priority 5, no costs)
    doc = json.loads(catalog.run("plan", "show", "old", "--json").stdout)
    assert doc["priority"] == 5 and doc["costs"] == [], doc
    p = start_proxy(catalog)
    assert [p.get("/x", key=key).status for _ in range(3)] == [200, 200, 429]
    # the first write migrates it; limit ids are never reused (7 was taken once)
    new_id = int(catalog.limit("old", "--quota", "10/day").stdout.split()[0])
    assert new_id > 7, new_id
    assert sqlite3.connect(str(catalog.path)).execute("PRAGMA user_version").fetchone()[0] >= 2
    time.sleep(0.6)
    assert p.get("/x", key=key).status == 429
    assert catalog.run("user", "show", "olduser").returncode == 0


def test_plan_set_quota_keeps_its_count(catalog, start_proxy):
    plan = catalog.plan("kept", "--quota", "5/day")
    _, key = catalog.user_key(plan)
    p = start_proxy(catalog)
    assert [p.get("/x", key=key).status for _ in range(3)] == [200] * 3
    cp = catalog.run("plan", "set", plan, "--quota", "4/day")
    assert "kept" in cp.stderr, cp.stderr          # the quota keeps its id, so its count
    time.sleep(0.6)                                # the proxies' catalog refresh
    assert [p.get("/x", key=key).status for _ in range(2)] == [200, 429]
