"""Bounds that hold without losing anything (SPEC "One request model", last bullet): the
limits one request meets, the memory store's subjects, the /metrics series, and route
prefixes no request can ever match."""
import hashlib
import json
import re
import sqlite3
import subprocess

import pytest

from conftest import TIERPROXY_BIN, _clean_env, wait_until, write_ini

MAX_RULES = 16   # LIMITER_MAX_RULES in store/limiter.h


# ---- limits one request can meet ---------------------------------------------------------

def plan_with_route_limits(catalog, n_route):
    """Plan "wide": one plan-wide rate limit plus n_route rate limits on GET /v1."""
    catalog.plan("wide", "--rate", "1000/min")
    for i in range(n_route):
        catalog.limit("wide", "--rate", "%d/min" % (1000 + i), "--route", "GET /v1")


def test_tierctl_refuses_a_17th_limit_for_one_request(catalog):
    plan_with_route_limits(catalog, MAX_RULES - 1)   # 16: the most one request may meet
    cp = catalog.run("limit", "add", "wide", "--rate", "5/s", "--route", "GET /v1", check=False)
    assert cp.returncode == 1, cp
    err = cp.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "wide" in err and "17" in err and "16" in err, err
    assert cp.stdout == "", "no limit id for a limit not added: %r" % cp.stdout
    # nothing was added: the plan still has 16 limits
    show = catalog.run("plan", "show", "wide").stdout
    assert show.count("GET /v1") == MAX_RULES - 1, show
    # a limit on another route is fine: no request meets both routes' limits
    catalog.limit("wide", "--rate", "5/s", "--route", "GET /v2")


def test_tierctl_refuses_a_plan_wide_limit_that_makes_17(catalog):
    plan_with_route_limits(catalog, MAX_RULES - 1)
    cp = catalog.run("plan", "set", "wide", "--concurrency", "3", check=False)
    assert cp.returncode == 1, cp
    assert "wide" in cp.stderr and "17" in cp.stderr, cp.stderr


def test_import_refuses_17_limits_for_one_request(catalog, tmp_path):
    plan_with_route_limits(catalog, MAX_RULES - 1)
    doc = json.loads(catalog.run("export", "-").stdout)
    plan = next(p for p in doc["plans"] if p["name"] == "wide")
    plan["limits"].append({"id": 9999, "kind": "rate", "amount": 7, "window_ms": 1000, "burst": 0,
                           "algorithm": "sliding-log", "route": "GET /v1"})
    doc["last_ids"]["limits"] = 9999
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(doc))
    cp = catalog.run("import", str(path), check=False)
    assert cp.returncode == 1, cp
    assert "wide" in cp.stderr and "17" in cp.stderr, cp.stderr


def test_check_names_a_plan_an_old_catalog_gave_17_limits(proxies, catalog, tmp_path):
    plan_with_route_limits(catalog, MAX_RULES - 1)
    # a catalog written before tierctl counted (or by hand): a 17th limit on GET /v1
    db = sqlite3.connect(str(catalog.path))
    with db:
        db.execute("INSERT INTO limits (plan_id, kind, algorithm, amount, window_ms, burst,"
                   " route_method, route_prefix) SELECT plan_id, kind, algorithm, 9, window_ms,"
                   " burst, route_method, route_prefix FROM limits WHERE route_prefix = '/v1'"
                   " LIMIT 1")
    db.close()
    ini = proxies.config(catalog, store="memory")
    path = tmp_path / "p.ini"
    write_ini(path, ini)
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(path), "--check"], capture_output=True, text=True,
                        timeout=60, env=_clean_env(), stdin=subprocess.DEVNULL)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0, out
    assert "wide" in out and "17" in out, out


# ---- the memory store's subjects -----------------------------------------------------------

def test_memory_store_forgets_the_least_recently_used_subject(proxies, catalog):
    catalog.plan("two", "--rate", "2/min")
    keys = {name: catalog.user_key("two")[1] for name in "ABCD"}
    p = proxies.start(catalog, store="memory", limits={"memory_max_subjects": 3})

    def get(name):
        return p.get("/x", key=keys[name]).status

    assert get("A") == 200
    assert get("B") == 200
    assert get("C") == 200
    assert get("A") == 200    # A used again: B is now the least recently used
    assert get("D") == 200    # a fourth subject: B is forgotten, not A
    assert get("A") == 429    # A kept its count (2 of 2)
    # B's one request was forgotten: it gets two more
    assert get("B") == 200
    assert get("B") == 200
    assert get("B") == 429


def test_memory_max_subjects_is_checked(proxies, catalog, tmp_path):
    ini = proxies.config(catalog, store="memory", limits={"memory_max_subjects": 0})
    path = tmp_path / "zero.ini"
    write_ini(path, ini)
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(path), "--check"], capture_output=True, text=True,
                        timeout=60, env=_clean_env(), stdin=subprocess.DEVNULL)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0, out
    assert "memory_max_subjects" in out, out


# ---- /metrics past 512 series ----------------------------------------------------------------

def metric_sum(text, name):
    total = 0.0
    for ln in text.splitlines():
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", ln)
        if m and m.group(1) == name:
            total += float(m.group(3))
    return total


def test_metrics_count_every_request_of_600_plans(proxies, catalog, tmp_path):
    n_plans = 600
    doc = json.loads(catalog.run("export", "-").stdout)
    doc["plans"], doc["users"], doc["api_keys"] = [], [], []
    keys = []
    for i in range(n_plans):
        pid = i + 1
        doc["plans"].append({"id": pid, "name": "p%03d" % i, "shadow": False, "limits": [
            {"id": pid, "kind": "rate", "amount": 1, "window_ms": 60000, "burst": 0,
             "algorithm": "sliding-log"}]})
        doc["users"].append({"id": "u%03d" % i, "plan": "p%03d" % i, "created": "2026-01-01T00:00:00Z"})
        key = "tp_%048x" % (i + 1)
        keys.append(key)
        doc["api_keys"].append({"id": pid, "user": "u%03d" % i, "label": "",
                                "sha256": hashlib.sha256(key.encode()).hexdigest(),
                                "created": "2026-01-01T00:00:00Z", "revoked": None})
    doc["last_ids"] = {"plans": n_plans, "limits": n_plans, "api_keys": n_plans}
    path = tmp_path / "many.json"
    path.write_text(json.dumps(doc))
    catalog.run("import", str(path))
    # one worker: every series lands in the same worker's table
    p = proxies.start(catalog, store="memory", proxy={"workers": 1})
    c = p.client()
    for key in keys:
        assert c.get("/m", key=key).status == 200
        assert c.get("/m", key=key).status == 429
    c.close()
    state = {}

    def counted():
        state["text"] = p.admin("/metrics").body.decode()
        return metric_sum(state["text"], "tierproxy_requests_total") == 2 * n_plans
    wait_until(counted, 10, interval=0.2)
    text = state["text"]
    assert metric_sum(text, "tierproxy_requests_total") == 2 * n_plans, text[-3000:]
    assert metric_sum(text, "tierproxy_rate_limit_hits_total") == n_plans, text[-3000:]
    # past the 512 series a worker keeps, the rest count under plan="_other"
    assert 'plan="_other"' in text, text[-3000:]


# ---- route prefixes no request can match -------------------------------------------------------

UNMATCHABLE = ["/a\\b", "/a%00", "/a%2Fb", "/a%2fb", "/a%5Cb", "/a/./b", "/a/../b", "/a//b", "//a",
               "/a/%2e/b", "/%75pload"]


@pytest.mark.parametrize("prefix", UNMATCHABLE)
def test_tierctl_refuses_a_route_no_request_can_match(catalog, prefix):
    catalog.plan("r", "--rate", "10/min")
    cp = catalog.run("limit", "add", "r", "--rate", "1/min", "--route", "GET " + prefix, check=False)
    assert cp.returncode == 1, cp
    err = cp.stderr.strip()
    assert len(err.splitlines()) == 1 and "prefix" in err, err
    assert "GET" not in catalog.run("plan", "show", "r").stdout, "nothing is added"


def test_tierctl_keeps_prefixes_that_requests_can_match(catalog):
    catalog.plan("r", "--rate", "10/min")
    for prefix in ["/", "/a/", "/a/.well-known", "/a/..b", "/v1.2", "/a%20b", "/caf%C3%A9"]:
        catalog.limit("r", "--rate", "1/min", "--route", "GET " + prefix)


def test_import_refuses_a_route_no_request_can_match(catalog, tmp_path):
    catalog.plan("r", "--rate", "10/min")
    catalog.limit("r", "--rate", "1/min", "--route", "GET /ok")
    doc = json.loads(catalog.run("export", "-").stdout)
    text = json.dumps(doc).replace('"GET /ok"', '"GET /a/../ok"')
    assert "/a/../ok" in text
    path = tmp_path / "bad.json"
    path.write_text(text)
    cp = catalog.run("import", str(path), check=False)
    assert cp.returncode == 1, cp
    assert "/a/../ok" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
